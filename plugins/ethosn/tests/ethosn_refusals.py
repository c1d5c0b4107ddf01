"""Graphs ethosn must refuse, each with the exact reason the partition report (``accel inspect --format json``) gives.

The reasons in quotes are Arm's Ethos-N support library's wording, as TVM's tests expect it.
"""

from __future__ import annotations

import numpy as np
from accel_sdk.testing import Refusal
from ethosn_graphs import dq_act_q, qconv, qt

from accel.builder import GraphBuilder
from accel.ir import QuantParams, TensorType

RNG = np.random.default_rng(7)


def _conv(shape=(1, 4, 8, 8), **kw):
    b = GraphBuilder(x=qt(shape))
    return b, qconv(b, b.x["x"], 4, rng=RNG, **kw)


def refusals() -> list[Refusal]:
    out: list[Refusal] = []
    conv = "ethosn.qnn_conv2d: "

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    x = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))  # in NHWC from here, as inside a network
    y = b.op("nn.pad", x, pad_width=((0, 0), (0, 0), (1, 1), (1, 1)), pad_value=128.0)
    y = qconv(b, y, 4, rng=RNG, padding=(1, 1, 1, 1))
    # the convolution alone (attribute padding) is taken; the pad op is refused with the reason
    reason = conv + "both op and attr padding exist, must be either op/attr only or no padding"
    g = b.done(y)
    pad = next(n.name for n in g.nodes if n.op == "nn.pad")
    out.append(Refusal("pad op and pad attribute", g, reason, node=pad))

    b, y = _conv(dilation=(2, 1))
    out.append(Refusal("dilated conv", b.done(y), conv + "dilation=[2, 1], dilation must = [1, 1]"))

    b, y = _conv(shape=(2, 4, 8, 8))
    out.append(Refusal("batch 2 conv", b.done(y), conv + "batch size=2, batch size must = 1"))

    b, y = _conv(out_scale=1e-6, wscale=1.0)
    reason = conv + "Overall scale (of the input * weights / output) should be in the range (2^-32, 65536)"
    out.append(Refusal("overall scale too large", b.done(y), reason))

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    y = qconv(b, b.x["x"], 4, rng=RNG, groups=2)
    reason = conv + "Weights tensor must have I dimension equal to the number of channels of the input tensor."
    out.append(Refusal("grouped conv", b.done(y), reason))

    b = GraphBuilder(x=TensorType((1, 4, 8, 8), "int16"))
    y = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2))
    out.append(Refusal("int16 max pool", b.done(y), "dtype='int16', dtype must be either uint8, int8 or int32"))

    b = GraphBuilder(x=qt((1, 3, 16)))
    w = RNG.integers(-100, 100, (5, 16)).astype(np.int8)
    y = b.op("qnn.dense", b.x["x"], b.const(w, QuantParams(0.01, 0)))
    y = b.op("qnn.requantize", y, out_scale=0.2, out_zero_point=128, out_dtype="uint8")
    out.append(Refusal("3-D fully connected", b.done(y), "ethosn.qnn_fc: dimensions=3, dimensions must = 2"))

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    y = dq_act_q(b, b.x["x"], "sigmoid", 1.0, 3)
    reason = "ethosn.qnn_sigmoid: output quantization params=(3, 1), must = (0, 1/256)"
    out.append(Refusal("sigmoid output params", b.done(y), reason))

    b = GraphBuilder(x=qt((1, 4, 8, 8), "int8"))
    y = dq_act_q(b, b.x["x"], "tanh", 0.01, 0)
    reason = "ethosn.qnn_tanh: output quantization params=(0, 0.01), must = (0, 0.0078125)"
    out.append(Refusal("tanh output params", b.done(y), reason))

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    y = dq_act_q(b, b.x["x"], "nn.leaky_relu", 0.05, 10, alpha=1.5)
    reason = "ethosn.qnn_leaky_relu: leaky relu alpha must be less than 1 and greater than 0, but was 1.5"
    out.append(Refusal("leaky relu alpha", b.done(y), reason))

    b = GraphBuilder(x=qt((1, 4, 8, 8), scale=0.5))
    y = b.op("qnn.requantize", b.x["x"], out_scale=0.5 / 200, out_zero_point=0, out_dtype="uint8")
    out.append(Refusal("requantize scale", b.done(y), "Output scale must be bigger than input scale / 128"))

    b = GraphBuilder(x=qt((1, 4, 5, 5)))
    y = b.op("image.resize2d", b.x["x"], size=(15, 10), method="nearest_neighbor")
    out.append(Refusal("resize height", b.done(y), "ethosn.qnn_resize: Requested height isn't supported"))

    b = GraphBuilder(x=qt((1, 4, 6, 6)))
    y = b.op("reshape", b.x["x"], newshape=(1, 2, 2, 3, 12))
    out.append(Refusal("rank 5", b.done(y), "dimensions=5, dimensions must be <= 4;"))

    b = GraphBuilder(x=qt((1, 8, 4, 4)), y=qt((1, 8, 1, 4)))
    p = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))
    q = b.op("nn.max_pool2d", b.x["y"], pool_size=(1, 1))
    y = b.op("qnn.add", p, q, out_scale=0.1, out_zero_point=128)
    reason = "ethosn.qnn_add: inputs of shapes [1, 4, 4, 8] and [1, 1, 4, 8]: both inputs must have the same shape (no broadcasting)"
    out.append(Refusal("broadcasting add", b.done(y), reason))

    # float graphs: ethosn computes quantized tensors only, and says so for every op it runs quantized
    float_dtype = "dtype='float32', dtype must be either uint8, int8 or int32"
    w = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
    for op, build in (
        ("nn.conv2d", lambda b, x: b.op("nn.conv2d", x, b.const(w), padding=(1, 1, 1, 1))),
        ("nn.relu", lambda b, x: b.op("nn.relu", x)),
        ("add", lambda b, x: b.op("add", x, x)),
        ("sigmoid", lambda b, x: b.op("sigmoid", x)),
        ("nn.avg_pool2d", lambda b, x: b.op("nn.avg_pool2d", x, pool_size=(2, 2))),
        ("nn.max_pool2d", lambda b, x: b.op("nn.max_pool2d", x, pool_size=(2, 2))),
    ):
        b = GraphBuilder(x=(1, 4, 8, 8))
        out.append(Refusal(f"float32 {op}", b.done(build(b, b.x["x"])), float_dtype))
    b = GraphBuilder(x=(1, 16))
    dense = b.op("nn.dense", b.x["x"], b.const(RNG.standard_normal((8, 16)).astype(np.float32)))
    out.append(Refusal("float32 nn.dense", b.done(dense), float_dtype))

    # a model's input quantize: ethosn quantizes only inside its activation patterns
    b = GraphBuilder(x=(1, 4, 8, 8))
    y = b.op("qnn.quantize", b.x["x"], scale=0.05, zero_point=3, out_dtype="uint8")
    reason = (
        "ethosn takes quantized tensors in: a float-to-integer quantize runs on the host "
        "(ethosn quantizes only a sigmoid's, tanh's or leaky relu's result, inside ethosn.qnn_sigmoid and its kin)"
    )
    out.append(Refusal("input quantize", b.done(y), reason))
    return out
