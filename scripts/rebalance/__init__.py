"""The rebalancer simulator's parts: a region churned into fragments, and rounds on it."""
