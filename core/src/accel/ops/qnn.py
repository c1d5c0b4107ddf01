"""qnn ops (see docs/ops.md)."""
