"""Op families. Importing this package registers every op in :mod:`accel.ops.registry`."""

from accel.ops import elementwise, nn, qnn, tensor  # noqa: F401  (registration side effects)
from accel.ops.registry import REQUIRED, Layout, LayoutRule, OpContext, OpDef, Qdq, available, get_op, register_op

__all__ = ["REQUIRED", "Layout", "LayoutRule", "OpContext", "OpDef", "Qdq", "available", "get_op", "register_op"]
