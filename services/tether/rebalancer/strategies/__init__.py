"""The rebalancer's strategies: one module each, listed in `registry`."""
