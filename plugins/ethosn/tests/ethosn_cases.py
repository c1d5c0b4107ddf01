"""The conformance kit's cases for ethosn: small quantized graphs (NCHW, as a model has them) covering every composite and op."""

from __future__ import annotations

import numpy as np
from accel_sdk.testing import Case
from ethosn_graphs import dq_act_q, qconv, qdense, qt, widen_avg

from accel.builder import GraphBuilder
from accel.ir import QuantParams

RNG = np.random.default_rng(2026)


def pools_and_tables() -> Case:
    """max pool (ceil mode, padding), requantize, clip, sigmoid, tanh, leaky relu, add/mul of constants."""
    b = GraphBuilder(x=qt((1, 6, 11, 9), scale=0.04, zp=120))
    y = b.op("nn.max_pool2d", b.x["x"], pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)
    y = b.op("qnn.requantize", y, out_scale=0.05, out_zero_point=100, out_dtype="uint8")
    y = b.op("clip", y, a_min=90.0, a_max=200.0)
    s = dq_act_q(b, y, "sigmoid", 1 / 256, 0)
    t = dq_act_q(b, y, "tanh", 0.0078125, 128)
    lr = dq_act_q(b, y, "nn.leaky_relu", 0.03, 60, alpha=0.2)
    c = b.const(RNG.integers(0, 255, (1, 6, 1, 1)).astype(np.uint8), QuantParams(0.02, 7))
    a = b.op("qnn.add", y, c, out_scale=0.06, out_zero_point=20)
    m = b.op("qnn.mul", b.const(np.array(200, np.uint8), QuantParams(0.01, 128)), y, out_scale=0.03, out_zero_point=128)
    return Case("pools_and_tables", b.done(s, t, lr, a, m))


def int8_pools_and_moves() -> Case:
    """int8: max pool, average pool (both padding modes), mean, add of two tensors, concat, split, depth_to_space."""
    b = GraphBuilder(x=qt((1, 8, 10, 10), "int8", 0.05, -3), z=qt((1, 8, 10, 10), "int8", 0.07, 5))
    # max pools first: what follows them is in the backend's NHWC layout, as after a network's convolutions
    x = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2), strides=(1, 1), padding=(1, 1, 0, 0))
    z = b.op("nn.max_pool2d", b.x["z"], pool_size=(2, 2), strides=(1, 1), padding=(0, 0, 1, 1))
    p = b.op("nn.max_pool2d", x, pool_size=(2, 2), strides=(2, 2))
    a1 = widen_avg(
        b, x, "nn.avg_pool2d", pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), count_include_pad=False
    )
    a2 = widen_avg(
        b, z, "nn.avg_pool2d", pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), count_include_pad=True
    )
    mean = b.op("reshape", widen_avg(b, x, "mean", axis=(2, 3), keepdims=True), newshape=(1, 8))
    s = b.op("qnn.add", x, z, out_scale=0.09, out_zero_point=-10)
    cat = b.op("qnn.concatenate", p, a1, a2, axis=1, out_scale=0.05, out_zero_point=-3)
    parts = b.op("split", cat, indices_or_sections=(5, 17), axis=1)
    d2s = b.op("nn.depth_to_space", s, block_size=2, mode="DCR")
    return Case("int8_pools_and_moves", b.done(*parts, mean, d2s))


def resize_case() -> Case:
    b = GraphBuilder(x=qt((1, 4, 5, 6), scale=0.1, zp=3))
    y = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2), strides=(1, 1))
    y = b.op("image.resize2d", y, size=(8, 10), method="nearest_neighbor", coordinate_transformation_mode="asymmetric")
    y = b.op("qnn.requantize", y, out_scale=0.2, out_zero_point=10, out_dtype="uint8")
    return Case("resize", b.done(y))


def convolutions() -> Case:
    """uint8: strided / padded / per-tensor and per-channel convolutions, relu, depthwise, a pad op, fully connected."""
    b = GraphBuilder(x=qt((1, 5, 13, 11), scale=0.03, zp=110))
    y = qconv(b, b.x["x"], 12, rng=RNG, strides=(2, 1), padding=(1, 2, 0, 1), relu=True, out_scale=0.2, out_zp=5)
    y = qconv(b, y, 12, (3, 3), rng=RNG, groups=12, padding=(1, 1, 1, 1), per_channel=False, out_scale=0.15)
    y = b.op("nn.pad", y, pad_width=((0, 0), (0, 0), (2, 0), (1, 1)), pad_value=128.0)
    y = qconv(b, y, 16, (1, 5), rng=RNG, bias=False, out_scale=0.3, out_zp=100)
    z = b.op("nn.pad", y, pad_width=((0, 0), (0, 0), (1, 1), (1, 1)), pad_value=3.0)  # not the zero point: a copy
    z = qconv(b, z, 8, (3, 3), rng=RNG, strides=(2, 2), out_scale=0.4)
    f = b.op("reshape", b.op("nn.max_pool2d", z, pool_size=(z.type.shape[2], z.type.shape[3])), newshape=(1, 8))
    f = qdense(b, f, 10, rng=RNG, relu=True)
    return Case("convolutions", b.done(y, f))


def int8_convolutions() -> Case:
    """int8 data and weights, large enough for the banded requantize, and a transposed convolution."""
    b = GraphBuilder(x=qt((1, 16, 24, 24), "int8", 0.02, -5))
    y = qconv(b, b.x["x"], 32, rng=RNG, padding=(1, 1, 1, 1), out_scale=0.5, out_dtype="int8", out_zp=-7)
    y = qconv(b, y, 32, (3, 3), rng=RNG, groups=32, strides=(2, 2), padding=(1, 1, 1, 1), relu=True, out_scale=0.3)
    w = RNG.integers(-127, 127, (32, 6, 3, 3)).astype(np.int8)  # IOHW
    t = b.op(
        "qnn.conv2d_transpose",
        y,
        b.const(w, QuantParams(0.01, 0)),
        strides=(2, 2),
        padding=(1, 1, 0, 0),
        output_padding=(1, 1),
    )
    t = b.op("qnn.requantize", t, out_scale=0.4, out_zero_point=3, out_dtype="int8")
    return Case("int8_convolutions", b.done(y, t))
