"""The health checker: marks machines down when their agent's heartbeat is gone, up when back."""
