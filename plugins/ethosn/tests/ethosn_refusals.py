"""Graphs ethosn must refuse, each with the exact reason the partition report (``accel inspect --format json``) gives.

The reasons in quotes are Arm's Ethos-N support library's wording, as TVM's tests expect it. Every reason
``accel_ethosn.support`` can give through a graph has a case here, in the order of docs/backends/ethosn.md's
table; tests/test_support.py asks the support functions directly for the few that no graph reaches.
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


def _in_nhwc(b: GraphBuilder, x):
    """A 1x1 max pool: what follows it is in the backend's NHWC layout, as inside a network."""
    return b.op("nn.max_pool2d", x, pool_size=(1, 1))


def _named(graph, op: str) -> str:
    return next(n.name for n in graph.nodes if n.op == op)


def _conv_with_weights(w: np.ndarray, wq: QuantParams, **attrs):
    b = GraphBuilder(x=qt((1, w.shape[1], 8, 8)))
    y = b.op("qnn.conv2d", b.x["x"], b.const(w, wq), **attrs)
    return b, b.op("qnn.requantize", y, out_scale=0.1, out_zero_point=128, out_dtype="uint8")


def _transposed(shape=(1, 4, 8, 8), wzp: int = 0, **attrs):
    b = GraphBuilder(x=qt(shape))
    w = RNG.integers(-127, 127, (4, 4 // attrs.get("groups", 1), 3, 3)).astype(np.int8)  # IOHW
    y = b.op("qnn.conv2d_transpose", b.x["x"], b.const(w, QuantParams(0.01, wzp)), **attrs)
    return b.done(b.op("qnn.requantize", y, out_scale=0.4, out_zero_point=3, out_dtype="uint8"))


def _fc(shape=(1, 16), wzp: int = 0):
    b = GraphBuilder(x=qt(shape))
    w = RNG.integers(-100, 100, (5, shape[-1])).astype(np.int8)
    y = b.op("qnn.dense", b.x["x"], b.const(w, QuantParams(0.01, wzp)))
    return b.done(b.op("qnn.requantize", y, out_scale=0.2, out_zero_point=128, out_dtype="uint8"))


def convolutions() -> list[Refusal]:
    out: list[Refusal] = []
    conv = "ethosn.qnn_conv2d: "

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    x = _in_nhwc(b, b.x["x"])
    y = b.op("nn.pad", x, pad_width=((0, 0), (0, 0), (1, 1), (1, 1)), pad_value=128.0)
    y = qconv(b, y, 4, rng=RNG, padding=(1, 1, 1, 1))
    # the convolution alone (attribute padding) is taken; the pad op is refused with the reason
    reason = conv + "both op and attr padding exist, must be either op/attr only or no padding"
    g = b.done(y)
    out.append(Refusal("pad op and pad attribute", g, reason, node=_named(g, "nn.pad")))

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    y = b.op("nn.pad", _in_nhwc(b, b.x["x"]), pad_width=((0, 0), (0, 0), (1, 1), (1, 1)), pad_mode="reflect")
    g = b.done(qconv(b, y, 4, rng=RNG))
    reason = conv + "pad mode=reflect, pad mode must = constant"
    out.append(Refusal("reflect pad before a conv", g, reason, node=_named(g, "nn.pad")))

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    y = b.op("nn.pad", _in_nhwc(b, b.x["x"]), pad_width=((0, 0), (1, 1), (1, 1), (1, 1)), pad_value=128.0)
    g = b.done(qconv(b, y, 4, rng=RNG))
    reason = conv + "pad_width=[[0, 0], [1, 1], [1, 1], [1, 1]]: only height and width may be padded"
    out.append(Refusal("channel pad before a conv", g, reason, node=_named(g, "nn.pad")))

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

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    y = qconv(b, b.x["x"], 8, rng=RNG, groups=4)
    reason = conv + "depthwise convolution with channel multiplier 2: channel multiplier must = 1"
    out.append(Refusal("depthwise conv with multiplier 2", b.done(y), reason))

    # the NPU's convolutions take symmetric weights: offloaded without this check, about half of such a graph's
    # outputs came out wrong
    w = RNG.integers(-100, 100, (4, 4, 3, 3)).astype(np.int8)
    b, y = _conv_with_weights(w, QuantParams(0.02, 3))
    reason = conv + "weight zero point=3, weight zero points must = 0 (symmetric weights)"
    out.append(Refusal("conv weights with a zero point", b.done(y), reason))
    zps = np.array([0, 0, -5, 0])
    b, y = _conv_with_weights(w, QuantParams(np.full(4, 0.02, np.float32), zps, 0))
    reason = conv + "weight zero point=-5, weight zero points must = 0 (symmetric weights)"
    out.append(Refusal("conv weights with a zero point in one channel", b.done(y), reason))

    # bias_add along the height, which has as many elements as there are channels (NHWC: axis 1)
    b = GraphBuilder(x=qt((1, 4, 6, 8)))
    y = b.op("qnn.conv2d", b.x["x"], b.const(w, QuantParams(0.02, 0)))  # [1, 4, 4, 6]
    y = b.op("nn.bias_add", y, b.const(np.arange(4, dtype=np.int32), QuantParams(0.001, 0)), axis=2)
    y = b.op("qnn.requantize", y, out_scale=0.1, out_zero_point=128, out_dtype="uint8")
    reason = conv + "bias_add axis=1, bias must be added along the channel axis"
    out.append(Refusal("bias added along the height", b.done(y), reason))

    transposed = "ethosn.qnn_conv2d_transpose: "
    # each axis on its own: a check reading one stride would take one of these
    for strides in ((1, 2), (2, 1), (3, 3)):
        reason = transposed + f"strides={list(strides)}, strides must = [1, 1] or [2, 2]"
        out.append(Refusal(f"transposed conv strides {strides}", _transposed(strides=strides), reason))
    reason = transposed + "dilation=[2, 2], dilation must = [1, 1]"
    out.append(Refusal("dilated transposed conv", _transposed(dilation=(2, 2)), reason))
    reason = transposed + "groups=2, groups must = 1"
    out.append(Refusal("grouped transposed conv", _transposed(groups=2), reason))
    reason = transposed + "batch size=2, batch size must = 1"
    out.append(Refusal("batch 2 transposed conv", _transposed(shape=(2, 4, 8, 8)), reason))
    reason = transposed + "weight zero point=5, weight zero points must = 0 (symmetric weights)"
    out.append(Refusal("transposed conv weights with a zero point", _transposed(wzp=5), reason))

    fc = "ethosn.qnn_fc: "
    out.append(Refusal("3-D fully connected", _fc((1, 3, 16)), fc + "dimensions=3, dimensions must = 2"))
    out.append(Refusal("batch 2 fully connected", _fc((2, 16)), fc + "batch size=2, batch size must = 1"))
    reason = fc + "weight zero point=2, weight zero points must = 0 (symmetric weights)"
    out.append(Refusal("fully connected weights with a zero point", _fc(wzp=2), reason))
    return out


def tensors() -> list[Refusal]:
    """What every tensor a command reads or writes must be."""
    out: list[Refusal] = []
    b = GraphBuilder(x=TensorType((1, 4, 8, 8), "int16"))
    y = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2))
    out.append(Refusal("int16 max pool", b.done(y), "dtype='int16', dtype must be either uint8, int8 or int32"))

    b = GraphBuilder(x=TensorType((1, 4, 8, 8), "int32"))
    y = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2))
    out.append(Refusal("int32 max pool", b.done(y), "dtype='int32', dtype must be either uint8 or int8"))

    b = GraphBuilder(x=qt((2, 4, 8, 8)))
    y = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2))
    out.append(Refusal("batch 2 max pool", b.done(y), "batch size=2, batch size must = 1"))

    b = GraphBuilder(x=qt((1, 4, 6, 6)))
    y = b.op("reshape", b.x["x"], newshape=(1, 2, 2, 3, 12))
    out.append(Refusal("rank 5", b.done(y), "dimensions=5, dimensions must be <= 4;"))

    b = GraphBuilder(x=TensorType((1, 4, 8, 8), "uint8"))
    y = b.op("clip", b.x["x"], a_min=10.0, a_max=100.0)
    reason = "tensor uint8[1,4,8,8] is not quantized: the NPU computes on quantized tensors only"
    out.append(Refusal("clip of plain uint8", b.done(y), reason))

    per_channel = QuantParams(np.full(4, 0.05, np.float32), np.full(4, 128), 1)
    b = GraphBuilder(x=TensorType((1, 4, 8, 8), "uint8", per_channel))
    y = b.op("clip", b.x["x"], a_min=10.0, a_max=100.0)
    reason = (
        "tensor uint8[1,4,8,8] q(axis=1, 4 channels) is quantized per channel: activations must be quantized per tensor"
    )
    out.append(Refusal("clip of a per-channel tensor", b.done(y), reason))
    return out


