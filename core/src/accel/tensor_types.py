"""Tensor types, quantization parameters, dtypes and frozen attributes.

A leaf module: it imports nothing of accel but :mod:`accel.errors`, so the IR
(:mod:`accel.ir`), the op registry (:mod:`accel.ops.registry`) and the
printer can all build on it without importing each other. :mod:`accel.ir`
re-exports every name, so ``from accel.ir import TensorType`` keeps working.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from accel.errors import GraphError

#: dtypes a tensor may have, by numpy name.
DTYPES = (
    "float32",
    "float64",
    "float16",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "bool",
)

#: Largest number of elements a tensor type may describe (2**40).
MAX_ELEMENTS = 1 << 40

#: The op of a node that holds a nested graph (a partition or a composite).
CALL_OP = "call"


_DTYPE_SET = frozenset(DTYPES)


_ITEMSIZE = {name: np.dtype(name).itemsize for name in DTYPES}
#: a numpy dtype's name by the dtype (``dtype.name`` is computed in Python each time it is read)
_NAMES = {np.dtype(name): name for name in DTYPES}


def np_dtype_name(dt: np.dtype) -> str:
    """``dt.name``, looked up for the dtypes of :data:`DTYPES` (numpy computes it in Python each time)."""
    return _NAMES.get(dt) or dt.name


def dtype_name(dtype: Any) -> str:
    """Normalize a numpy dtype, dtype name or type to one of :data:`DTYPES`."""
    if type(dtype) is str and dtype in _DTYPE_SET:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise GraphError(f"unknown dtype {dtype!r}") from exc
    if name not in DTYPES:
        raise GraphError(f"dtype {name!r} is not supported (supported: {', '.join(DTYPES)})")
    return name


@dataclass(frozen=True, eq=False)
class QuantParams:
    """Affine quantization: ``real = scale * (q - zero_point)``.

    ``axis is None``: per-tensor, ``scale`` and ``zero_point`` are scalars.
    ``axis`` set: per-axis (per-channel), both are 1-D along that axis.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    def __init__(self, scale: Any, zero_point: Any = 0, axis: int | None = None):
        s = np.asarray(scale, dtype=np.float32)
        z = np.asarray(zero_point, dtype=np.int64)
        if axis is None:
            if s.size != 1 or z.size != 1:
                raise GraphError(
                    f"per-tensor quantization needs one scale and one zero point, got {s.size} and {z.size}"
                )
            s, z = s.reshape(()), z.reshape(())
        else:
            s = s.reshape(-1)
            z = np.broadcast_to(z.reshape(-1), s.shape) if z.size == 1 else z.reshape(-1)
            if s.shape != z.shape:
                raise GraphError(f"per-axis quantization: {s.size} scales but {z.size} zero points")
            axis = int(axis)
        if not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise GraphError(f"quantization scale must be finite and > 0, got {s.tolist()}")
        s.setflags(write=False)
        z = z.astype(np.int32)
        z.setflags(write=False)
        object.__setattr__(self, "scale", s)
        object.__setattr__(self, "zero_point", z)
        object.__setattr__(self, "axis", axis)

    @property
    def per_axis(self) -> bool:
        return self.axis is not None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantParams):
            return NotImplemented
        return (
            self.axis == other.axis
            and self.scale.shape == other.scale.shape
            and bool(np.array_equal(self.scale, other.scale))
            and bool(np.array_equal(self.zero_point, other.zero_point))
        )

    def __hash__(self) -> int:
        return hash((self.axis, self.scale.tobytes(), self.zero_point.tobytes()))

    def __repr__(self) -> str:
        if self.axis is None:
            return f"q(scale={float(self.scale):.6g}, zp={int(self.zero_point)})"
        return f"q(axis={self.axis}, {self.scale.size} channels)"


@dataclass(frozen=True, slots=True)
class TensorType:
    """Static shape, dtype and (for quantized tensors) quantization parameters."""

    shape: tuple[int, ...]
    dtype: str
    quant: QuantParams | None = field(default=None, compare=True)
    # the element count, computed once (slots, not a dict per type: graphs hold one per value)
    _size: int = field(default=0, init=False, repr=False, compare=False)
    # the hash, computed on first use (types key the memos of type rules and permutations)
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = hash((self.shape, self.dtype, self.quant)) or 1
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other: object) -> bool:
        # (written out: types key many memos, and equal types made apart meet there often)
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.shape == other.shape and self.dtype == other.dtype and self.quant == other.quant

    def __post_init__(self) -> None:
        shape = self.shape
        if type(shape) is not tuple or not all(type(d) is int for d in shape):
            try:
                shape = tuple(int(d) for d in shape)
            except (TypeError, ValueError) as exc:
                raise GraphError(f"shape must be a sequence of integers, got {self.shape!r}") from exc
        if any(d < 0 for d in shape):
            raise GraphError(f"negative dimension in shape {list(shape)}")
        n = 1
        for d in shape:
            n *= d
        if n > MAX_ELEMENTS:
            raise GraphError(f"shape {list(shape)} has {n} elements, more than the limit 2**40")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        object.__setattr__(self, "_size", n)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self._size

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        return self._size * _ITEMSIZE[self.dtype]

    def with_shape(self, shape: Sequence[int]) -> TensorType:
        return TensorType(tuple(shape), self.dtype, self.quant)

    def with_dtype(self, dtype: Any, quant: QuantParams | None = None) -> TensorType:
        return TensorType(self.shape, dtype, quant)

    def with_quant(self, quant: QuantParams | None) -> TensorType:
        return TensorType(self.shape, self.dtype, quant)

    def __str__(self) -> str:
        q = f" {self.quant!r}" if self.quant is not None else ""
        return f"{self.dtype}[{','.join(map(str, self.shape))}]{q}"

    @classmethod
    def of(cls, array: np.ndarray, quant: QuantParams | None = None) -> TensorType:
        return cls(tuple(array.shape), np_dtype_name(array.dtype), quant)


_ATOMIC = frozenset({int, float, str, bool, type(None)})


def freeze_attr(v: Any) -> Any:
    """Make an attribute value immutable and JSON-friendly (lists become tuples)."""
    t = type(v)
    if t is int or t is float or t is str or t is bool or v is None:
        return v
    if (t is tuple or t is list) and all(type(x) in _ATOMIC for x in v):
        return v if t is tuple else tuple(v)  # (a tuple is already frozen)
    if isinstance(v, (list, tuple)):
        return tuple(freeze_attr(x) for x in v)
    if isinstance(v, np.ndarray):
        return freeze_attr(v.tolist())
    if isinstance(v, np.generic):
        return v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise GraphError(f"attribute values must be numbers, strings, bools or tuples of them, got {type(v).__name__}")


def freeze_attrs(attrs: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if isinstance(attrs, MappingProxyType):
        return attrs  # only this function makes them: already frozen
    return MappingProxyType({str(k): freeze_attr(v) for k, v in (attrs or {}).items()})
