"""Helpers shared by the op families' type rules and kernels."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from accel.errors import TypeInferenceError
from accel.ops.registry import OpContext
from accel.tensor_types import TensorType

FLOAT_DTYPES = ("float16", "float32", "float64")
QUANT_DTYPES = ("uint8", "int8")


def expect(cond: Any, message: str) -> None:
    """Raise :class:`TypeInferenceError` with ``message`` unless ``cond`` holds."""
    if not cond:
        raise TypeInferenceError(message)


def same_as_input(attrs: Any, x: TensorType, *rest: TensorType) -> TensorType:
    return x


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    first = tuple(shapes[0]) if shapes else ()
    if all(tuple(s) == first for s in shapes[1:]):
        return first  # the common case (operands of one shape), without numpy's call
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise TypeInferenceError("shapes " + ", ".join(str(list(s)) for s in shapes) + " do not broadcast") from None


def normalize_axis(axis: int, rank: int) -> int:
    if not (-rank <= axis < max(rank, 1)):
        raise TypeInferenceError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def layout_axes(layout: str) -> tuple[int, int, int]:
    """(channel, height, width) axis indices of a 4-D layout (NCHW or NHWC)."""
    if layout not in ("NCHW", "NHWC"):
        raise TypeInferenceError(f"layout {layout!r} must be NCHW or NHWC")
    return (1, 2, 3) if layout == "NCHW" else (3, 1, 2)


# -- trait helpers (see accel.ops.registry) ------------------------------------------------


def conv_channel_axes(attrs: Mapping[str, Any], rank: int) -> tuple[int, int | None]:
    """A convolution's output channel axis and its weight's output-channel axis."""
    return str(attrs["data_layout"]).index("C"), str(attrs["kernel_layout"]).index("O")


def conv_transpose_channel_axes(attrs: Mapping[str, Any], rank: int) -> tuple[int, int | None]:
    """As :func:`conv_channel_axes`; with groups the weight's O axis holds one group's channels: None."""
    return str(attrs["data_layout"]).index("C"), (
        str(attrs["kernel_layout"]).index("O") if attrs["groups"] == 1 else None
    )


def dense_channel_axes(attrs: Mapping[str, Any], rank: int) -> tuple[int, int | None]:
    """``data @ weight.T``: channels are the output's last axis and the weight's first."""
    return rank - 1, 0


def pool_work(ctx: OpContext) -> int:
    """A pooling reads its window once per output element."""
    return ctx.out_types[0].size * math.prod(ctx.attrs["pool_size"])


def input_work(ctx: OpContext) -> int:
    """A reduction reads each input element once."""
    return ctx.in_types[0].size
