"""The ParSync simulator's parts: allocator replicas syncing a shared store three ways."""
