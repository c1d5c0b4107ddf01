"""tensor ops (see docs/ops.md)."""
