"""The resource broker: one per datacenter, copies agents' announced machines into the inventory."""
