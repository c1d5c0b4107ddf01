"""accel-sdk's conformance kit on the testbackend: every op, the composite, requantize and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

from accel.builder import GraphBuilder
from accel.ir import QuantParams, TensorType

pytest.importorskip("accel_testbackend", reason="accel-testbackend is not installed")
from accel_sdk.testing import BackendConformance, Case, Refusal
from accel_testbackend import TestBackend

RNG = np.random.default_rng(7)


def weights(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def conv_bias_relu_pools() -> Case:
    b = GraphBuilder(x=(1, 3, 10, 9))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(8, 3, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(weights(8))))
    y = b.op("nn.max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)
    y = b.op("nn.avg_pool2d", y, pool_size=(2, 3), strides=(1, 2), padding=(1, 1, 0, 1))
    return Case("conv_bias_relu_pools", b.done(y))


def conv_strided_dilated() -> Case:
    b = GraphBuilder(x=(2, 5, 13, 11))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(6, 5, 3, 2)), strides=(2, 1), dilation=(2, 3), padding=(0, 2, 1, 0))
    y = b.op("clip", y, a_min=-0.25, a_max=0.5)
    y = b.op(
        "nn.avg_pool2d",
        y,
        pool_size=(3, 3),
        padding=(1, 1, 1, 1),
        count_include_pad=True,
        ceil_mode=True,
        strides=(2, 2),
    )
    return Case("conv_strided_dilated", b.done(y))


def conv_bias_then_max() -> Case:
    """Large enough (1.2M multiply-accumulates) for the runtime to split it over the thread pool."""
    b = GraphBuilder(x=(1, 16, 16, 16))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(32, 16, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("nn.bias_add", y, b.const(weights(32)))
    y = b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2))
    return Case("conv_bias_then_max", b.done(y))


def elementwise() -> Case:
    b = GraphBuilder(x=(4, 6), y=(4, 6), z=(2, 12))
    s = b.op("nn.relu", b.op("add", b.x["x"], b.x["y"]))
    r = b.op("reshape", s, newshape=(2, 12))
    m = b.op("maximum", r, b.x["z"])
    return Case("elementwise", b.done(m, b.op("clip", m, a_min=0.0, a_max=1.0)))


def requantize() -> Case:
    x = TensorType((3, 40), "uint8", QuantParams(0.05, 131))
    acc = TensorType((2, 50), "int32", QuantParams(0.0007, 0))
    b = GraphBuilder(x=x, acc=acc)
    y = b.op("qnn.requantize", b.x["x"], out_scale=0.11, out_zero_point=-3, out_dtype="int8")
    z = b.op("qnn.requantize", b.x["acc"], out_scale=0.02, out_zero_point=100, out_dtype="uint8")
    return Case("requantize", b.done(y, z))


def two_regions() -> Case:
    """relu → sigmoid (host) → relu: two partitions of one backend, loaded together in one executable."""
    b = GraphBuilder(x=(3, 7), y=(3, 7))
    y = b.op("sigmoid", b.op("nn.relu", b.op("add", b.x["x"], b.x["y"])))
    return Case("two_regions", b.done(b.op("nn.relu", b.op("add", y, b.x["y"]))))


def refusals() -> list[Refusal]:
    out = []
    b = GraphBuilder(x=(1, 4, 8, 8))
    grouped = b.op("nn.conv2d", b.x["x"], b.const(weights(4, 2, 3, 3)), groups=2)
    out.append(Refusal("grouped conv", b.done(grouped), "testbackend.conv2d: groups=2, groups must = 1"))
    b = GraphBuilder(x=(1, 4, 8, 8), w=(4, 4, 3, 3))
    y = b.op("nn.conv2d", b.x["x"], b.x["w"])
    out.append(
        Refusal(
            "conv with weights computed at run time",
            b.done(y),
            "testbackend.conv2d does not match: input 1 of this nn.conv2d is not a constant",
        )
    )
    b = GraphBuilder(x=(1, 4, 8, 8))
    bias = b.op("nn.bias_add", b.x["x"], b.const(weights(4)))
    out.append(
        Refusal(
            "bias_add without a conv",
            b.done(bias),
            "nn.bias_add is not supported by testbackend on its own, only inside testbackend.conv2d",
        )
    )
    b = GraphBuilder(x=(1, 4, 8, 8))
    pool = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2), dilation=(2, 2))
    out.append(Refusal("dilated pool", b.done(pool), "dilation=[2, 2], dilation must = [1, 1]"))
    b = GraphBuilder(x=(2, 3), y=(1, 3))
    add = b.op("add", b.x["x"], b.x["y"])
    reason = "add of shapes [2, 3] and [1, 3]: broadcasting is not supported, shapes must be equal"
    out.append(Refusal("broadcasting add", b.done(add), reason))
    return out


class TestConformance(BackendConformance):
    backend = TestBackend
    rtol = 1e-5
    atol = 1e-5

    def cases(self):
        return [
            conv_bias_relu_pools(),
            conv_strided_dilated(),
            conv_bias_then_max(),
            elementwise(),
            requantize(),
            two_regions(),
        ]

    def refusals(self):
        return refusals()
