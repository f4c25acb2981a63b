"""Generated code for tether.allocator.v1; do not edit (scripts/gen-protos)."""
