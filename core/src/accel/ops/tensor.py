"""Tensor ops: shape and data movement, resize, reductions, cast (see docs/ops.md).

Data-movement kernels return C-contiguous arrays, so that a backend runtime
reading an output's buffer never sees a strided view.

Quantization follows the data: per-tensor parameters pass through every op that
only moves or averages stored values; per-axis parameters follow their axis
(transpose, reshape when that axis survives intact, split/concatenate slicing or
joining the channel list) and are refused where channels would mix.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from accel.errors import GraphError, InputError, TypeInferenceError
from accel.ops.common import expect, input_work, layout_axes, normalize_axis
from accel.ops.registry import REQUIRED, Layout, OpContext, Qdq, register_op
from accel.tensor_types import QuantParams, TensorType, dtype_name

# -- helpers ------------------------------------------------------------------------


def _is_int_attr(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_tuple(v: Any, name: str) -> tuple[int, ...]:
    """An attribute holding an int or a tuple of ints, as a tuple."""
    if _is_int_attr(v):
        return (v,)
    if not (isinstance(v, tuple) and all(_is_int_attr(d) for d in v)):
        raise TypeInferenceError(f"{name} must be a tuple of integers, got {v!r}")
    return tuple(v)


def _per_axis(q: QuantParams | None) -> bool:
    return q is not None and q.axis is not None


def _with_axis(q: QuantParams, axis: int) -> QuantParams:
    return QuantParams(q.scale, q.zero_point, axis)


def _permuted_quant(q: QuantParams | None, perm: Sequence[int], rank: int) -> QuantParams | None:
    """``q`` after a transpose by ``perm``: the channel axis moves with its data."""
    if not _per_axis(q):
        return q
    assert q is not None and q.axis is not None
    return _with_axis(q, list(perm).index(q.axis % rank))


def _permutation(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    if len(axes) != rank:
        raise TypeInferenceError(f"axes {list(axes)} must name each of the {rank} input axes once")
    perm = tuple(normalize_axis(a, rank) for a in axes)
    if sorted(perm) != list(range(rank)):
        raise TypeInferenceError(f"axes {list(axes)} is not a permutation of 0..{rank - 1}")
    return perm


def _contiguous(x: np.ndarray) -> np.ndarray:
    # np.ascontiguousarray would turn a 0-d array into 1-d.
    return x if x.flags.c_contiguous else x.copy(order="C")


# -- reshape ------------------------------------------------------------------------


def _reshape_rule(attrs: Any, x: TensorType) -> TensorType:
    shape = _int_tuple(attrs["newshape"], "newshape")
    expect(
        all(d >= 0 for d in shape),
        f"newshape {list(shape)} must be concrete: no -1 (resolve it, and ONNX's copy-dim 0, when importing)",
    )
    size = math.prod(shape)
    expect(size == x.size, f"cannot reshape {list(x.shape)} ({x.size} elements) to {list(shape)} ({size} elements)")
    q = x.quant
    if _per_axis(q):
        assert q is not None and q.axis is not None
        # The channel axis survives if the same dim starts at the same flat stride.
        axis = q.axis % x.rank
        outer = math.prod(x.shape[:axis])
        new_axis = next(
            (i for i in range(len(shape)) if shape[i] == x.shape[axis] and math.prod(shape[:i]) == outer),
            None,
        )
        expect(
            new_axis is not None,
            f"reshape {list(x.shape)} -> {list(shape)} splits or merges the per-channel quantization axis {axis}",
        )
        assert new_axis is not None
        q = _with_axis(q, new_axis)
    return TensorType(shape, x.dtype, q)


def _reshape_layout(
    attrs: Mapping[str, Any], x: TensorType, perm: tuple[int, ...]
) -> tuple[Mapping[str, Any], tuple[int, ...]] | None:
    """Reading the held tensor in memory order gives the original sequence when the
    permutation only moves axes of size 1 (flattening NHWC ``[N,1,1,C]``, say)."""
    moved = [i for i in perm if x.shape[i] != 1]
    if moved != sorted(moved):
        return None
    return attrs, tuple(range(len(_reshape_rule(attrs, x).shape)))


@register_op(
    "reshape",
    layout=_reshape_layout,
    moves_data=True,
    qdq=Qdq.SELECTS,
    infer=_reshape_rule,
    attrs={"newshape": REQUIRED},
)
def reshape(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """Same elements in a new shape (row-major)."""
    return _contiguous(x).reshape(ctx.out_types[0].shape)


# -- transpose / layout_transform ---------------------------------------------------------


def _transpose_perm(attrs: Any, rank: int) -> tuple[int, ...]:
    axes = attrs["axes"]
    if axes is None:
        return tuple(range(rank - 1, -1, -1))
    return _permutation(_int_tuple(axes, "axes"), rank)


def _transpose_rule(attrs: Any, x: TensorType) -> TensorType:
    perm = _transpose_perm(attrs, x.rank)
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype, _permuted_quant(x.quant, perm, x.rank))


#: A transpose that moves one axis of at most this size to the end (or the last axis to another
#: place) copies one slice of that axis at a time: numpy's copy of the whole permuted view moves one
#: element at a time (127 us for a 1x3x224x224 uint8 image to NHWC; three slices: 39 us).
_SLICED_AXIS = 16


def _moved_axis(perm: tuple[int, ...]) -> tuple[int, int] | None:
    """(from, to) when ``perm`` moves one axis and keeps the others in order, else None."""
    n = len(perm)
    for a in range(n):
        for b in range(n):
            if a != b:
                rest = [i for i in range(n) if i != a]
                rest.insert(b, a)
                if tuple(rest) == perm:
                    return a, b
    return None


def _prepare_transpose(ctx: OpContext) -> Callable[[np.ndarray], np.ndarray]:
    """The permutation once per node: checking the axes costs more than moving a small tensor (the
    transposes at partition boundaries run once per call)."""
    t = ctx.in_types[0]
    perm = _transpose_perm(ctx.attrs, t.rank)
    out_shape = tuple(t.shape[p] for p in perm)
    if [p for p in perm if t.shape[p] != 1] == [a for a in range(t.rank) if t.shape[a] != 1]:
        # only axes of size 1 move (a 1-channel image to NHWC): the same elements in the same order
        return lambda x: x.reshape(out_shape)
    moved = _moved_axis(perm)
    if moved is not None and t.shape[moved[0]] <= _SLICED_AXIS and t.size >= 4096:
        a, b = moved
        take = [(slice(None),) * a + (i,) for i in range(t.shape[a])]
        put = [(slice(None),) * b + (i,) for i in range(t.shape[a])]

        def sliced(x: np.ndarray) -> np.ndarray:
            out = np.empty(out_shape, dtype=x.dtype)
            for src, dst in zip(take, put):
                out[dst] = x[src]
            return out

        return sliced
    return lambda x: _contiguous(np.transpose(x, perm))


@register_op(
    "transpose",
    layout=Layout.PERMUTE,
    moves_data=True,
    qdq=Qdq.SELECTS,
    infer=_transpose_rule,
    attrs={"axes": REQUIRED},
    prepare=_prepare_transpose,
)
def transpose(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """numpy transpose (``axes=None`` reverses the axes)."""
    return _contiguous(np.transpose(x, _transpose_perm(ctx.attrs, x.ndim)))


def _layout_perm(attrs: Any, rank: int) -> tuple[int, ...]:
    src, dst = attrs["src_layout"], attrs["dst_layout"]
    expect(isinstance(src, str) and isinstance(dst, str), f"layouts must be strings, got {src!r} and {dst!r}")
    expect(len(set(src)) == len(src), f"src_layout {src!r} repeats a letter")
    expect(sorted(src) == sorted(dst), f"dst_layout {dst!r} is not a permutation of src_layout {src!r}")
    expect(len(src) == rank, f"layout {src!r} has {len(src)} axes but the input has rank {rank}")
    return tuple(src.index(c) for c in dst)


def _layout_rule(attrs: Any, x: TensorType) -> TensorType:
    perm = _layout_perm(attrs, x.rank)
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype, _permuted_quant(x.quant, perm, x.rank))


@register_op(
    "layout_transform",
    layout=Layout.PERMUTE,
    moves_data=True,
    qdq=Qdq.SELECTS,
    infer=_layout_rule,
    attrs={"src_layout": REQUIRED, "dst_layout": REQUIRED},
)
def layout_transform(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """A transpose named by layouts, e.g. NCHW -> NHWC."""
    return _contiguous(np.transpose(x, _layout_perm(ctx.attrs, x.ndim)))


# -- concatenate / split ----------------------------------------------------------------


def _concat_rule(attrs: Any, *xs: TensorType) -> TensorType:
    first = xs[0]
    expect(_is_int_attr(attrs["axis"]), f"axis must be an integer, got {attrs['axis']!r}")
    expect(first.rank >= 1, "cannot concatenate scalars (rank 0)")
    axis = normalize_axis(attrs["axis"], first.rank)
    for i, t in enumerate(xs[1:], 1):
        expect(t.dtype == first.dtype, f"input {i} is {t.dtype} but input 0 is {first.dtype}; cast to one dtype")
        expect(t.rank == first.rank, f"input {i} has rank {t.rank} but input 0 has rank {first.rank}")
        same = all(a == b for k, (a, b) in enumerate(zip(t.shape, first.shape, strict=True)) if k != axis)
        expect(same, f"input {i} shape {list(t.shape)} differs from input 0 {list(first.shape)} off axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in xs)
    q = first.quant
    if q is not None and q.axis is not None and q.axis % first.rank == axis:
        # Channels are joined: every input keeps its own per-channel parameters.
        quants = [t.quant for t in xs]
        ok = all(tq is not None and tq.axis is not None and tq.axis % first.rank == axis for tq in quants)
        expect(ok, "inputs mix per-channel quantization on the concatenation axis with other quantization")
        q = QuantParams(
            np.concatenate([tq.scale for tq in quants if tq is not None]),
            np.concatenate([tq.zero_point for tq in quants if tq is not None]),
            axis,
        )
    else:
        for i, t in enumerate(xs[1:], 1):
            expect(
                t.quant == first.quant,
                f"input {i} is quantized {t.quant!r} but input 0 {first.quant!r}; use qnn.concatenate to requantize",
            )
    return TensorType(tuple(shape), first.dtype, q)


@register_op(
    "concatenate",
    layout=Layout.AXIS,
    moves_data=True,
    qdq=Qdq.INTEGER,
    qnn="qnn.concatenate",
    infer=_concat_rule,
    attrs={"axis": 0},
    num_inputs=(1, None),
)
def concatenate(ctx: OpContext, *xs: np.ndarray) -> np.ndarray:
    """Join the inputs along ``axis``."""
    return np.concatenate(xs, axis=ctx.attrs["axis"])


def _split_points(attrs: Any, x: TensorType) -> tuple[int, list[int]]:
    """(axis, split points) of a split node."""
    expect(_is_int_attr(attrs["axis"]), f"axis must be an integer, got {attrs['axis']!r}")
    expect(x.rank >= 1, "cannot split a scalar (rank 0)")
    axis = normalize_axis(attrs["axis"], x.rank)
    dim = x.shape[axis]
    ios = attrs["indices_or_sections"]
    if _is_int_attr(ios):
        expect(ios >= 1, f"indices_or_sections {ios} must be >= 1 sections")
        expect(dim % ios == 0, f"axis {axis} of size {dim} does not split into {ios} equal sections")
        step = dim // ios
        return axis, [step * i for i in range(1, ios)]
    points = list(_int_tuple(ios, "indices_or_sections"))
    expect(
        all(0 <= p <= dim for p in points) and points == sorted(points),
        f"split points {points} must be non-decreasing and within 0..{dim}",
    )
    return axis, points


def _split_rule(attrs: Any, x: TensorType) -> list[TensorType]:
    axis, points = _split_points(attrs, x)
    bounds = [0, *points, x.shape[axis]]
    q = x.quant
    out = []
    for lo, hi in itertools.pairwise(bounds):
        shape = list(x.shape)
        shape[axis] = hi - lo
        qi = q
        if _per_axis(q) and q is not None and q.axis is not None and q.axis % x.rank == axis:
            qi = QuantParams(q.scale[lo:hi], q.zero_point[lo:hi], axis) if hi > lo else None
        out.append(TensorType(tuple(shape), x.dtype, qi))
    return out


@register_op(
    "split", layout=Layout.AXIS, moves_data=True, infer=_split_rule, attrs={"indices_or_sections": REQUIRED, "axis": 0}
)
def split(ctx: OpContext, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Cut ``x`` along ``axis`` at the split points (or into equal sections)."""
    axis, points = _split_points(ctx.attrs, ctx.in_types[0])
    return tuple(_contiguous(p) for p in np.split(x, points, axis=axis))


