"""Output sizes of 2-D convolutions and pools: the one definition every part of accel uses.

The reference kernels (:mod:`accel.ops.nn`, :mod:`accel.ops.qnn`), the type rules and
the backends' serializers compute window geometry here; accel-sdk's C++
``accel_sdk/geometry.hpp`` computes the same numbers and is tested against this module.

:func:`conv2d_geometry` and :func:`pool2d_geometry` validate an op's attributes and
shapes (:class:`~accel.errors.TypeInferenceError` with one line when they do not fit)
and return every number a kernel needs::

    from accel.ops.geometry import conv2d_geometry

    g = conv2d_geometry(node.attrs, node.inputs[0].type.shape, node.inputs[1].type.shape)
    g.oh, g.ow, (g.pt, g.pl, g.pb, g.pr), g.groups

Padding in the IR is always explicit (top, left, bottom, right): the ONNX importer
resolves ``auto_pad``; :func:`same_padding` is that rule, for a backend that must
describe a window as SAME_UPPER / SAME_LOWER.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.errors import TypeInferenceError

DATA_LAYOUTS = ("NCHW", "NHWC")
KERNEL_LAYOUTS = ("OIHW", "OHWI", "HWIO", "IHWO")
TRANSPOSE_KERNEL_LAYOUTS = ("IOHW", "OHWI")

# --------------------------------------------------------------------------------------
# attribute helpers (shared with accel.ops.nn)


def _is_int(v: Any) -> bool:
    """A Python or numpy integer, not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _ints(value: Any, n: int, name: str, *, allowed: Sequence[int] = ()) -> tuple[int, ...]:
    """Read an int or tuple attribute as ``n`` ints (an int or a 1-tuple repeats;
    with ``allowed=(2,)`` and ``n=4``, a pair ``(h, w)`` applies to both sides)."""
    if type(value) is tuple and len(value) == n and all(type(v) is int for v in value):
        return value  # the common case (a node's frozen attribute): nothing to convert
    if _is_int(value):
        vals: tuple[int, ...] = (int(value),)
    elif isinstance(value, (tuple, list)) and all(_is_int(v) for v in value):
        vals = tuple(int(v) for v in value)
    else:
        vals = ()
    sizes = sorted({1, n, *allowed})
    if len(vals) not in sizes:
        raise TypeInferenceError(
            f"{name} must be an int or a tuple of {' or '.join(map(str, sizes))} ints, got {value!r}"
        )
    if len(vals) == n:
        return vals
    if len(vals) == 1:
        return vals * n
    return vals + vals


def _pad4(value: Any) -> tuple[int, int, int, int]:
    """``padding`` as (top, left, bottom, right); accepts 1, 2 or 4 values."""
    pt, pl, pb, pr = _ints(value, 4, "padding", allowed=(2,))
    pads = (pt, pl, pb, pr)
    if not all(p >= 0 for p in pads):
        raise TypeInferenceError(f"padding must be non-negative, got {pads}")
    return pads


def _positive_pair(value: Any, name: str) -> tuple[int, int]:
    a, b = _ints(value, 2, name)
    vals = (a, b)
    if not all(v >= 1 for v in vals):
        raise TypeInferenceError(f"{name} must be positive, got {vals}")
    return vals


def _layout(value: Any, allowed: Sequence[str], name: str) -> str:
    if value not in allowed:
        raise TypeInferenceError(f"{name} {value!r} is not supported (use {', '.join(allowed)})")
    return str(value)


def _out_size(size: int, pad: int, eff: int, stride: int) -> int:
    return (size + pad - eff) // stride + 1


# --------------------------------------------------------------------------------------
# convolution geometry


@dataclass(frozen=True)
class ConvGeometry:
    """Everything a 2-D convolution kernel needs, validated (all channel counts are totals
    except ``i``, the input channels of one group)."""

    nchw: bool
    n: int
    c: int
    h: int
    w: int
    o: int
    i: int
    kh: int
    kw: int
    groups: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    pb: int
    pr: int
    oh: int
    ow: int
    kernel_layout: str

    @property
    def padded(self) -> bool:
        return any((self.pt, self.pl, self.pb, self.pr))

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        if self.nchw:
            return (self.n, self.o, self.oh, self.ow)
        return (self.n, self.oh, self.ow, self.o)

    @property
    def macs(self) -> int:
        return self.n * self.o * self.oh * self.ow * self.i * self.kh * self.kw