def pools() -> list[Refusal]:
    out: list[Refusal] = []
    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    y = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2), dilation=(2, 2))
    out.append(Refusal("dilated max pool", b.done(y), "dilation=[2, 2], dilation must = [1, 1]"))

    avg = "ethosn.qnn_avg_pool2d: "
    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    y = b.op("nn.avg_pool2d", b.op("cast", _in_nhwc(b, b.x["x"]), dtype="int32"), pool_size=(2, 2), dilation=(2, 2))
    g = b.done(b.op("cast", y, dtype="uint8"))
    reason = avg + "dilation=[2, 2], dilation must = [1, 1]"
    out.append(Refusal("dilated average pool", g, reason, node=_named(g, "nn.avg_pool2d")))

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    y = b.op("nn.avg_pool2d", b.op("cast", _in_nhwc(b, b.x["x"]), dtype="int16"), pool_size=(2, 2))
    g = b.done(b.op("cast", y, dtype="uint8"))
    reason = avg + "the pooled tensor is widened to int16, must be widened to int32"
    out.append(Refusal("average pool on int16", g, reason, node=_named(g, "nn.avg_pool2d")))

    mean = "ethosn.qnn_mean: "
    for axis, keepdims, reason in (
        # NCHW axes (1, 3) are NHWC's [3, 2]
        ((1, 3), True, "mean over axes [2, 3]: the mean must be over height and width (axes [1, 2] of NHWC)"),
        ((2, 3), False, "mean without keepdims: the mean must keep its reduced axes (keepdims=True)"),
    ):
        b = GraphBuilder(x=qt((1, 4, 8, 8)))
        y = b.op("mean", b.op("cast", _in_nhwc(b, b.x["x"]), dtype="int32"), axis=axis, keepdims=keepdims)
        g = b.done(b.op("qnn.requantize", y, out_scale=0.05, out_zero_point=128, out_dtype="uint8"))
        out.append(Refusal(f"mean over {axis}, keepdims={keepdims}", g, mean + reason, node=_named(g, "mean")))
    return out


