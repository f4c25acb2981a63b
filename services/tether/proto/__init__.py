"""Generated protobuf and gRPC code for Tether's APIs; do not edit (scripts/gen-protos)."""
