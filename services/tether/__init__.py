"""Tether: a regional cluster manager in the style of Twine."""

__version__ = "0.1.0"