def tables() -> list[Refusal]:
    """Activations, requantize and clip: what the NPU computes through a lookup table."""
    out: list[Refusal] = []
    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    y = dq_act_q(b, b.x["x"], "sigmoid", 1.0, 3)
    reason = "ethosn.qnn_sigmoid: output quantization params=(3, 1), must = (0, 1/256)"
    out.append(Refusal("sigmoid output params", b.done(y), reason))

    b = GraphBuilder(x=qt((1, 4, 8, 8), "int8"))
    y = dq_act_q(b, b.x["x"], "sigmoid", 1 / 256, 0)
    reason = "ethosn.qnn_sigmoid: output quantization params=(0, 0.00390625), must = (-128, 1/256)"
    out.append(Refusal("int8 sigmoid output params", b.done(y), reason))

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

    b = GraphBuilder(x=TensorType((1, 4, 8, 8), "int32", QuantParams(0.05, 0)))
    y = b.op("qnn.requantize", b.x["x"], out_scale=0.1, out_zero_point=128, out_dtype="uint8")
    reason = "dtype='int32': a lone requantize must read uint8 or int8 (int32 only inside a composite)"
    out.append(Refusal("requantize of int32", b.done(y), reason))
    return out


def elementwise() -> list[Refusal]:
    out: list[Refusal] = []
    b = GraphBuilder(x=qt((1, 8, 4, 4)), y=qt((1, 8, 1, 4)))
    p = _in_nhwc(b, b.x["x"])
    q = _in_nhwc(b, b.x["y"])
    y = b.op("qnn.add", p, q, out_scale=0.1, out_zero_point=128)
    reason = "ethosn.qnn_add: inputs of shapes [1, 4, 4, 8] and [1, 1, 4, 8]: both inputs must have the same shape (no broadcasting)"
    out.append(Refusal("broadcasting add", b.done(y), reason))

    b = GraphBuilder(x=qt((1, 4, 8, 8)), y=qt((1, 4, 8, 8)))
    y = b.op("qnn.mul", b.x["x"], b.x["y"], out_scale=0.1, out_zero_point=128)
    reason = "qnn.mul of two non-constant tensors: one input must be a constant"
    out.append(Refusal("mul of two tensors", b.done(y), reason))

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    three = b.const(np.array(3, np.uint8), QuantParams(0.1, 0))
    five = b.const(np.array(5, np.uint8), QuantParams(0.1, 0))
    c = b.op("qnn.add", three, five, out_scale=0.1, out_zero_point=0)
    g = b.done(b.op("qnn.add", b.x["x"], c, out_scale=0.1, out_zero_point=128))
    reason = "qnn.add of two constants: nothing to compute"
    out.append(Refusal("add of two constants", g, reason, node=g.nodes[0].name))

    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    c = b.const(RNG.integers(0, 255, (1, 4, 8, 8)).astype(np.uint8), QuantParams(0.1, 3))
    y = b.op("qnn.add", _in_nhwc(b, b.x["x"]), c, out_scale=0.1, out_zero_point=128)
    reason = "constant of shape [1, 8, 8, 4]: the constant must have 1 element or one per channel (4)"
    out.append(Refusal("add of a whole-tensor constant", b.done(y), reason))

    b = GraphBuilder(x=qt((1, 4)))
    c = b.const(RNG.integers(0, 255, (1, 1, 4)).astype(np.uint8), QuantParams(0.1, 3))
    y = b.op("qnn.add", b.x["x"], c, out_scale=0.1, out_zero_point=128)
    out.append(
        Refusal("add of a constant of higher rank", b.done(y), "the constant broadcasts the input [1, 4] to [1, 1, 4]")
    )
    return out


