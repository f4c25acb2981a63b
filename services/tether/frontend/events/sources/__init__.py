"""Where events come from: one module per part of the keyspace, listed in `registry.py`."""
