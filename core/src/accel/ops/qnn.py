"""qnn ops (see docs/ops.md): quantized tensors in, integer arithmetic inside.

Input quantization parameters come from the input types (``TensorType.quant``);
attributes only state the *output* parameters. All fixed-point arithmetic is
:mod:`accel.quant` (the single definition backends match bit for bit). The
convolutions and dense reuse the float builders of :mod:`accel.ops.nn` on
zero-point-subtracted values: every product and partial sum is an integer, exact
in float64 below 2^53 and in float32 below 2^24 (float32 is used when a bound
on the sums proves it exact, if need be over a few slices of the input channels
summed in int32), so the float result is the integer accumulator. Requantizing
runs :class:`accel.quant.Requantizer`; 8-bit add/mul switch to a table of their
definition over all 2^16 input pairs once a node has seen enough elements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from accel import quant
from accel.errors import GraphError, TypeInferenceError
from accel.ops.common import FLOAT_DTYPES, QUANT_DTYPES, broadcast_shapes, expect, layout_axes, normalize_axis
from accel.ops.nn import (
    CONV2D_ATTRS,
    CONV2D_TRANSPOSE_ATTRS,
    ConvGeometry,
    ConvTransposeGeometry,
    build_conv2d,
    build_conv2d_transpose,
    build_dense,
    conv2d_geometry,
    conv2d_macs,
    conv2d_transpose_geometry,
    conv2d_transpose_macs,
    dense_macs,
    dense_out_shape,
    scratch,
)
from accel.ops.registry import REQUIRED, Layout, OpContext, Qdq, register_op
from accel.tensor_types import QuantParams, TensorType

ACC_DTYPE = "int32"
#: dtypes a requantize / dequantize / concatenate input may have.
INT_QUANT_DTYPES = (*QUANT_DTYPES, ACC_DTYPE)

# --------------------------------------------------------------------------------------
# type-rule helpers


def _quant_of(t: TensorType, what: str, dtypes: Sequence[str] = QUANT_DTYPES) -> QuantParams:
    """The QuantParams of a quantized input, refusing float/unquantized/mis-sized ones."""
    expect(t.dtype in dtypes, f"{what} dtype {t.dtype!r} must be {' or '.join(dtypes)}")
    expect(t.quant is not None, f"{what} ({t}) is not quantized: its type has no scale/zero point")
    q = t.quant
    assert q is not None
    if q.axis is not None:
        expect(
            -t.rank <= q.axis < t.rank, f"{what} ({t}) is quantized along axis {q.axis}, out of range for rank {t.rank}"
        )
        axis = q.axis % t.rank
        expect(
            q.scale.size == t.shape[axis],
            f"{what} ({t}) has {q.scale.size} per-axis scales but dimension {axis} has size {t.shape[axis]}",
        )
    lo, hi = quant.dtype_range(t.dtype)
    expect(
        bool(np.all((q.zero_point >= lo) & (q.zero_point <= hi))),
        f"{what} zero point {q.zero_point.tolist()} is outside the {t.dtype} range [{lo}, {hi}]",
    )
    return q


def _per_tensor(q: QuantParams, what: str) -> None:
    expect(q.axis is None, f"{what} must be quantized per tensor, got per-axis quantization on axis {q.axis}")


def _params(scale: Any, zero_point: Any, axis: int | None, dtype: str, what: str) -> QuantParams:
    """QuantParams from attribute values, with a type error (not a graph error) when invalid."""
    try:
        q = QuantParams(scale, zero_point, axis)
    except GraphError as exc:
        raise TypeInferenceError(f"{what}: {exc}") from None
    lo, hi = quant.dtype_range(dtype)
    expect(
        bool(np.all((q.zero_point >= lo) & (q.zero_point <= hi))),
        f"{what} zero point {q.zero_point.tolist()} is outside the {dtype} range [{lo}, {hi}]",
    )
    return q


def _out_dtype(attrs: Mapping[str, Any], allowed: Sequence[str]) -> str:
    dt = attrs["out_dtype"]
    expect(dt in allowed, f"out_dtype {dt!r} must be {' or '.join(allowed)}")
    return str(dt)


def _check_multiplier(real: Any, what: str) -> None:
    """Refuse, at type time, a rescale that has no fixed-point encoding."""
    try:
        quant.quantize_multiplier(real)
    except quant.QuantizationError as exc:
        raise TypeInferenceError(f"{what}: {exc}") from None


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def _to_int32(acc: np.ndarray) -> np.ndarray:
    """Exact float64 accumulator -> int32 (saturating, outside the defined range only)."""
    return np.clip(np.rint(acc), quant.INT32_MIN, quant.INT32_MAX).astype(np.int32)


def _acc_quant(dq: QuantParams, wq: QuantParams, out_axis: int, repeat: int = 1) -> QuantParams:
    """Accumulator quantization: scale s_x·s_w (float32 product), zero point 0."""
    scale = dq.scale * wq.scale  # float32 x float32: the exact product rounded once
    if wq.axis is None:
        return QuantParams(scale, 0)
    return QuantParams(np.tile(scale, repeat), 0, out_axis)


def _weight_quant(t: TensorType, layout: str, what: str = "weight") -> QuantParams:
    wq = _quant_of(t, what)
    if wq.axis is not None:
        o_axis = layout.index("O")
        expect(
            wq.axis % t.rank == o_axis,
            f"{what} is quantized per axis along axis {wq.axis}, but per-channel weights must be quantized "
            f"along the output-channel axis {o_axis} of kernel layout {layout}",
        )
    return wq


# --------------------------------------------------------------------------------------
# quantize / dequantize / requantize


def _quantize_rule(attrs: Mapping[str, Any], x: TensorType) -> TensorType:
    expect(x.dtype in FLOAT_DTYPES, f"data must be float ({', '.join(FLOAT_DTYPES)}), got {x.dtype}")
    dt = _out_dtype(attrs, INT_QUANT_DTYPES)
    axis = attrs["axis"]
    if axis is not None:
        axis = normalize_axis(axis, x.rank)
    q = _params(attrs["scale"], attrs["zero_point"], axis, dt, "quantize parameters")
    if axis is not None:
        expect(q.scale.size == x.shape[axis], f"{q.scale.size} per-axis scales for axis {axis} of size {x.shape[axis]}")
    return TensorType(x.shape, dt, q)


def _prepare_quantize(ctx: OpContext) -> Callable[[np.ndarray], np.ndarray]:
    """The output parameters shaped and converted once (:class:`accel.quant.Quantizer`)."""
    x, out = ctx.in_types[0], ctx.out_types[0]
    q = out.quant
    assert q is not None
    return quant.Quantizer(q.scale, q.zero_point, out.dtype, q.axis).bind(x.rank, x.dtype)


@register_op(
    "qnn.quantize",
    layout=Layout.ELEMENTWISE,
    qdq=Qdq.QUANTIZE,
    infer=_quantize_rule,
    attrs={"scale": REQUIRED, "zero_point": REQUIRED, "axis": None, "out_dtype": "uint8"},
    prepare=_prepare_quantize,
)
def qnn_quantize(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """ONNX QuantizeLinear: ``saturate(round_half_even(x / s) + z)``."""
    return _prepare_quantize(ctx)(x)


def _dequantize_rule(attrs: Mapping[str, Any], x: TensorType) -> TensorType:
    _quant_of(x, "data", INT_QUANT_DTYPES)
    return TensorType(x.shape, "float32")


def _prepare_dequantize(ctx: OpContext) -> Callable[[np.ndarray], np.ndarray]:
    """The input parameters shaped and converted once (:class:`accel.quant.Dequantizer`)."""
    x = ctx.in_types[0]
    q = x.quant
    assert q is not None
    return quant.Dequantizer(q.scale, q.zero_point, q.axis).bind(x.rank, x.dtype)


@register_op(
    "qnn.dequantize",
    layout=Layout.ELEMENTWISE,
    qdq=Qdq.DEQUANTIZE,
    infer=_dequantize_rule,
    attrs={"axis": None},
    prepare=_prepare_dequantize,
)
def qnn_dequantize(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """ONNX DequantizeLinear: ``(q - z) * s`` in float32 (parameters from the input type)."""
    return _prepare_dequantize(ctx)(x)


def _requantize_rule(attrs: Mapping[str, Any], x: TensorType) -> TensorType:
    q = _quant_of(x, "data", INT_QUANT_DTYPES)
    dt = _out_dtype(attrs, INT_QUANT_DTYPES)
    out = _params(attrs["out_scale"], attrs["out_zero_point"], None, dt, "output parameters")
    _check_multiplier(_f64(q.scale) / float(out.scale), "requantize scale s_in/s_out")
    return TensorType(x.shape, dt, out)


def _prepare_requantize(ctx: OpContext) -> Callable[[np.ndarray], np.ndarray]:
    """The node's multipliers encoded once (:class:`accel.quant.Requantizer`), bound to its input type."""
    x, out = ctx.in_types[0], ctx.out_types[0]
    q = x.quant
    assert q is not None and out.quant is not None
    r = quant.Requantizer(q.scale, q.zero_point, out.quant.scale, out.quant.zero_point, out.dtype, q.axis)
    return r.bind(x.shape, x.dtype)