def moves() -> list[Refusal]:
    out: list[Refusal] = []
    b = GraphBuilder(x=qt((1, 16, 4, 4)))
    y = b.op("nn.depth_to_space", _in_nhwc(b, b.x["x"]), block_size=2, mode="CRD")
    out.append(Refusal("depth_to_space CRD", b.done(y), "mode=CRD, mode must = DCR"))

    resize = "ethosn.qnn_resize: "
    for size, method, reason in (
        ((15, 10), "nearest_neighbor", "Requested height isn't supported"),
        ((10, 15), "nearest_neighbor", "Requested width isn't supported"),
        ((10, 10), "linear", "method=linear, method must = nearest_neighbor"),
    ):
        b = GraphBuilder(x=qt((1, 4, 5, 5)))
        y = b.op("image.resize2d", b.x["x"], size=size, method=method)
        out.append(Refusal(f"resize to {size}, {method}", b.done(y), resize + reason))
    return out


def _one_op(b: GraphBuilder, op: str, x, w_dtype: str):
    """``op`` on ``x`` with the attributes and constants it needs (constants of ``w_dtype``)."""
    c, h = x.type.shape[1], x.type.shape[2]
    if op in ("add", "multiply"):
        return b.op(op, x, x)
    if op == "concatenate":
        return b.op(op, x, x, axis=1)
    if op in ("nn.avg_pool2d", "nn.max_pool2d"):
        return b.op(op, x, pool_size=(2, 2))
    if op == "mean":
        return b.op(op, x, axis=(2, 3), keepdims=True)
    if op == "image.resize2d":
        return b.op(op, x, size=(2 * h, 2 * h))
    if op == "nn.bias_add":
        return b.op(op, x, b.const(np.ones(c, w_dtype)))
    if op in ("nn.conv2d", "nn.conv2d_transpose"):
        return b.op(op, x, b.const(np.ones((c, c, 3, 3), w_dtype)), padding=(1, 1, 1, 1))
    if op == "nn.leaky_relu":
        return b.op(op, x, alpha=0.1)
    return b.op(op, x)


