"""The scheduler: one leader per shard reconciles its jobs' tasks with the allocator's help."""
