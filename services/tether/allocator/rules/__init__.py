"""Placement rules: filters that rule machines out and say why, scorers that rank the rest, one
module each, applied in the order `registry` lists them."""
