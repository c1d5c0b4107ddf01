"""Quantized graphs for the ethosn tests, built op by op (NCHW, as a model has them; the backend gets NHWC)."""

from __future__ import annotations

from typing import Any

import numpy as np

from accel.builder import GraphBuilder
from accel.ir import QuantParams, TensorType, Value


def qt(shape: tuple[int, ...], dtype: str = "uint8", scale: float = 0.05, zp: int | None = None) -> TensorType:
    if zp is None:
        zp = 128 if dtype == "uint8" else 0
    return TensorType(shape, dtype, QuantParams(scale, zp))


def lohi(dtype: str) -> tuple[int, int]:
    return (0, 255) if dtype == "uint8" else (-128, 127)


def qconv(
    b: GraphBuilder,
    x: Value,
    out_channels: int,
    kernel: tuple[int, int] = (3, 3),
    *,
    rng: np.random.Generator,
    strides: tuple[int, int] = (1, 1),
    padding: tuple[int, int, int, int] = (0, 0, 0, 0),
    groups: int = 1,
    dilation: tuple[int, int] = (1, 1),
    per_channel: bool = True,
    relu: bool = False,
    bias: bool = True,
    out_scale: float = 0.1,
    out_zp: int | None = None,
    out_dtype: str | None = None,
    weight_dtype: str = "int8",
    wscale: float = 0.02,
) -> Value:
    """``qnn.conv2d → nn.bias_add? → nn.relu? → qnn.requantize`` (weights OIHW)."""
    c = x.type.shape[1]
    lo, hi = lohi(weight_dtype)
    w = rng.integers(lo, hi, (out_channels, c // groups, *kernel), endpoint=True).astype(weight_dtype)
    if per_channel:
        wq = QuantParams(
            rng.uniform(0.5, 1.5, out_channels).astype(np.float32) * wscale, np.zeros(out_channels, np.int64), 0
        )
    else:
        wq = QuantParams(wscale, 0)
    y = b.op("qnn.conv2d", x, b.const(w, wq), strides=strides, padding=padding, groups=groups, dilation=dilation)
    if bias:
        acc_q = y.type.quant
        bq = QuantParams(acc_q.scale, np.zeros(acc_q.scale.size, np.int64), 0 if acc_q.axis is not None else None)
        bv = rng.integers(-2000, 2000, out_channels).astype(np.int32)
        y = b.op("nn.bias_add", y, b.const(bv, bq), axis=1)
    if relu:
        y = b.op("nn.relu", y)
    dt = out_dtype or x.type.dtype
    if out_zp is None:
        out_zp = 128 if dt == "uint8" else 0
    return b.op("qnn.requantize", y, out_scale=out_scale, out_zero_point=out_zp, out_dtype=dt)


def qdense(
    b: GraphBuilder, x: Value, units: int, *, rng: np.random.Generator, relu: bool = False, out_scale: float = 0.2
) -> Value:
    k = x.type.shape[-1]
    w = rng.integers(-127, 127, (units, k), endpoint=True).astype(np.int8)
    wq = QuantParams(rng.uniform(0.5, 1.5, units).astype(np.float32) * 0.01, np.zeros(units, np.int64), 0)
    y = b.op("qnn.dense", x, b.const(w, wq))
    acc_q = y.type.quant
    bq = QuantParams(acc_q.scale, np.zeros(units, np.int64), 0)
    y = b.op("nn.bias_add", y, b.const(rng.integers(-3000, 3000, units).astype(np.int32), bq), axis=1)
    if relu:
        y = b.op("nn.relu", y)
    dt = x.type.dtype
    return b.op("qnn.requantize", y, out_scale=out_scale, out_zero_point=128 if dt == "uint8" else 0, out_dtype=dt)


def dq_act_q(b: GraphBuilder, x: Value, act: str, out_scale: float, out_zp: int, **attrs: Any) -> Value:
    """``qnn.dequantize → act → qnn.quantize``."""
    f = b.op(act, b.op("qnn.dequantize", x), **attrs)
    return b.op("qnn.quantize", f, scale=out_scale, zero_point=out_zp, out_dtype=x.type.dtype)


def widen_avg(b: GraphBuilder, x: Value, op: str, **attrs: Any) -> Value:
    """``cast(int32) → op → qnn.requantize`` back to ``x``'s dtype with another scale."""
    y = b.op(op, b.op("cast", x, dtype="int32"), **attrs)
    q = x.type.quant
    assert q is not None
    return b.op(
        "qnn.requantize", y, out_scale=float(q.scale) * 0.7, out_zero_point=int(q.zero_point), out_dtype=x.type.dtype
    )
