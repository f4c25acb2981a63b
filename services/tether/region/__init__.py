"""The local region supervisor behind `tether up`: every service as its own process."""
