"""The frontend: Tether's REST API for people, the CLI and the SDK (docs/protocol.md)."""
