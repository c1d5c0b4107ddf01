"""accel-sdk's conformance kit on the ethosn backend: every op check and the composite against accel's
reference, and what the backend refuses with the reason a user reads in `accel inspect`."""

from __future__ import annotations

import numpy as np
from accel_ethosn import EthosnBackend
from accel_sdk.testing import BackendConformance, Case, Refusal

from accel.builder import GraphBuilder
from accel.ir import TensorType

RNG = np.random.default_rng(2026)


def weights(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def conv_bias_relu_pool() -> Case:
    """The composite with all its ops, then a padded, strided max pool (graphs are NCHW; the backend gets NHWC)."""
    b = GraphBuilder(x=(1, 3, 12, 11))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(8, 3, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(weights(8))))
    y = b.op("nn.max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)
    return Case("conv_bias_relu_pool", b.done(y))


def conv_strided_dilated() -> Case:
    """The composite without bias and relu; strides, dilation and uneven padding; a dilated pool."""
    b = GraphBuilder(x=(2, 4, 13, 10))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(6, 4, 3, 2)), strides=(2, 1), dilation=(2, 3), padding=(0, 2, 1, 0))
    y = b.op("nn.max_pool2d", y, pool_size=(2, 2), dilation=(1, 2))
    return Case("conv_strided_dilated", b.done(y))


def conv_large() -> Case:
    """Large enough (about 1.2M multiply-accumulates) for the runtime to split it over the thread pool."""
    b = GraphBuilder(x=(1, 16, 16, 16))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(32, 16, 3, 3)), padding=(1, 1, 1, 1))
    return Case("conv_large", b.done(b.op("nn.bias_add", y, b.const(weights(32)))))


def residual() -> Case:
    """relu and add around a composite: a region with several ops and two graph inputs."""
    b = GraphBuilder(x=(1, 5, 7, 7), skip=(1, 5, 7, 7))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(5, 5, 1, 1)))
    y = b.op("add", b.op("nn.relu", y), b.x["skip"])
    return Case("residual", b.done(y, b.op("nn.relu", y)))


def refusals() -> list[Refusal]:
    out = []
    b = GraphBuilder(x=(1, 4, 8, 8))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(4, 2, 3, 3)), groups=2)
    out.append(Refusal("grouped conv", b.done(y), "ethosn.conv2d: groups=2, groups must = 1"))
    b = GraphBuilder(x=TensorType((1, 3, 8, 8), "float64"))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(4, 3, 3, 3).astype(np.float64)))
    reason = "ethosn.conv2d does not match: this nn.conv2d has dtype float64, expected float32"
    out.append(Refusal("float64 conv", b.done(y), reason))
    b = GraphBuilder(x=(3, 4), y=(4,))
    reason = "add of shapes [3, 4] and [4]: broadcasting is not supported, shapes must be equal"
    out.append(Refusal("broadcasting add", b.done(b.op("add", b.x["x"], b.x["y"])), reason))
    b = GraphBuilder(x=TensorType((2, 3), "float64"))
    out.append(Refusal("float64 relu", b.done(b.op("nn.relu", b.x["x"])), "dtype='float64', dtype must be float32"))
    return out


class TestConformance(BackendConformance):
    backend = EthosnBackend
    # relu, add and max pool are exact; the convolution sums in another order than the reference
    rtol = 1e-5
    atol = 1e-5

    def cases(self):
        return [conv_bias_relu_pool(), conv_strided_dilated(), conv_large(), residual()]

    def refusals(self):
        return refusals()