def _spatial(shape: Sequence[int], layout: str) -> tuple[int, int, int, int]:
    """(N, C, H, W) of a 4-D data shape."""
    if len(shape) != 4:
        raise TypeInferenceError(f"data must be 4-D ({layout}), got shape {list(shape)}")
    if layout == "NCHW":
        n, c, h, w = shape
    else:
        n, h, w, c = shape
    return n, c, h, w


def _conv_attrs(
    attrs: Mapping[str, Any], kernel_layouts: Sequence[str]
) -> tuple[str, str, tuple[int, int], tuple[int, int], tuple[int, int, int, int], int]:
    """The attributes both convolutions share, validated and with their defaults (the first of
    ``kernel_layouts`` is the default kernel layout): data layout, kernel layout, strides,
    dilation, padding, groups."""
    dl = _layout(attrs.get("data_layout", "NCHW"), DATA_LAYOUTS, "data_layout")
    kl = _layout(attrs.get("kernel_layout", kernel_layouts[0]), kernel_layouts, "kernel_layout")
    strides = _positive_pair(attrs.get("strides", (1, 1)), "strides")
    dilation = _positive_pair(attrs.get("dilation", (1, 1)), "dilation")
    pads = _pad4(attrs.get("padding", (0, 0, 0, 0)))
    groups = attrs.get("groups", 1)
    if not (isinstance(groups, int) and not isinstance(groups, bool) and groups >= 1):
        raise TypeInferenceError(f"groups must be a positive int, got {groups!r}")
    return dl, kl, strides, dilation, pads, groups


def conv2d_geometry(attrs: Mapping[str, Any], data_shape: Sequence[int], weight_shape: Sequence[int]) -> ConvGeometry:
    """Validate an ``nn.conv2d`` (or ``qnn.conv2d``) and compute its geometry."""
    dl, kl, (sh, sw), (dh, dw), (pt, pl, pb, pr), groups = _conv_attrs(attrs, KERNEL_LAYOUTS)
    n, c, h, w = _spatial(data_shape, dl)
    if len(weight_shape) != 4:
        raise TypeInferenceError(f"weight must be 4-D ({kl}), got shape {list(weight_shape)}")
    o, i, kh, kw = (weight_shape[kl.index(a)] for a in "OIHW")
    if min(o, i, kh, kw) < 1:
        raise TypeInferenceError(f"weight shape {list(weight_shape)} ({kl}) has an empty dimension")
    if c % groups:
        raise TypeInferenceError(f"groups={groups} does not divide the {c} input channels")
    if o % groups:
        raise TypeInferenceError(f"groups={groups} does not divide the {o} output channels of the weight")
    if c != i * groups:
        raise TypeInferenceError(
            f"data has {c} channels but the weight {list(weight_shape)} ({kl}) expects {i} per group x {groups} groups = {i * groups}"
        )
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if not (h + pt + pb >= eh and w + pl + pr >= ew):
        raise TypeInferenceError(
            f"kernel extent {eh}x{ew} (kernel {kh}x{kw}, dilation {dh}x{dw}) is larger than the padded input {h + pt + pb}x{w + pl + pr}"
        )
    oh, ow = _out_size(h, pt + pb, eh, sh), _out_size(w, pl + pr, ew, sw)
    return ConvGeometry(dl == "NCHW", n, c, h, w, o, i, kh, kw, groups, sh, sw, dh, dw, pt, pl, pb, pr, oh, ow, kl)


# --------------------------------------------------------------------------------------
# pooling geometry


@dataclass(frozen=True)
class PoolGeometry:
    """A 2-D pooling window; ``eb``/``er`` extend the bottom/right padding for ceil_mode's last windows."""

    nchw: bool
    n: int
    c: int
    h: int
    w: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    pb: int
    pr: int
    oh: int
    ow: int
    eb: int
    er: int

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.oh, self.ow) if self.nchw else (self.n, self.oh, self.ow, self.c)


