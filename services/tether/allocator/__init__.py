"""The allocator: places tasks on machines with optimistic-concurrency commits to the store."""