def float_and_integer_forms() -> list[Refusal]:
    """Ops ethosn runs only in their quantized form, written on floats (an fp32 model) or on plain integers."""
    out: list[Refusal] = []
    float_dtype = "dtype='float32', dtype must be either uint8, int8 or int32"
    for op in (
        "nn.conv2d",
        "nn.conv2d_transpose",
        "nn.bias_add",
        "nn.relu",
        "add",
        "multiply",
        "concatenate",
        "sigmoid",
        "tanh",
        "nn.leaky_relu",
        "nn.avg_pool2d",
        "nn.global_avg_pool2d",
        "mean",
        "nn.max_pool2d",
    ):
        b = GraphBuilder(x=(1, 4, 8, 8))
        out.append(Refusal(f"float32 {op}", b.done(_one_op(b, op, b.x["x"], "float32")), float_dtype))
    b = GraphBuilder(x=(1, 16))
    dense = b.op("nn.dense", b.x["x"], b.const(RNG.standard_normal((8, 16)).astype(np.float32)))
    out.append(Refusal("float32 nn.dense", b.done(dense), float_dtype))
    # a float resize matches ethosn.qnn_resize's pattern, whose check names it
    b = GraphBuilder(x=(1, 4, 8, 8))
    y = _one_op(b, "image.resize2d", b.x["x"], "float32")
    out.append(Refusal("float32 image.resize2d", b.done(y), "ethosn.qnn_resize: " + float_dtype))

    # the same ops on plain (unquantized) 8-bit integers: ethosn names the form it runs them in
    # (sigmoid, tanh and leaky relu only take floats; an integer resize meets qnn_resize's check first)
    for op, form in (
        ("nn.conv2d", "ethosn.qnn_conv2d"),
        ("nn.conv2d_transpose", "ethosn.qnn_conv2d_transpose"),
        ("nn.bias_add", "ethosn.qnn_conv2d or ethosn.qnn_fc"),
        ("nn.relu", "ethosn.qnn_conv2d or ethosn.qnn_fc (a clamp of their requantize)"),
        ("add", "ethosn.qnn_add or qnn.add"),
        ("multiply", "qnn.mul"),
        ("concatenate", "qnn.concatenate"),
        ("nn.avg_pool2d", "ethosn.qnn_avg_pool2d"),
        ("nn.global_avg_pool2d", "ethosn.qnn_avg_pool2d"),
        ("mean", "ethosn.qnn_mean"),
    ):
        b = GraphBuilder(x=TensorType((1, 4, 8, 8), "uint8"))
        y = _one_op(b, op, b.x["x"], "uint8")
        out.append(Refusal(f"uint8 {op}", b.done(y), f"ethosn runs {op} only as {form}"))
    b = GraphBuilder(x=TensorType((1, 16), "int8"))
    dense = b.op("nn.dense", b.x["x"], b.const(RNG.integers(-100, 100, (8, 16)).astype(np.int8)))
    out.append(Refusal("int8 nn.dense", b.done(dense), "ethosn runs nn.dense only as ethosn.qnn_fc"))

    # a model's input quantize: ethosn quantizes only inside its activation patterns
    b = GraphBuilder(x=(1, 4, 8, 8))
    y = b.op("qnn.quantize", b.x["x"], scale=0.05, zero_point=3, out_dtype="uint8")
    reason = (
        "ethosn takes quantized tensors in: a float-to-integer quantize runs on the host "
        "(ethosn quantizes only a sigmoid's, tanh's or leaky relu's result, inside ethosn.qnn_sigmoid and its kin)"
    )
    out.append(Refusal("input quantize", b.done(y), reason))

    # the same quantize at a partition's input is an edge conversion of ethosn's runtime, of float32 only
    b = GraphBuilder(x=TensorType((1, 4, 8, 8), "float64"))
    y = b.op("qnn.quantize", b.x["x"], scale=0.05, zero_point=128, out_dtype="uint8")
    y = qconv(b, y, 4, rng=RNG)
    g = b.done(y)
    reason = "ethosn's runtime quantizes float32 data only, got float64"
    out.append(Refusal("float64 input quantize at a partition's edge", g, reason, _named(g, "qnn.quantize")))
    return out


def refusals() -> list[Refusal]:
    return [*convolutions(), *tensors(), *pools(), *tables(), *elementwise(), *moves(), *float_and_integer_forms()]
