"""The allocator benchmark's parts: synthetic region, job mix, fill loop, store audit, plot."""