def _pool_out(size: int, pad_begin: int, pad_end: int, eff: int, stride: int, ceil: bool) -> int:
    span = size + pad_begin + pad_end - eff
    if not ceil:
        return span // stride + 1
    out = -(-span // stride) + 1
    # as ONNX / PyTorch: a last window starting in the end padding is dropped
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


#: Geometries already worked out, by attributes and input shape: a large model repeats few pools,
#: and each is asked for again by its type rule, the partitioner and its backend's serializer
#: (bounded, for a process that compiles many models). Only valid geometries are kept.
_POOL_GEOMETRIES: dict[tuple[Any, ...], PoolGeometry] = {}
_MAX_POOL_GEOMETRIES = 4096


def pool2d_geometry(attrs: Mapping[str, Any], shape: Sequence[int]) -> PoolGeometry:
    """Validate the attributes of a 2-D pool and compute its geometry."""
    get = attrs.get
    window = (get("pool_size"), get("strides"), get("dilation"), get("padding"))
    # kept only for attributes as a node freezes them (tuples of ints, a bool, a str) and a shape of
    # ints, so that no equal but invalid spelling (a float size, 1 for True) is answered from the memo
    plain = (
        all(type(v) is tuple and _INT.issuperset(map(type, v)) for v in window)
        and type(get("ceil_mode")) is bool
        and type(get("layout")) is str
        and _INT.issuperset(map(type, shape))
    )
    key = (get("layout"), *window, get("ceil_mode"), *shape) if plain else None
    if key is not None:
        found = _POOL_GEOMETRIES.get(key)
        if found is not None:
            return found
    g = _pool2d_geometry(attrs, shape)
    if key is not None:
        if len(_POOL_GEOMETRIES) >= _MAX_POOL_GEOMETRIES:
            _POOL_GEOMETRIES.clear()
        _POOL_GEOMETRIES[key] = g
    return g


_INT = frozenset({int})


def _pool2d_geometry(attrs: Mapping[str, Any], shape: Sequence[int]) -> PoolGeometry:
    layout = _layout(attrs["layout"], DATA_LAYOUTS, "layout")
    kh, kw = _positive_pair(attrs["pool_size"], "pool_size")
    sh, sw = _positive_pair(attrs["strides"], "strides")
    dh, dw = _positive_pair(attrs["dilation"], "dilation")
    pt, pl, pb, pr = _pad4(attrs["padding"])
    n, c, h, w = _spatial(shape, layout)
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if not (max(pt, pb) < eh and max(pl, pr) < ew):
        raise TypeInferenceError(f"padding {(pt, pl, pb, pr)} must be smaller than the pooling window extent {eh}x{ew}")
    if not (h + pt + pb >= eh and w + pl + pr >= ew):
        raise TypeInferenceError(
            f"pooling window extent {eh}x{ew} is larger than the padded input {h + pt + pb}x{w + pl + pr}"
        )
    ceil = bool(attrs["ceil_mode"])
    oh, ow = _pool_out(h, pt, pb, eh, sh, ceil), _pool_out(w, pl, pr, ew, sw, ceil)
    eb = max(0, (oh - 1) * sh + eh - (h + pt + pb))
    er = max(0, (ow - 1) * sw + ew - (w + pl + pr))
    return PoolGeometry(layout == "NCHW", n, c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, oh, ow, eb, er)


def same_padding(size: int, kernel: int, stride: int = 1, dilation: int = 1, *, upper: bool = True) -> tuple[int, int]:
    """(begin, end) padding of one axis that gives ``ceil(size / stride)`` outputs (ONNX ``auto_pad``).

    The total is split evenly; an odd remainder goes to the end for SAME_UPPER
    (``upper=True``) and to the beginning for SAME_LOWER.
    """
    if not (size >= 0 and min(kernel, stride, dilation) >= 1):
        raise TypeInferenceError(f"bad window: size {size}, kernel {kernel}, stride {stride}, dilation {dilation}")
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - size)
    small, big = total // 2, total - total // 2
    return (small, big) if upper else (big, small)


__all__ = [
    "DATA_LAYOUTS",
    "KERNEL_LAYOUTS",
    "TRANSPOSE_KERNEL_LAYOUTS",
    "ConvGeometry",
    "PoolGeometry",
    "conv2d_geometry",
    "pool2d_geometry",
    "same_padding",
]
