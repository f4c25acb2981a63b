"""Generated code for tether.allocator; do not edit (scripts/gen-protos)."""
