"""Generated code for tether.taskcontrol; do not edit (scripts/gen-protos)."""
