"""Gavel's heterogeneity-aware accelerator scheduling: policies that divide the time of each
accelerator type among jobs (`policies/`), over a problem built from throughput profiles."""
