"""Generated code for tether.taskcontrol.v1; do not edit (scripts/gen-protos)."""
