"""The `tether` command line."""
