"""qnn ops (see docs/ops.md): quantized tensors in, integer arithmetic inside.

Input quantization parameters come from the input types (``TensorType.quant``);
attributes only state the *output* parameters. All fixed-point arithmetic is
:mod:`accel.quant` (the single definition backends match bit for bit). The
convolutions and dense reuse the float builders of :mod:`accel.ops.nn` on
zero-point-subtracted values: every product and partial sum is an integer, exact
in float64 below 2^53 and in float32 below 2^24 (float32 is used when a bound
on the sums proves it exact), so the float result is the integer accumulator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from accel import quant
from accel.errors import GraphError, TypeInferenceError
from accel.ir import QuantParams, TensorType
from accel.ops.common import FLOAT_DTYPES, QUANT_DTYPES, broadcast_shapes, expect, layout_axes, normalize_axis
from accel.ops.nn import (
    build_conv2d,
    build_conv2d_transpose,
    build_dense,
    conv2d_geometry,
    conv2d_transpose_geometry,
    dense_out_shape,
)
from accel.ops.registry import REQUIRED, OpContext, register_op

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


@register_op(
    "qnn.quantize",
    infer=_quantize_rule,
    attrs={"scale": REQUIRED, "zero_point": REQUIRED, "axis": None, "out_dtype": "uint8"},
)
def qnn_quantize(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """ONNX QuantizeLinear: ``saturate(round_half_even(x / s) + z)``."""
    out = ctx.out_types[0]
    q = out.quant
    assert q is not None
    return quant.quantize(x, q.scale, q.zero_point, out.dtype, q.axis)


def _dequantize_rule(attrs: Mapping[str, Any], x: TensorType) -> TensorType:
    _quant_of(x, "data", INT_QUANT_DTYPES)
    return TensorType(x.shape, "float32")


@register_op("qnn.dequantize", infer=_dequantize_rule, attrs={"axis": None})
def qnn_dequantize(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """ONNX DequantizeLinear: ``(q - z) * s`` in float32 (parameters from the input type)."""
    q = ctx.in_types[0].quant
    assert q is not None
    return quant.dequantize(x, q.scale, q.zero_point, q.axis)


def _requantize_rule(attrs: Mapping[str, Any], x: TensorType) -> TensorType:
    q = _quant_of(x, "data", INT_QUANT_DTYPES)
    dt = _out_dtype(attrs, INT_QUANT_DTYPES)
    out = _params(attrs["out_scale"], attrs["out_zero_point"], None, dt, "output parameters")
    _check_multiplier(_f64(q.scale) / float(out.scale), "requantize scale s_in/s_out")
    return TensorType(x.shape, dt, out)


@register_op(
    "qnn.requantize",
    infer=_requantize_rule,
    attrs={"out_scale": REQUIRED, "out_zero_point": REQUIRED, "out_dtype": "uint8"},
)
def qnn_requantize(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """``saturate(z_out + MBQM(x - z_in, s_in / s_out))``, per channel when the input is per-axis."""
    q = ctx.in_types[0].quant
    out = ctx.out_types[0]
    assert q is not None and out.quant is not None
    return quant.requantize(x, q.scale, q.zero_point, out.quant.scale, out.quant.zero_point, out.dtype, q.axis)


# --------------------------------------------------------------------------------------
# convolutions and dense: exact integer accumulation through the float64 builders


def _centred(w: np.ndarray, wq: QuantParams, dtype: Any = np.float64) -> np.ndarray:
    """Weight minus its (per-channel) zero point, exact in ``dtype``."""
    z = quant.along_axis(wq.zero_point.astype(np.float64), wq.axis, w.ndim)
    return (w.astype(np.float64) - z).astype(dtype, copy=False)


#: float32 sums integers exactly while every partial sum stays below 2^24.
_F32_EXACT = float(1 << 24)


def _compute_dtype(ctx: OpContext, o_axis: int) -> type[np.floating]:
    """float32 when the accumulation provably stays exact in it, else float64.

    Every partial sum an output element goes through (in any summation order,
    any BLAS blocking) is bounded by ``max|x − z_x| · Σ|w − z_w|`` over the
    weights of that output channel; below 2^24 float32 is exact and twice as
    fast. A non-constant weight is bounded by its dtype range.
    """
    d, w = ctx.in_types[0], ctx.in_types[1]
    dq, wq = d.quant, w.quant
    assert dq is not None and wq is not None
    lo, hi = quant.dtype_range(d.dtype)
    zx = int(dq.zero_point)
    xmax = max(zx - lo, hi - zx)
    const_w = ctx.const(1)
    if const_w is not None:
        centred = np.abs(_centred(const_w, wq))
        other = tuple(a for a in range(centred.ndim) if a != o_axis)
        wsum = float(centred.sum(axis=other).max()) if centred.size else 0.0
    else:
        wlo, whi = quant.dtype_range(w.dtype)
        zw = wq.zero_point.astype(np.int64)
        wmax = float(np.maximum(zw - wlo, whi - zw).max())
        wsum = wmax * (w.size // max(w.shape[o_axis], 1))
    return np.float32 if xmax * wsum < _F32_EXACT else np.float64


def _accumulating(
    ctx: OpContext,
    o_axis: int,
    build: Callable[[Any, np.ndarray | None], Callable[[np.ndarray, np.ndarray | None], np.ndarray]],
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``f(data, weight)`` = int32 ``Σ (x − z_x)(w − z_w)``, computed exactly in float.

    ``build(dtype, centred_weight_or_None)`` is one of the :mod:`accel.ops.nn`
    builders; a constant weight is centred and packed once, here.
    """
    dq, wq = ctx.in_types[0].quant, ctx.in_types[1].quant
    assert dq is not None and wq is not None
    zx = float(dq.zero_point)
    dtype = _compute_dtype(ctx, o_axis)
    const_w = ctx.const(1)
    kernel = build(dtype, None if const_w is None else _centred(const_w, wq, dtype))

    def run(data: np.ndarray, weight: np.ndarray) -> np.ndarray:
        x = data.astype(dtype)
        if zx:
            x -= dtype(zx)
        return _to_int32(kernel(x, None if const_w is not None else _centred(weight, wq, dtype)))

    return run


