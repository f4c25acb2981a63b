"""The Gavel simulator's parts: workloads, the simulated clock around the real mechanism, plots."""
