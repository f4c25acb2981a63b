"""The contention simulator's parts: workload, simulated world, plot."""
