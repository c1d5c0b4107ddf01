"""accel-sdk's conformance kit on the bnns backend: every composite and op check against accel's
reference, and what the backend refuses with the reason a user reads in `accel inspect` (bnns_refusals.py)."""

from __future__ import annotations

import math

import numpy as np
from accel_bnns import BnnsBackend
from accel_sdk.testing import BackendConformance, Case
from bnns_refusals import refusals

from accel.builder import GraphBuilder

RNG = np.random.default_rng(2026)


def weights(*shape: int, scale: float = 0.3) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def scalar(b: GraphBuilder, value: float):
    return b.const(np.array(value, np.float32))


def conv_bias_relu_pool() -> Case:
    """conv2d_bias_act (bias_add, relu), then a padded, strided, ceil-mode max pool."""
    b = GraphBuilder(x=(1, 3, 12, 11))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(8, 3, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(weights(8))))
    y = b.op("nn.max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)
    return Case("conv_bias_relu_pool", b.done(y))


def conv_add_sigmoid() -> Case:
    """conv2d_bias_act with a (1, C, 1, 1) add and sigmoid; conv2d_act; strides, dilation, uneven padding."""
    b = GraphBuilder(x=(2, 4, 13, 10))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(6, 4, 3, 2)), strides=(2, 1), dilation=(2, 3), padding=(0, 2, 1, 0))
    y = b.op("sigmoid", b.op("add", y, b.const(weights(1, 6, 1, 1))))
    y = b.op("nn.relu", b.op("nn.conv2d", y, b.const(weights(5, 6, 1, 1))))
    return Case("conv_add_sigmoid", b.done(y))


def conv_relu6_depthwise() -> Case:
    """MobileNet's block: conv → bias → ReLU6 (clip(0, 6), BNNS's clamp activation), a depthwise conv →
    clip, and a clip with a negative floor."""
    b = GraphBuilder(x=(1, 4, 10, 9))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(8, 4, 1, 1)))
    y = b.op("clip", b.op("nn.bias_add", y, b.const(weights(8))), a_min=0.0, a_max=6.0)
    y = b.op(
        "clip", b.op("nn.conv2d", y, b.const(weights(8, 1, 3, 3)), padding=(1, 1, 1, 1), groups=8), a_min=0.0, a_max=6.0
    )
    y = b.op("clip", b.op("nn.conv2d", y, b.const(weights(3, 8, 1, 1))), a_min=-0.5, a_max=0.75)
    return Case("conv_relu6_depthwise", b.done(y))


def conv_bias_grouped() -> Case:
    """conv2d_bias with a (C, 1, 1) add before the conv's input; a depthwise conv alone; a grouped conv."""
    b = GraphBuilder(x=(1, 8, 9, 9))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(8, 1, 3, 3)), padding=(1, 1, 1, 1), groups=8)
    y = b.op("add", b.const(weights(12, 1, 1)), b.op("nn.conv2d", y, b.const(weights(12, 2, 3, 3)), groups=4))
    return Case("conv_bias_grouped", b.done(y))


def conv_batch_norm() -> Case:
    """conv2d_batch_norm: a batch norm the core did not fold, folded by the serializer."""
    b = GraphBuilder(x=(1, 5, 8, 8))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(7, 5, 3, 3)), padding=(1, 1, 1, 1), strides=(2, 2))
    gamma, beta, mean = weights(7) + 1, weights(7), weights(7)
    var = np.abs(weights(7)) + 0.5
    y = b.op("nn.batch_norm", y, *(b.const(v) for v in (gamma, beta, mean, var)), epsilon=1e-3)
    return Case("conv_batch_norm", b.done(y))


