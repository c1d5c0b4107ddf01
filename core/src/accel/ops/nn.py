"""nn ops (see docs/ops.md)."""