# -- depth_to_space ---------------------------------------------------------------------


def _d2s_rule(attrs: Any, x: TensorType) -> TensorType:
    b, mode = attrs["block_size"], attrs["mode"]
    expect(_is_int_attr(b) and b >= 1, f"block_size must be an integer >= 1, got {b!r}")
    expect(mode in ("DCR", "CRD"), f"mode must be 'DCR' or 'CRD', got {mode!r}")
    expect(x.rank == 4, f"input must be 4-D, got rank {x.rank}")
    c_ax, h_ax, w_ax = layout_axes(attrs["layout"])
    c = x.shape[c_ax]
    expect(c % (b * b) == 0, f"{c} channels are not divisible by block_size^2 = {b * b}")
    expect(not _per_axis(x.quant), "per-channel quantized data cannot move channels into space; requantize first")
    shape = list(x.shape)
    shape[c_ax], shape[h_ax], shape[w_ax] = c // (b * b), x.shape[h_ax] * b, x.shape[w_ax] * b
    return TensorType(tuple(shape), x.dtype, x.quant)


@register_op(
    "nn.depth_to_space",
    layout=Layout.LAYOUT,
    moves_data=True,
    qdq=Qdq.SELECTS,
    infer=_d2s_rule,
    attrs={"block_size": REQUIRED, "layout": "NCHW", "mode": "DCR"},
)
def depth_to_space(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """ONNX DepthToSpace. DCR: channel = (i*b + j)*C' + c'; CRD: channel = c'*b*b + i*b + j."""
    b, mode = ctx.attrs["block_size"], ctx.attrs["mode"]
    out_shape = ctx.out_types[0].shape
    if ctx.attrs["layout"] == "NCHW":
        n, c, h, w = x.shape
        cc = c // (b * b)
        if mode == "DCR":
            t = x.reshape(n, b, b, cc, h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            t = x.reshape(n, cc, b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        n, h, w, c = x.shape
        cc = c // (b * b)
        if mode == "DCR":
            t = x.reshape(n, h, w, b, b, cc).transpose(0, 1, 3, 2, 4, 5)
        else:
            t = x.reshape(n, h, w, cc, b, b).transpose(0, 1, 4, 2, 5, 3)
    return _contiguous(t).reshape(out_shape)


# -- image.resize2d ---------------------------------------------------------------------

_COORD_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn")
_ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_rule(attrs: Any, x: TensorType) -> TensorType:
    expect(x.rank == 4, f"input must be 4-D, got rank {x.rank}")
    c_ax, h_ax, w_ax = layout_axes(attrs["layout"])
    size = _int_tuple(attrs["size"], "size")
    expect(len(size) == 2 and all(d >= 1 for d in size), f"size must be (out_height, out_width) >= 1, got {list(size)}")
    method, ctm, rnd = attrs["method"], attrs["coordinate_transformation_mode"], attrs["rounding_method"]
    expect(method in ("nearest_neighbor", "linear"), f"method must be 'nearest_neighbor' or 'linear', got {method!r}")
    expect(ctm in _COORD_MODES, f"coordinate_transformation_mode {ctm!r} is not one of {', '.join(_COORD_MODES)}")
    expect(rnd in _ROUNDING, f"rounding_method {rnd!r} is not one of {', '.join(_ROUNDING)}")
    expect(x.shape[h_ax] >= 1 and x.shape[w_ax] >= 1, f"cannot resize an empty image {list(x.shape)}")
    if method == "linear":
        expect(x.dtype != "bool", "linear resize needs numeric data, got bool")
    if _per_axis(x.quant):
        assert x.quant is not None and x.quant.axis is not None
        expect(x.quant.axis % 4 in (0, c_ax), "per-axis quantization on a spatial axis cannot be resized")
    shape = list(x.shape)
    shape[h_ax], shape[w_ax] = size
    return TensorType(tuple(shape), x.dtype, x.quant)


def _source_coords(out_len: int, in_len: int, mode: str) -> np.ndarray:
    """Input coordinate of each output index, in float32 exactly as ONNX Runtime computes it.

    An axis whose size does not change maps each index to itself whatever the
    mode (as ONNX Runtime does), so a same-size resize is the identity even
    under ``tf_half_pixel_for_nn``.
    """
    f32 = np.float32
    scale = f32(out_len) / f32(in_len)
    x = np.arange(out_len, dtype=f32)
    if out_len == in_len:
        return x
    half = f32(0.5)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + half) / scale
    if mode == "align_corners":
        if out_len == 1:
            return np.zeros(1, f32)
        return x * f32(in_len - 1) / f32(out_len - 1)
    if mode == "pytorch_half_pixel" and out_len == 1:
        return np.zeros(1, f32)
    return (x + half) / scale - half


def _nearest_index(coord: np.ndarray, in_len: int, rounding: str) -> np.ndarray:
    """Nearest input index of each coordinate, clamped to the axis.

    A coordinate within 1e-6 of a half-way point counts as a tie, as in ONNX
    Runtime: exact ties such as 14.5 for a 20 -> 6 half_pixel resize reach
    float32 as 14.499999 or 14.500001, and must still round the preferred way.
    """
    f32 = np.float32
    if rounding == "floor":
        idx = np.floor(coord)
    elif rounding == "ceil":
        idx = np.ceil(coord)
    else:
        low = np.floor(coord)
        frac = coord - low  # exact in float32
        tie = np.abs(frac - f32(0.5)) <= f32(1e-6)
        if rounding == "round_prefer_floor":
            up = (frac > f32(0.5)) & ~tie
        else:
            up = (frac > f32(0.5)) | tie
        idx = np.where(up, low + 1, low)
    return np.clip(idx, 0, in_len - 1).astype(np.intp)


def _linear_taps(coord: np.ndarray, in_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(i1, i2, w1, w2): the two neighbours and their weights (ONNX Runtime's bilinear setup)."""
    c = np.clip(coord, np.float32(0), np.float32(in_len - 1))
    i1 = np.minimum(c.astype(np.intp), in_len - 1)
    i2 = np.minimum(i1 + 1, in_len - 1)
    d1 = np.abs(c - i1.astype(np.float32))
    d2 = np.abs(c - i2.astype(np.float32))
    same = i1 == i2
    d1 = np.where(same, np.float32(0.5), d1)
    d2 = np.where(same, np.float32(0.5), d2)
    # i1 is weighted by the distance to i2 and vice versa.
    return i1, i2, d2, d1


def _resize_qdq(attrs: Mapping[str, Any]) -> Qdq:
    """Nearest resizing copies elements; bilinear computes new ones."""
    return Qdq.SELECTS if attrs["method"] == "nearest_neighbor" else Qdq.NONE


@register_op(
    "image.resize2d",
    layout=Layout.LAYOUT,
    qdq=_resize_qdq,
    infer=_resize_rule,
    attrs={
        "size": REQUIRED,
        "layout": "NCHW",
        "method": "nearest_neighbor",
        "coordinate_transformation_mode": "half_pixel",
        "rounding_method": "round_prefer_floor",
    },
)
def resize2d(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """ONNX Resize on the two spatial axes (nearest or bilinear, edge-clamped).

    Coordinates are computed in float32 like ONNX Runtime. Bilinear output is
    w11·X11 + w12·X12 + w21·X21 + w22·X22 in float32 (float64 for float64 and
    32/64-bit integer data); integer outputs round half away from zero.
    """
    a = ctx.attrs
    nchw = a["layout"] == "NCHW"
    h_ax, w_ax = (2, 3) if nchw else (1, 2)
    in_h, in_w = x.shape[h_ax], x.shape[w_ax]
    out_h, out_w = a["size"]
    ctm = a["coordinate_transformation_mode"]
    cy = _source_coords(out_h, in_h, ctm)
    cx = _source_coords(out_w, in_w, ctm)

    def gather(iy: np.ndarray, ix: np.ndarray) -> np.ndarray:
        # Two takes (rows, then columns) give a C-contiguous result.
        return np.take(np.take(x, iy, axis=h_ax), ix, axis=w_ax)

    if a["method"] == "nearest_neighbor":
        rnd = a["rounding_method"]
        return gather(_nearest_index(cy, in_h, rnd), _nearest_index(cx, in_w, rnd))

    y1, y2, wy1, wy2 = _linear_taps(cy, in_h)
    x1, x2, wx1, wx2 = _linear_taps(cx, in_w)
    wide = x.dtype == np.float64 or (x.dtype.kind in "iu" and x.dtype.itemsize >= 4)
    work: type[np.floating[Any]] = np.float64 if wide else np.float32

    def weight(wy: np.ndarray, wx: np.ndarray) -> np.ndarray:
        w = (wx[None, :] * wy[:, None]).astype(work)
        return w if nchw else w[:, :, None]

    out = (
        weight(wy1, wx1) * gather(y1, x1)
        + weight(wy1, wx2) * gather(y1, x2)
        + weight(wy2, wx1) * gather(y2, x1)
        + weight(wy2, wx2) * gather(y2, x2)
    )
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        out = np.clip(np.trunc(out + np.copysign(0.5, out)), info.min, info.max)
    return out.astype(x.dtype)


# -- mean -----------------------------------------------------------------------------


def _mean_axes(attrs: Any, x: TensorType) -> tuple[int, ...]:
    axes = _int_tuple(attrs["axis"], "axis")
    if not axes:
        return tuple(range(x.rank))
    norm = tuple(sorted(normalize_axis(a, x.rank) for a in axes))
    expect(len(set(norm)) == len(norm), f"axis {list(axes)} names an axis twice")
    return norm


def _mean_rule(attrs: Any, x: TensorType) -> TensorType:
    expect(attrs["keepdims"] in (True, False), f"keepdims must be a bool, got {attrs['keepdims']!r}")
    expect(x.dtype != "bool", "mean needs numeric data, got bool")
    axes = _mean_axes(attrs, x)
    expect(all(x.shape[a] > 0 for a in axes), f"mean over an empty axis of {list(x.shape)}")
    keep = bool(attrs["keepdims"])
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    q = x.quant
    if _per_axis(q):
        assert q is not None and q.axis is not None
        qa = q.axis % x.rank
        expect(qa not in axes, f"mean over the per-channel quantization axis {qa} mixes scales; dequantize first")
        if not keep:
            q = _with_axis(q, qa - sum(1 for a in axes if a < qa))
    return TensorType(shape, x.dtype, q)


def _mean_layout(
    attrs: Mapping[str, Any], x: TensorType, perm: tuple[int, ...]
) -> tuple[Mapping[str, Any], tuple[int, ...]] | None:
    """Any order: the reduced axes are remapped; without keepdims the kept axes keep their relative order."""
    rank = len(perm)
    axes = _mean_axes(attrs, x)
    new_axes = tuple(sorted(perm.index(a) for a in axes))
    if attrs["keepdims"]:
        return {**attrs, "axis": new_axes}, perm
    kept = [a for a in range(rank) if a not in axes]  # original axes, in output order
    return {**attrs, "axis": new_axes}, tuple(kept.index(perm[i]) for i in range(rank) if i not in new_axes)


@register_op(
    "mean",
    layout=_mean_layout,
    work=input_work,
    qdq=Qdq.AVERAGES,
    infer=_mean_rule,
    attrs={"axis": (), "keepdims": False},
)
def mean(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """Mean over ``axis`` (all when empty). Float data averages in float64; integers
    sum exactly and divide rounding half away from zero."""
    axes = _mean_axes(ctx.attrs, ctx.in_types[0])
    keep = bool(ctx.attrs["keepdims"])
    if x.dtype.kind == "f":
        return np.asarray(np.mean(x, axis=axes, dtype=np.float64, keepdims=keep), dtype=x.dtype)
    n = math.prod(x.shape[a] for a in axes)
    acc = np.uint64 if x.dtype == np.uint64 else np.int64
    s = np.sum(x, axis=axes, dtype=acc, keepdims=keep)
    mag = (2 * np.abs(s) + n) // (2 * n)  # |s| / n rounded half up
    return np.where(s < 0, -mag, mag).astype(x.dtype)


def _prod_rule(attrs: Any, x: TensorType) -> TensorType:
    expect(attrs["keepdims"] in (True, False), f"keepdims must be a bool, got {attrs['keepdims']!r}")
    expect(x.dtype != "bool", "prod needs numeric data, got bool")
    expect(x.quant is None, "prod of quantized data is not defined; dequantize first")
    axes = _mean_axes(attrs, x)
    keep = bool(attrs["keepdims"])
    return TensorType(tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes), x.dtype)


@register_op("prod", layout=_mean_layout, work=input_work, infer=_prod_rule, attrs={"axis": (), "keepdims": False})
def prod(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """Product over ``axis`` (all when empty; 1 over an empty axis). Integers wrap like numpy's."""
    axes = _mean_axes(ctx.attrs, ctx.in_types[0])
    return np.asarray(np.prod(x, axis=axes, keepdims=bool(ctx.attrs["keepdims"])), dtype=x.dtype)


# -- take -----------------------------------------------------------------------------


def _take_rule(attrs: Any, data: TensorType, indices: TensorType) -> TensorType:
    expect(indices.dtype in ("int32", "int64"), f"indices are {indices.dtype}; take needs int32 or int64")
    expect(data.rank >= 1, "take needs data of rank >= 1")
    axis = normalize_axis(attrs["axis"], data.rank)
    q = data.quant
    if _per_axis(q):
        assert q is not None and q.axis is not None
        qa = q.axis % data.rank
        expect(qa != axis, f"take along the per-channel quantization axis {qa}; dequantize first")
        q = _with_axis(q, qa if qa < axis else qa + indices.rank - 1)
    return TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1 :], data.dtype, q)


@register_op("take", layout=Layout.FIXED, moves_data=True, infer=_take_rule, attrs={"axis": 0}, num_inputs=2)
def take(ctx: OpContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Elements of ``data`` at run-time ``indices`` along ``axis`` (ONNX Gather, numpy take):
    negative indices count from the end; an index out of range is an InputError."""
    axis = normalize_axis(ctx.attrs["axis"], data.ndim)
    n = data.shape[axis]
    idx = indices.astype(np.int64)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = idx[(idx < -n) | (idx >= n)].reshape(-1)[0]
        raise InputError(f"take: index {int(bad)} is out of range for axis {axis} of size {n}")
    return np.take(data, np.where(idx < 0, idx + n, idx), axis=axis)


# -- cast -----------------------------------------------------------------------------


def _cast_rule(attrs: Any, x: TensorType) -> TensorType:
    try:
        dtype = dtype_name(attrs["dtype"])
    except GraphError as exc:
        raise TypeInferenceError(f"dtype attribute: {exc}") from None
    q = None
    src, dst = np.dtype(x.dtype), np.dtype(dtype)
    if x.quant is not None and src.kind in "iu" and dst.kind in "iu":
        # The stored integers keep their real meaning only if every one survives.
        si, di = np.iinfo(src), np.iinfo(dst)
        if di.min <= si.min and si.max <= di.max:
            q = x.quant
    return TensorType(x.shape, dtype, q)


@register_op("cast", layout=Layout.ELEMENTWISE, infer=_cast_rule, attrs={"dtype": REQUIRED})
def cast(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """numpy astype: float -> int truncates toward zero; -> bool is ``x != 0``."""
    dtype = np.dtype(ctx.out_types[0].dtype)
    if dtype == np.bool_:
        return np.asarray(x != 0)
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dtype)