def gelu_tanh_chain(b: GraphBuilder, x):
    """The tanh GELU the way exporters write it: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    cube = b.op("power", x, scalar(b, 3.0))
    inner = b.op("add", x, b.op("multiply", cube, scalar(b, 0.044715)))
    t = b.op("tanh", b.op("multiply", inner, scalar(b, math.sqrt(2 / math.pi))))
    return b.op("multiply", b.op("multiply", x, scalar(b, 0.5)), b.op("add", t, scalar(b, 1.0)))


def dense_gelu() -> Case:
    """dense_bias_gelu (the tanh chain, 3-D data), dense_bias_gelu (nn.gelu erf), dense_bias, a bare dense."""
    b = GraphBuilder(x=(2, 5, 16))
    y = b.op("add", b.op("nn.dense", b.x["x"], b.const(weights(24, 16))), b.const(weights(24)))
    y = gelu_tanh_chain(b, y)
    y = b.op(
        "nn.gelu", b.op("nn.bias_add", b.op("nn.dense", y, b.const(weights(12, 24))), b.const(weights(12)), axis=2)
    )
    y = b.op("add", b.op("nn.dense", y, b.const(weights(10, 12))), b.const(weights(10)))
    return Case("dense_gelu", b.done(b.op("nn.dense", y, b.const(weights(3, 10)))))


def batch_matmuls() -> Case:
    """batch_matmul with both transposes and a broadcast batch."""
    b = GraphBuilder(a=(3, 5, 7), c=(3, 7, 4), d=(1, 6, 4))
    y = b.op("nn.batch_matmul", b.x["a"], b.x["c"], transpose_b=False)  # [3, 5, 4]
    y = b.op("nn.batch_matmul", y, b.x["d"], transpose_b=True)  # [3, 5, 6]
    y = b.op("nn.batch_matmul", y, b.x["a"], transpose_a=True, transpose_b=False)  # [3, 6, 7]
    return Case("batch_matmuls", b.done(y))


def pools() -> Case:
    """avg pools (padding counted and not, dilated) and the global pools."""
    b = GraphBuilder(x=(2, 3, 11, 9))
    x = b.x["x"]
    a = b.op("nn.avg_pool2d", x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), count_include_pad=True)
    c = b.op("nn.avg_pool2d", x, pool_size=(3, 2), strides=(2, 1), padding=(1, 0, 1, 1), ceil_mode=True)
    d = b.op("nn.max_pool2d", x, pool_size=(2, 2), dilation=(2, 2), padding=(1, 1, 0, 0))
    return Case("pools", b.done(a, c, d, b.op("nn.global_avg_pool2d", x), b.op("nn.global_max_pool2d", x)))


def instance_norms() -> Case:
    """instance_norm at rank 4 and rank 3 (planar: channels on axis 1)."""
    b = GraphBuilder(x=(2, 4, 6, 5), s=(3, 6, 10))
    y = b.op("nn.instance_norm", b.x["x"], b.const(weights(4) + 1), b.const(weights(4)))
    z = b.op("nn.instance_norm", b.x["s"], b.const(weights(6) + 1), b.const(weights(6)), epsilon=1e-3)
    return Case("instance_norms", b.done(y, z))


def residual_adds() -> Case:
    """Residual joins: add → relu (ResNet's) after a conv held in oneDNN's blocked format and the input
    held plain, a plain add of two convs (MobileNetV2's), and a rank-3 add of two graph inputs."""
    b = GraphBuilder(x=(1, 20, 7, 6), s=(2, 3, 5), t=(2, 3, 5))
    x = b.x["x"]
    y = b.op("nn.conv2d", x, b.const(weights(20, 20, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(weights(20))))
    y = b.op("nn.relu", b.op("add", y, x))
    p = b.op("nn.conv2d", y, b.const(weights(20, 20, 1, 1)))
    z = b.op("add", p, b.op("nn.conv2d", y, b.const(weights(20, 20, 1, 1))))
    return Case("residual_adds", b.done(z, b.op("add", b.x["s"], b.x["t"])))


class TestConformance(BackendConformance):
    backend = BnnsBackend
    # oneDNN sums in another order than the reference: float results within 1e-5
    rtol = 1e-5
    atol = 1e-5

    def cases(self):
        return [
            conv_bias_relu_pool(),
            conv_add_sigmoid(),
            conv_relu6_depthwise(),
            conv_bias_grouped(),
            conv_batch_norm(),
            dense_gelu(),
            batch_matmuls(),
            pools(),
            instance_norms(),
            residual_adds(),
        ]

    def refusals(self):
        return refusals()
