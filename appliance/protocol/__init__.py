"""The runner-worker wire protocol, one home for both ends (docs/protocol.md)."""