@register_op(
    "qnn.requantize",
    layout=Layout.ELEMENTWISE,
    infer=_requantize_rule,
    attrs={"out_scale": REQUIRED, "out_zero_point": REQUIRED, "out_dtype": "uint8"},
    prepare=_prepare_requantize,
)
def qnn_requantize(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """``saturate(z_out + MBQM(x - z_in, s_in / s_out))``, per channel when the input is per-axis."""
    return _prepare_requantize(ctx)(x)


# --------------------------------------------------------------------------------------
# convolutions and dense: exact integer accumulation through the float builders


def _centred(w: np.ndarray, wq: QuantParams, dtype: Any = np.float64) -> np.ndarray:
    """Weight minus its (per-channel) zero point, exact in ``dtype``."""
    z = quant.along_axis(wq.zero_point.astype(np.float64), wq.axis, w.ndim)
    return (w.astype(np.float64) - z).astype(dtype, copy=False)


#: float32 sums integers exactly while every partial sum stays below 2^24.
_F32_EXACT = 1 << 24

#: Most float32 passes (over slices of the input channels) an accumulation may be split
#: into before one float64 pass is used instead: float32 BLAS runs ~2x faster, and the
#: split adds an im2col gather and an int32 sum per slice.
MAX_F32_SPLITS = 4

#: Build a kernel for (dtype, centred weight or None, data shape, weight shape).
Builder = Callable[[Any, "np.ndarray | None", tuple[int, ...], tuple[int, ...]], Callable[..., np.ndarray]]


def _data_reach(t: TensorType) -> int:
    """``max |x − z_x|`` over the data dtype's range."""
    q = t.quant
    assert q is not None
    lo, hi = quant.dtype_range(t.dtype)
    zx = int(q.zero_point)
    return max(zx - lo, hi - zx)


def _split_channels(sums: np.ndarray, reach: int) -> list[tuple[int, int]] | None:
    """Contiguous input-channel ranges each of whose partial sums is exact in float32, or ``None``.

    ``sums[o, i]`` is ``Σ|w − z_w|`` over the taps of output channel ``o`` and
    input channel ``i``; a range ``[a, b)`` qualifies when ``reach · max_o Σ_{a≤i<b}
    sums[o, i] < 2^24``. Greedy (each range as long as it can be) gives the fewest
    ranges; ``None`` when that is more than :data:`MAX_F32_SPLITS`.
    """
    csum = np.zeros((sums.shape[0], sums.shape[1] + 1), dtype=np.int64)
    np.cumsum(sums.astype(np.int64), axis=1, out=csum[:, 1:])
    ranges: list[tuple[int, int]] = []
    start, channels = 0, sums.shape[1]
    while start < channels and len(ranges) < MAX_F32_SPLITS:
        # the longest range from `start` that qualifies (its worst output channel grows with the end)
        worst = reach * (csum[:, start + 1 :] - csum[:, start : start + 1]).max(axis=0)
        end = start + int(np.searchsorted(worst, _F32_EXACT, side="left"))
        if end == start:
            return None  # one input channel alone may pass 2^24
        ranges.append((start, end))
        start = end
    return ranges if start == channels else None


def _accumulating(
    ctx: OpContext,
    o_axis: int,
    i_axis: int | None,
    data_axis: int,
    build: Builder,
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``f(data, weight)`` = int32 ``Σ (x − z_x)(w − z_w)``, computed exactly in float.

    ``build`` wraps one of the :mod:`accel.ops.nn` builders. Every partial sum
    an output element goes through (in any summation order, any BLAS blocking)
    is bounded by ``max|x − z_x| · Σ|w − z_w|`` over that output channel's
    weights; float32 is exact below 2^24 and float64 below 2^53. With a constant
    weight the bound uses its actual values and, when the whole sum may pass
    2^24 but ``i_axis`` (the weight's input-channel axis, ``None`` for grouped
    convolutions) allows, the input channels are split into ranges that each
    stay below it: one float32 kernel per range (data sliced on ``data_axis``),
    summed in int32. A non-constant weight is bounded by its dtype range.
    """
    d, w = ctx.in_types[0], ctx.in_types[1]
    dq, wq = d.quant, w.quant
    assert dq is not None and wq is not None
    zx = int(dq.zero_point)
    reach = _data_reach(d)
    const_w = ctx.const(1)
    if const_w is None:
        wlo, whi = quant.dtype_range(w.dtype)
        zw = wq.zero_point.astype(np.int64)
        wmax = int(np.maximum(zw - wlo, whi - zw).max())
        bound = reach * wmax * (w.size // max(w.shape[o_axis], 1))
        dtype: Any = np.float32 if bound < _F32_EXACT else np.float64
        kernel = build(dtype, None, d.shape, w.shape)
        to_int = _int32_converter(bound)

        def run_any(data: np.ndarray, weight: np.ndarray) -> np.ndarray:
            return to_int(kernel(_centred_data(data, zx, dtype), _centred(weight, wq, dtype)))

        return run_any

    wc = np.abs(_centred(const_w, wq))
    keep = (o_axis,) if i_axis is None else (o_axis, i_axis)
    sums = wc.sum(axis=tuple(a for a in range(wc.ndim) if a not in keep))
    if i_axis is not None and i_axis < o_axis:
        sums = sums.T
    sums = sums.reshape(w.shape[o_axis], -1)  # [O, I] (or [O, 1] for a grouped convolution)
    bound = int(reach * sums.sum(axis=1).max()) if sums.size else 0
    to_int = _int32_converter(bound)
    ranges = None
    if bound < _F32_EXACT:
        dtype = np.float32
    elif i_axis is not None and bound <= quant.INT32_MAX:
        ranges = _split_channels(sums, reach)
        dtype = np.float64 if ranges is None else np.float32
    else:
        dtype = np.float64
    if ranges is None or len(ranges) == 1:
        kernel = build(dtype, _centred(const_w, wq, dtype), d.shape, w.shape)

        def run(data: np.ndarray, _weight: np.ndarray) -> np.ndarray:
            return to_int(kernel(_centred_data(data, zx, dtype), None))

        return run

    assert i_axis is not None
    parts = []
    for a, b in ranges:
        take_w = [slice(None)] * const_w.ndim
        take_w[i_axis] = slice(a, b)
        part_w = _centred(const_w[tuple(take_w)], wq, dtype)
        shape = list(d.shape)
        shape[data_axis] = b - a
        take_x = (slice(None),) * (data_axis % d.rank) + (slice(a, b),)
        parts.append((take_x, build(dtype, part_w, tuple(shape), part_w.shape)))

    def run_split(data: np.ndarray, _weight: np.ndarray) -> np.ndarray:
        x = _centred_data(data, zx, dtype)
        (take0, first), *rest = parts
        out = first(x[take0], None).astype(np.int32)  # each part < 2^24 and the total <= INT32_MAX
        for take, kernel in rest:
            np.add(out, kernel(x[take], None), out=out, casting="unsafe")  # exact (float64 sum of ints)
        return out

    return run_split


def _centred_data(data: np.ndarray, zx: int, dtype: Any) -> np.ndarray:
    """``data − z_x``: the integers themselves when ``z_x = 0`` (the builders convert them to
    ``dtype`` while padding or gathering, saving a pass), else in ``dtype`` in per-thread
    scratch memory (a kernel copies its input, it never returns it)."""
    if not zx:
        return data
    buf = scratch("qnn_data", data.shape, dtype)
    np.subtract(data, dtype(zx), out=buf)
    return buf


def _int32_converter(bound: int) -> Callable[[np.ndarray], np.ndarray]:
    """Exact float accumulator -> int32: a plain cast when ``bound`` proves it fits, else rounded and saturated."""
    if bound <= quant.INT32_MAX:
        return lambda acc: acc.astype(np.int32)
    return _to_int32


def _conv_rule(
    geometry: Callable[..., ConvGeometry | ConvTransposeGeometry], *, transposed: bool = False
) -> Callable[[Mapping[str, Any], TensorType, TensorType], TensorType]:
    """The type rule of a quantized convolution whose geometry ``geometry`` validates and computes."""

    def rule(attrs: Mapping[str, Any], data: TensorType, weight: TensorType) -> TensorType:
        dq = _quant_of(data, "data")
        _per_tensor(dq, "data")
        g = geometry(attrs, data.shape, weight.shape)  # validates the layouts first
        wq = _weight_quant(weight, attrs["kernel_layout"])
        channel_axis = layout_axes(attrs["data_layout"])[0]
        # a transposed convolution's weight holds C_out/groups channels: group k's output
        # channel k*og + o uses scale o
        repeat = g.groups if transposed else 1
        return TensorType(g.out_shape, ACC_DTYPE, _acc_quant(dq, wq, channel_axis, repeat=repeat))

    return rule


def _prepare_conv(
    build: Callable[..., Callable[[np.ndarray, np.ndarray | None], np.ndarray]],
) -> Callable[[OpContext], Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    """The ``prepare`` hook of a quantized convolution running the float builder ``build``."""

    def prepare(ctx: OpContext) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        layout = ctx.attrs["kernel_layout"]
        i_axis = layout.index("I") if ctx.attrs["groups"] == 1 else None
        data_axis = layout_axes(ctx.attrs["data_layout"])[0]
        return _accumulating(
            ctx,
            layout.index("O"),
            i_axis,
            data_axis,
            lambda dt, cw, ds, ws: build(ctx.attrs, ds, ws, dt, cw),
        )

    return prepare


_prepare_conv2d = _prepare_conv(build_conv2d)
_prepare_conv2d_transpose = _prepare_conv(build_conv2d_transpose)


@register_op(
    "qnn.conv2d",
    layout=Layout.CONV,
    infer=_conv_rule(conv2d_geometry),
    attrs=CONV2D_ATTRS,
    num_inputs=2,
    prepare=_prepare_conv2d,
    macs=conv2d_macs,
)
def qnn_conv2d(ctx: OpContext, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """int32 ``Σ (x - z_x)(w - z_w)``; padding contributes 0 (pads with z_x)."""
    return _prepare_conv2d(ctx)(data, weight)


@register_op(
    "qnn.conv2d_transpose",
    layout=Layout.CONV,
    infer=_conv_rule(conv2d_transpose_geometry, transposed=True),
    attrs=CONV2D_TRANSPOSE_ATTRS,
    num_inputs=2,
    prepare=_prepare_conv2d_transpose,
    macs=conv2d_transpose_macs,
)
def qnn_conv2d_transpose(ctx: OpContext, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """int32 transposed convolution of zero-point-subtracted data and weight."""
    return _prepare_conv2d_transpose(ctx)(data, weight)


def _dense_rule(attrs: Mapping[str, Any], data: TensorType, weight: TensorType) -> TensorType:
    dq = _quant_of(data, "data")
    _per_tensor(dq, "data")
    wq = _weight_quant(weight, "OI")
    shape = dense_out_shape(data.shape, weight.shape)
    return TensorType(shape, ACC_DTYPE, _acc_quant(dq, wq, len(shape) - 1))


def _prepare_dense(ctx: OpContext) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    return _accumulating(ctx, 0, 1, -1, lambda dt, cw, ds, ws: build_dense(ds, ws, dt, cw))


@register_op("qnn.dense", layout=Layout.FIXED, infer=_dense_rule, num_inputs=2, prepare=_prepare_dense, macs=dense_macs)
def qnn_dense(ctx: OpContext, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """int32 ``(x - z_x) @ (w - z_w).T``; per-channel weights give a per-axis output on the last axis."""
    return _prepare_dense(ctx)(data, weight)


# --------------------------------------------------------------------------------------
# add / mul / concatenate


def _binary_rule(what: str) -> Callable[[Mapping[str, Any], TensorType, TensorType], TensorType]:
    def rule(attrs: Mapping[str, Any], a: TensorType, b: TensorType) -> TensorType:
        qa, qb = _quant_of(a, "lhs"), _quant_of(b, "rhs")
        _per_tensor(qa, "lhs")
        _per_tensor(qb, "rhs")
        expect(a.dtype == b.dtype, f"both inputs must have one dtype, got {a.dtype} and {b.dtype}")
        shape = broadcast_shapes(a.shape, b.shape)
        out = _params(attrs["out_scale"], attrs["out_zero_point"], None, a.dtype, "output parameters")
        sa, sb, so = float(qa.scale), float(qb.scale), float(out.scale)
        if what == "add":
            t = 2.0 * max(sa, sb)
            _check_multiplier(t / (float(1 << quant.ADD_LEFT_SHIFT) * so), "add output rescale")
        else:
            _check_multiplier(sa * sb / so, "mul rescale s_a*s_b/s_out")
        return TensorType(shape, a.dtype, out)

    return rule


def _binary_args(ctx: OpContext) -> tuple[float, int, float, int, float, int, str]:
    qa, qb, out = ctx.in_types[0].quant, ctx.in_types[1].quant, ctx.out_types[0]
    assert qa is not None and qb is not None and out.quant is not None
    return (
        float(qa.scale),
        int(qa.zero_point),
        float(qb.scale),
        int(qb.zero_point),
        float(out.quant.scale),
        int(out.quant.zero_point),
        out.dtype,
    )


_OUT_ATTRS = {"out_scale": REQUIRED, "out_zero_point": REQUIRED}


#: Elements a qnn.add / qnn.mul node computes directly before tabulating all 2^16 input
#: pairs (building the table costs about as much as computing this many directly).
TABLE_AFTER_ELEMENTS = 1 << 16


class _PairOp:
    """An 8-bit binary qnn op: computed by its definition until it has seen
    :data:`TABLE_AFTER_ELEMENTS` elements, then looked up in a table of that same
    definition (so never more than about twice the cheaper of the two)."""

    def __init__(self, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], dtype: str):
        self.fn, self.dtype = fn, dtype
        self.table: np.ndarray | None = None
        self.seen = 0

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self.table is None:
            self.seen += np.broadcast(a, b).size
            if self.seen < TABLE_AFTER_ELEMENTS:
                return self.fn(a, b)
            self.table = quant.pair_table(self.fn, self.dtype)
        return quant.lookup_pairs(self.table, a, b)


def _prepare_binary(
    arith: Callable[..., np.ndarray],
) -> Callable[[OpContext], Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    def prepare(ctx: OpContext) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        sa, za, sb, zb, so, zo, dt = _binary_args(ctx)
        return _PairOp(lambda a, b: arith(a, sa, za, b, sb, zb, so, zo, dt), ctx.in_types[0].dtype)

    return prepare


_prepare_add = _prepare_binary(quant.quantized_add)
_prepare_mul = _prepare_binary(quant.quantized_mul)


@register_op(
    "qnn.add",
    layout=Layout.ELEMENTWISE,
    infer=_binary_rule("add"),
    attrs=_OUT_ATTRS,
    num_inputs=2,
    prepare=_prepare_add,
)
def qnn_add(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Both inputs rescaled to a common fixed-point scale (20 bits headroom), added, rescaled."""
    return _prepare_add(ctx)(a, b)


@register_op(
    "qnn.mul",
    layout=Layout.ELEMENTWISE,
    infer=_binary_rule("mul"),
    attrs=_OUT_ATTRS,
    num_inputs=2,
    prepare=_prepare_mul,
)
def qnn_mul(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``saturate(z_out + MBQM((a - z_a)(b - z_b), s_a*s_b/s_out))``."""
    return _prepare_mul(ctx)(a, b)


def _concatenate_rule(attrs: Mapping[str, Any], *xs: TensorType) -> TensorType:
    first = xs[0]
    rank = first.rank
    expect(rank >= 1, "cannot concatenate 0-d tensors")
    axis = normalize_axis(attrs["axis"], rank)
    out = _params(attrs["out_scale"], attrs["out_zero_point"], None, first.dtype, "output parameters")
    total = 0
    for i, x in enumerate(xs):
        q = _quant_of(x, f"input {i}", INT_QUANT_DTYPES)
        _per_tensor(q, f"input {i}")
        expect(x.dtype == first.dtype, f"input {i} has dtype {x.dtype}, input 0 has {first.dtype}: all must match")
        expect(
            x.rank == rank
            and all(d == e for k, (d, e) in enumerate(zip(x.shape, first.shape, strict=True)) if k != axis),
            f"input {i} has shape {list(x.shape)}, incompatible with {list(first.shape)} when concatenating on axis {axis}",
        )
        _check_multiplier(float(q.scale) / float(out.scale), f"input {i} rescale s_in/s_out")
        total += x.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return TensorType(tuple(shape), first.dtype, out)


def _prepare_concatenate(ctx: OpContext) -> Callable[..., np.ndarray]:
    """Each input requantized to the output parameters (passed through when already equal), then concatenated."""
    out = ctx.out_types[0]
    oq = out.quant
    assert oq is not None
    axis = normalize_axis(ctx.attrs["axis"], out.rank)
    steps: list[Callable[[np.ndarray], np.ndarray] | None] = []
    for t in ctx.in_types:
        q = t.quant
        assert q is not None
        steps.append(None if q == oq else quant.Requantizer(q.scale, q.zero_point, oq.scale, oq.zero_point, out.dtype))

    def run(*xs: np.ndarray) -> np.ndarray:
        parts = [x if step is None else step(x) for x, step in zip(xs, steps, strict=True)]
        return np.concatenate(parts, axis=axis).astype(out.dtype, copy=False)

    return run


@register_op(
    "qnn.concatenate",
    layout=Layout.AXIS,
    moves_data=True,
    infer=_concatenate_rule,
    attrs={"axis": 0, **_OUT_ATTRS},
    num_inputs=(1, None),
    prepare=_prepare_concatenate,
)
def qnn_concatenate(ctx: OpContext, *xs: np.ndarray) -> np.ndarray:
    """Each input requantized to the output parameters (copied when already equal), then concatenated."""
    return _prepare_concatenate(ctx)(*xs)