def _conv2d_rule(attrs: Mapping[str, Any], data: TensorType, weight: TensorType) -> TensorType:
    dq = _quant_of(data, "data")
    _per_tensor(dq, "data")
    g = conv2d_geometry(attrs, data.shape, weight.shape)  # validates the layouts first
    wq = _weight_quant(weight, attrs["kernel_layout"])
    channel_axis = layout_axes(attrs["data_layout"])[0]
    return TensorType(g.out_shape, ACC_DTYPE, _acc_quant(dq, wq, channel_axis))


def _prepare_conv2d(ctx: OpContext) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    d, w = ctx.in_types[0], ctx.in_types[1]
    o_axis = ctx.attrs["kernel_layout"].index("O")
    return _accumulating(ctx, o_axis, lambda dt, cw: build_conv2d(ctx.attrs, d.shape, w.shape, dt, cw))


def _conv2d_macs(ctx: OpContext) -> int:
    return conv2d_geometry(ctx.attrs, ctx.in_types[0].shape, ctx.in_types[1].shape).macs


_CONV_ATTRS = {
    "strides": (1, 1),
    "padding": (0, 0, 0, 0),
    "dilation": (1, 1),
    "groups": 1,
    "data_layout": "NCHW",
}


@register_op(
    "qnn.conv2d",
    infer=_conv2d_rule,
    attrs={**_CONV_ATTRS, "kernel_layout": "OIHW"},
    num_inputs=2,
    prepare=_prepare_conv2d,
    macs=_conv2d_macs,
)
def qnn_conv2d(ctx: OpContext, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """int32 ``Σ (x - z_x)(w - z_w)``; padding contributes 0 (pads with z_x)."""
    return _prepare_conv2d(ctx)(data, weight)


def _conv2d_transpose_rule(attrs: Mapping[str, Any], data: TensorType, weight: TensorType) -> TensorType:
    dq = _quant_of(data, "data")
    _per_tensor(dq, "data")
    g = conv2d_transpose_geometry(attrs, data.shape, weight.shape)  # validates the layouts first
    wq = _weight_quant(weight, attrs["kernel_layout"])
    channel_axis = layout_axes(attrs["data_layout"])[0]
    # the weight holds C_out/groups channels; group k's output channel k*og + o uses scale o
    return TensorType(g.out_shape, ACC_DTYPE, _acc_quant(dq, wq, channel_axis, repeat=g.groups))


def _prepare_conv2d_transpose(ctx: OpContext) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    d, w = ctx.in_types[0], ctx.in_types[1]
    o_axis = ctx.attrs["kernel_layout"].index("O")
    return _accumulating(ctx, o_axis, lambda dt, cw: build_conv2d_transpose(ctx.attrs, d.shape, w.shape, dt, cw))


def _conv2d_transpose_macs(ctx: OpContext) -> int:
    return conv2d_transpose_geometry(ctx.attrs, ctx.in_types[0].shape, ctx.in_types[1].shape).macs


@register_op(
    "qnn.conv2d_transpose",
    infer=_conv2d_transpose_rule,
    attrs={**_CONV_ATTRS, "output_padding": (0, 0), "kernel_layout": "IOHW"},
    num_inputs=2,
    prepare=_prepare_conv2d_transpose,
    macs=_conv2d_transpose_macs,
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
    d, w = ctx.in_types[0], ctx.in_types[1]
    return _accumulating(ctx, 0, lambda dt, cw: build_dense(d.shape, w.shape, dt, cw))


def _dense_macs(ctx: OpContext) -> int:
    d, w = ctx.in_types[0], ctx.in_types[1]
    return d.size // max(d.shape[-1], 1) * w.shape[0] * w.shape[1]


@register_op("qnn.dense", infer=_dense_rule, num_inputs=2, prepare=_prepare_dense, macs=_dense_macs)
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


@register_op("qnn.add", infer=_binary_rule("add"), attrs=_OUT_ATTRS, num_inputs=2)
def qnn_add(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Both inputs rescaled to a common fixed-point scale (20 bits headroom), added, rescaled."""
    sa, za, sb, zb, so, zo, dt = _binary_args(ctx)
    return quant.quantized_add(a, sa, za, b, sb, zb, so, zo, dt)


@register_op("qnn.mul", infer=_binary_rule("mul"), attrs=_OUT_ATTRS, num_inputs=2)
def qnn_mul(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``saturate(z_out + MBQM((a - z_a)(b - z_b), s_a*s_b/s_out))``."""
    sa, za, sb, zb, so, zo, dt = _binary_args(ctx)
    return quant.quantized_mul(a, sa, za, b, sb, zb, so, zo, dt)


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


@register_op(
    "qnn.concatenate",
    infer=_concatenate_rule,
    attrs={"axis": 0, **_OUT_ATTRS},
    num_inputs=(1, None),
)
def qnn_concatenate(ctx: OpContext, *xs: np.ndarray) -> np.ndarray:
    """Each input requantized to the output parameters (copied when already equal), then concatenated."""
    out = ctx.out_types[0]
    oq = out.quant
    assert oq is not None
    axis = normalize_axis(ctx.attrs["axis"], out.rank)
    parts = []
    for x, t in zip(xs, ctx.in_types, strict=True):
        q = t.quant
        assert q is not None
        if q == oq:
            parts.append(x)
        else:
            parts.append(quant.requantize(x, q.scale, q.zero_point, oq.scale, oq.zero_point, out.dtype))
    return np.concatenate(parts, axis=axis).astype(out.dtype, copy=False)
