"""elementwise ops (see docs/ops.md)."""
