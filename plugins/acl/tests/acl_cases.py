"""Graphs the acl tests share: every composite and op of the support table, float32 and quantized.

Graphs are NCHW (as an ONNX model is); the partitioner hands the backend NHWC.
"""

from __future__ import annotations

import numpy as np

from accel import quant
from accel.builder import GraphBuilder
from accel.ir import Graph, QuantParams, TensorType, Value

RNG = np.random.default_rng(2026)


def weights(*shape: int, scale: float = 0.3) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# -- float32 ----------------------------------------------------------------------------


def conv_fp32(
    shape: tuple[int, int, int, int] = (1, 8, 12, 11),
    out: int = 16,
    kernel: tuple[int, int] = (3, 3),
    *,
    strides: tuple[int, int] = (1, 1),
    padding: tuple[int, int, int, int] = (1, 1, 1, 1),
    dilation: tuple[int, int] = (1, 1),
    groups: int = 1,
    bias: bool = True,
    act: str | None = "relu",
    pad: tuple[int, int, int, int] | None = None,
) -> Graph:
    """``nn.pad? → conv → bias? → relu | clip(0, 6) | clip(0, 2.5)?`` (pad: top, left, bottom, right)."""
    b = GraphBuilder(x=shape)
    x = b.x["x"]
    if pad is not None:
        t, le, bo, r = pad
        x = b.op("nn.pad", x, pad_width=((0, 0), (0, 0), (t, bo), (le, r)))
    cin = shape[1] // groups
    y = b.op(
        "nn.conv2d",
        x,
        b.const(weights(out, cin, *kernel)),
        strides=strides,
        padding=padding,
        dilation=dilation,
        groups=groups,
    )
    if bias:
        y = b.op("nn.bias_add", y, b.const(weights(out)))
    if act == "relu":
        y = b.op("nn.relu", y)
    elif act == "relu6":
        y = b.op("clip", y, a_min=0.0, a_max=6.0)
    elif act == "bounded":
        y = b.op("clip", y, a_min=0.0, a_max=0.25)
    return b.done(y)


def network_fp32() -> Graph:
    """A small residual network: conv, relu, add, maximum, max/avg/global pools, reshape, dense."""
    b = GraphBuilder(x=(1, 6, 14, 13))
    x = b.x["x"]
    y = b.op("nn.conv2d", x, b.const(weights(8, 6, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(weights(8))))
    y = b.op("nn.max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)
    z = b.op("nn.conv2d", y, b.const(weights(8, 8, 3, 3)), padding=(1, 1, 1, 1))
    z = b.op("nn.bias_add", z, b.const(weights(8)))
    y = b.op("nn.relu", b.op("add", y, z))
    m = b.op("maximum", y, b.op("nn.conv2d", y, b.const(weights(8, 8, 1, 1))))
    m = b.op("clip", m, a_min=0.0, a_max=1.5)
    a = b.op("nn.avg_pool2d", m, pool_size=(2, 2), strides=(1, 1), padding=(1, 1, 1, 1), count_include_pad=False)
    a = b.op("nn.avg_pool2d", a, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), count_include_pad=True)
    g1 = b.op("nn.global_avg_pool2d", a)
    g2 = b.op("nn.global_max_pool2d", a)
    c = b.op("concatenate", g1, g2, axis=1)
    flat = b.op("reshape", c, newshape=(1, 16))
    d = b.op("nn.bias_add", b.op("nn.dense", flat, b.const(weights(10, 16))), b.const(weights(10)))
    return b.done(d)


def max_pools() -> Graph:
    """Max pools straight on the input: with the kit's NaN among finite values in a window
    (oneDNN's max pooling skips NaN; the reference returns it)."""
    b = GraphBuilder(x=(1, 8, 9, 9))
    y = b.op("nn.max_pool2d", b.x["x"], pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    g = b.op("nn.global_max_pool2d", b.op("nn.relu", b.x["x"]))
    return b.done(y, g)


def batch_pools(batch: int = 3, dtype: str = "float32") -> Graph:
    """Max, average, L2-free global pools of a batch of images; for uint8/int8 also the quantized average
    pool summed in int32 (acl takes any batch: ACL's functions have a batch dimension)."""
    shape = (batch, 8, 9, 10)
    b = GraphBuilder(x=shape if dtype == "float32" else qtype(shape, dtype, 0.05, 3 if dtype == "uint8" else -3))
    m = b.op("nn.max_pool2d", b.x["x"], pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    if dtype == "float32":
        a = b.op("nn.avg_pool2d", m, pool_size=(2, 2), strides=(1, 1), padding=(1, 1, 1, 1), count_include_pad=False)
        return b.done(a, b.op("nn.global_max_pool2d", m), b.op("nn.global_avg_pool2d", a))
    c = b.op("cast", m, dtype="int32")
    a = b.op("cast", b.op("nn.avg_pool2d", c, pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1)), dtype=dtype)
    return b.done(a, b.op("nn.global_max_pool2d", m))


def channel_affine(batch: int = 1) -> Graph:
    """A batch norm left after a concatenation (DenseNet's pre-activation one, as Caffe2 exports it):
    ``multiply`` and ``add`` by ``[C, 1, 1]`` constants, then relu and a convolution."""
    b = GraphBuilder(x=(batch, 6, 9, 10))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(6, 6, 3, 3)), padding=(1, 1, 1, 1))
    c = b.op("concatenate", b.x["x"], y, axis=1)
    m = b.op("multiply", c, b.const(weights(12, 1, 1, scale=1.0)))
    a = b.op("add", b.const(weights(12, 1, 1)), m)  # the constant first: the serializer orders them
    z = b.op("nn.conv2d", b.op("nn.relu", a), b.const(weights(4, 12, 1, 1)))
    return b.done(z)


