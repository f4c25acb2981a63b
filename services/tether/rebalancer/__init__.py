"""The rebalancer: improves placement over time by moving tasks through TaskControl."""