def l2_pool() -> Graph:
    b = GraphBuilder(x=(1, 4, 9, 9))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(4, 4, 1, 1)))
    y = b.op("power", y, b.const(np.array(2.0, np.float32)))
    y = b.op("nn.avg_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    return b.done(b.op("sqrt", y))


# -- quantized --------------------------------------------------------------------------


def qtype(shape: tuple[int, ...], dtype: str, scale: float, zp: int) -> TensorType:
    return TensorType(shape, dtype, QuantParams(np.float32(scale), zp))


def qweights(
    b: GraphBuilder, shape: tuple[int, ...], dtype: str = "int8", per_channel: bool = True, zp: int = 0
) -> tuple[Value, np.ndarray]:
    lo, hi = quant.dtype_range(dtype)
    w = RNG.integers(lo, hi + 1, size=shape).astype(dtype)
    if per_channel:
        scales = (RNG.uniform(0.5, 2.0, size=shape[0]) * 0.01).astype(np.float32)
        q = QuantParams(scales, np.full(shape[0], zp, np.int32), 0)
    else:
        scales = np.float32(0.013)
        q = QuantParams(scales, zp)
    return b.const(w, q), scales


def qnn_conv(
    shape: tuple[int, int, int, int] = (1, 8, 10, 9),
    out: int = 12,
    kernel: tuple[int, int] = (3, 3),
    *,
    dtype: str = "uint8",
    wdtype: str = "int8",
    per_channel: bool = True,
    strides: tuple[int, int] = (1, 1),
    padding: tuple[int, int, int, int] = (1, 1, 1, 1),
    dilation: tuple[int, int] = (1, 1),
    groups: int = 1,
    bias: bool = True,
    relu: bool = False,
    zp: int = 7,
    out_zp: int = 3,
    out_scale: float = 0.04,
    pad: tuple[int, int, int, int] | None = None,
) -> Graph:
    """``nn.pad? → qnn.conv2d → bias_add(int32)? → relu? → qnn.requantize`` (scales give varied outputs)."""
    if dtype == "int8":
        zp = zp - 10
    b = GraphBuilder(x=qtype(shape, dtype, 0.05, zp))
    x = b.x["x"]
    if pad is not None:
        t, le, bo, r = pad
        x = b.op("nn.pad", x, pad_width=((0, 0), (0, 0), (t, bo), (le, r)), pad_value=float(zp))
    w, wscales = qweights(b, (out, shape[1] // groups, *kernel), wdtype, per_channel)
    y = b.op("qnn.conv2d", x, w, strides=strides, padding=padding, dilation=dilation, groups=groups)
    if bias:
        acc_scale = np.float32(0.05) * np.asarray(wscales, np.float32)
        bq = QuantParams(acc_scale, 0, 0) if per_channel else QuantParams(acc_scale, 0)
        y = b.op("nn.bias_add", y, b.const(RNG.integers(-3000, 3000, size=out).astype(np.int32), bq), axis=1)
    if relu:
        y = b.op("nn.relu", y)
    y = b.op(
        "qnn.requantize",
        y,
        out_scale=out_scale,
        out_zero_point=out_zp if dtype == "uint8" else out_zp - 5,
        out_dtype=dtype,
    )
    return b.done(y)


def qnn_dense(dtype: str = "uint8", per_channel: bool = True, bias: bool = True) -> Graph:
    zp = 5 if dtype == "uint8" else -3
    b = GraphBuilder(x=qtype((2, 40), dtype, 0.05, zp))
    w, wscales = qweights(b, (24, 40), "int8", per_channel)
    y = b.op("qnn.dense", b.x["x"], w)
    if bias:
        acc_scale = np.float32(0.05) * np.asarray(wscales, np.float32)
        bq = QuantParams(acc_scale, 0, 0) if per_channel else QuantParams(acc_scale, 0)
        y = b.op("nn.bias_add", y, b.const(RNG.integers(-2000, 2000, size=24).astype(np.int32), bq), axis=1)
    y = b.op("qnn.requantize", y, out_scale=0.3, out_zero_point=zp, out_dtype=dtype)
    return b.done(y)


def byte_requantize(dtype: str, out_dtype: str, per_axis: bool) -> Graph:
    """qnn.requantize of 8-bit data (every byte value, per tensor or per channel of axis 1):
    the runtime's table of results per channel must match the definition."""
    lo, hi = quant.dtype_range(dtype)
    shape = (2, 5, 16, 16)
    if per_axis:
        q = QuantParams(np.float32([0.02, 0.05, 0.11, 0.3, 0.07]), np.int32([lo + 1, lo + 50, 0, hi - 3, lo + 128]), 1)
    else:
        q = QuantParams(np.float32(0.05), lo + 77)
    b = GraphBuilder(x=TensorType(shape, dtype, q))
    out_scale, out_zp = (0.001, 0) if out_dtype == "int32" else (0.09, 3 if out_dtype == "uint8" else -2)
    return b.done(b.op("qnn.requantize", b.x["x"], out_scale=out_scale, out_zero_point=out_zp, out_dtype=out_dtype))


def qnn_network(dtype: str = "uint8", conv: bool = True) -> Graph:
    """qnn.add, requantize to int32 → global average → requantize, max pools, the cast average pool,
    concatenate, reshape, around quantized convolutions."""
    zp = 4 if dtype == "uint8" else -4
    cin = 6 if conv else 8
    b = GraphBuilder(x=qtype((1, cin, 11, 12), dtype, 0.05, zp), skip=qtype((1, 8, 11, 12), dtype, 0.07, zp + 2))
    y = b.x["x"]
    if conv:
        w, _ = qweights(b, (8, 6, 3, 3))
        y = b.op("qnn.conv2d", y, w, padding=(1, 1, 1, 1))
    y = b.op("qnn.requantize", y, out_scale=3.0 if conv else 0.03, out_zero_point=zp, out_dtype=dtype)
    y = b.op("qnn.add", y, b.x["skip"], out_scale=2.0 if conv else 0.15, out_zero_point=zp - 1)
    m = b.op("nn.max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    c = b.op("cast", m, dtype="int32")
    a = b.op("nn.avg_pool2d", c, pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))
    a = b.op("cast", a, dtype=dtype)
    m2 = b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2), ceil_mode=True)
    cat = b.op("concatenate", m, m2, axis=1)
    gm = b.op("nn.global_max_pool2d", cat)
    acc = b.op("qnn.requantize", cat, out_scale=0.001, out_zero_point=0, out_dtype="int32")
    ga = b.op("nn.global_avg_pool2d", acc)
    ga = b.op("qnn.requantize", ga, out_scale=2.5 if conv else 0.1, out_zero_point=zp, out_dtype=dtype)
    r = b.op("reshape", gm, newshape=(1, 16))
    return b.done(r, ga, a)


def quantized_head(dtype: str = "uint8", scale: float = 0.07) -> Graph:
    """A QDQ model's float32 head: an 8-bit 4-D tensor dequantized and softmaxed along its last axis,
    and 8-bit features dequantized into a dense layer and its softmax. A
    large ``scale`` gives logits far past exp's range, which the softmax must take by their maximum."""
    zp = 7 if dtype == "uint8" else -9
    b = GraphBuilder(x=qtype((2, 6, 5, 4), dtype, scale, zp), f=qtype((3, 40), dtype, scale, zp))
    channels = b.op("nn.softmax", b.op("qnn.dequantize", b.x["x"]), axis=-1)
    logits = b.op("nn.dense", b.op("qnn.dequantize", b.x["f"]), b.const(weights(10, 40)))
    return b.done(channels, b.op("nn.softmax", logits, axis=-1))


def softmax_fp32(shape: tuple[int, ...] = (4, 10), axis: int = -1) -> Graph:
    """softmax of a float32 input: the kit's NaN and ±Inf reach it."""
    b = GraphBuilder(x=shape)
    return b.done(b.op("nn.softmax", b.x["x"], axis=axis))


def conv_softmax() -> Graph:
    """softmax over a convolution's channels (NCHW axis 1: NHWC's last)."""
    b = GraphBuilder(x=(2, 8, 3, 5))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(6, 8, 1, 1)))
    return b.done(b.op("nn.softmax", y, axis=1))


def quantize_conv(dtype: str = "uint8") -> Graph:
    """A QDQ model's input: float32 quantized, then a quantized convolution (the quantize runs in
    NHWC in the convolution's region: the input is transposed before it)."""
    zp = 10 if dtype == "uint8" else -5
    b = GraphBuilder(x=(2, 3, 9, 8))
    q = b.op("qnn.quantize", b.x["x"], scale=0.02, zero_point=zp, out_dtype=dtype)
    w, _ = qweights(b, (8, 3, 3, 3))
    y = b.op("qnn.conv2d", q, w, padding=(1, 1, 1, 1))
    return b.done(b.op("qnn.requantize", y, out_scale=0.5, out_zero_point=zp, out_dtype=dtype), q)
