"""The ethosn support library: what the NPU runs, and why it does not run the rest.

Every answer is ``None`` (supported) or one line saying why not, in the wording
of Arm's Ethos-N support library as TVM's integration reported it
(``"stride size=3, stride size must = 2"``), so the partition report
(``accel inspect``) tells a user what to change. The checks see the graph as
the backend receives it: NHWC activations, OHWI convolution weights.

Tensors: quantized uint8 / int8 (int32 only for biases and accumulators
inside composites), NHWC, batch 1, rank at most 4. The composites are
:data:`PATTERNS` (name, pattern, check), in priority order; single ops are the
keys of :data:`OP_CHECKS`. The sentences are written with
:mod:`accel_sdk.reasons`, in the words Arm's library uses ("batch size",
"data format").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from accel_sdk.reasons import Reason, must_be, must_be_at_most, must_equal

from accel import quant
from accel.ir import Node, TensorType, Value
from accel.pattern import Match, Pattern, is_constant, is_op, wildcard

#: dtypes an ethosn tensor may have (int32: biases and accumulators inside a composite).
DTYPES = ("uint8", "int8", "int32")
#: dtypes of the activations a command reads and writes.
ACT_DTYPES = ("uint8", "int8")
MAX_RANK = 4
#: The overall rescale of a convolution or fully connected layer must lie in (2^-32, 65536).
MIN_OVERALL_SCALE = 2.0**-32
MAX_OVERALL_SCALE = 65536.0


# -- tensors ------------------------------------------------------------------------------


def check_rank(t: TensorType) -> Reason:
    reason = must_be_at_most("dimensions", t.rank, MAX_RANK)
    return reason and f"{reason};"  # Arm's library ends this one with a semicolon


def check_dtype(t: TensorType, allowed: Sequence[str] = DTYPES) -> Reason:
    return must_be("dtype", t.dtype, allowed, quote=True, either=True)


def check_batch(t: TensorType) -> Reason:
    return must_equal("batch size", t.shape[0], 1) if t.rank == 4 else None


def check_activation(t: TensorType, *, quantized: bool = True) -> Reason:
    """A tensor a command reads or writes: rank <= 4, uint8/int8, quantized per tensor, batch 1.

    ``quantized=False``: for ops that only select elements (max pooling, moves), plain 8-bit integers too.
    """
    reason = check_rank(t) or check_dtype(t) or check_dtype(t, ACT_DTYPES) or check_batch(t)
    if reason or (t.quant is None and not quantized):
        return reason
    if t.quant is None:
        return f"tensor {t} is not quantized: the NPU computes on quantized tensors only"
    if t.quant.axis is not None:
        return f"tensor {t} is quantized per channel: activations must be quantized per tensor"
    return None


def check_tensors(values: Sequence[Value], *, quantized: bool = True) -> Reason:
    for v in values:
        reason = check_activation(v.type, quantized=quantized)
        if reason:
            return reason
    return None


def check_layout(layout: str) -> Reason:
    return must_equal("data format", layout, "NHWC")


def _qp(t: TensorType) -> tuple[np.ndarray, np.ndarray]:
    q = t.quant
    assert q is not None
    return np.asarray(q.scale, np.float32), np.asarray(q.zero_point)


def _fmt_scale(s: float) -> str:
    return f"{s:g}"


# -- convolutions and fully connected --------------------------------------------------------


def check_overall_scale(data: TensorType, weight: TensorType, out: TensorType) -> Reason:
    """``s_in * s_w / s_out`` (per output channel) must lie in (2^-32, 65536)."""
    s_in, _ = _qp(data)
    s_w, _ = _qp(weight)
    s_out, _ = _qp(out)
    overall = (s_in.astype(np.float64) * s_w.astype(np.float64)) / float(s_out)
    if np.any(overall <= MIN_OVERALL_SCALE) or np.any(overall >= MAX_OVERALL_SCALE):
        return "Overall scale (of the input * weights / output) should be in the range (2^-32, 65536)"
    return None


def check_weights(weight: Value) -> Reason:
    t = weight.type
    reason = check_dtype(t, ACT_DTYPES)
    if reason:
        return f"weights: {reason}"
    if t.quant is None:
        return "weights are not quantized"
    if np.any(np.asarray(t.quant.zero_point) != 0):
        zp = np.asarray(t.quant.zero_point).reshape(-1)
        bad = int(zp[zp != 0][0])
        return f"weight zero point={bad}, weight zero points must = 0 (symmetric weights)"
    return None


def check_bias(bias: Node | None, channels: int) -> Reason:
    if bias is None:
        return None
    b = bias.inputs[1]
    if b.type.dtype != "int32":
        return f"bias dtype='{b.type.dtype}', bias dtype must = int32"
    if b.type.size != channels:
        return f"bias of {b.type.size} elements, must have one per output channel ({channels})"
    if bias.attrs["axis"] % bias.outputs[0].type.rank != bias.outputs[0].type.rank - 1:
        return f"bias_add axis={bias.attrs['axis']}, bias must be added along the channel axis"
    return None


def _pad_amounts(pad: Node) -> list[tuple[int, int]]:
    from accel.ops.nn import pad_pairs

    return [tuple(p) for p in pad_pairs(pad.attrs["pad_width"], pad.inputs[0].type.rank)]  # type: ignore[misc]


def check_pad(pad: Node) -> Reason:
    reason = must_equal("pad mode", pad.attrs["pad_mode"], "constant")
    if reason:
        return reason
    pairs = _pad_amounts(pad)
    if len(pairs) != 4 or pairs[0] != (0, 0) or pairs[3] != (0, 0):
        return f"pad_width={[list(p) for p in pairs]}: only height and width may be padded"
    return None


def check_conv2d_match(m: Match) -> Reason:
    """``ethosn.qnn_conv2d``: ``nn.pad? → qnn.conv2d(const) → nn.bias_add(const)? → nn.relu? → qnn.requantize``."""
    conv = m.node("conv")
    a = conv.attrs
    pad = m.bindings.get("pad")
    if isinstance(pad, Node) and any(a["padding"]):
        return "both op and attr padding exist, must be either op/attr only or no padding"
    reason = check_conv2d_attrs(a, conv.inputs[0].type, conv.inputs[1].type)
    if reason:
        return reason
    if isinstance(pad, Node):
        reason = check_pad(pad)
        if reason:
            return reason
    return check_linear_tail(m, conv, out_channels=conv.outputs[0].type.shape[-1])


def check_conv2d_attrs(a: Mapping[str, Any], data: TensorType, weight: TensorType) -> Reason:
    """The attribute rules of a quantized convolution (NHWC data, OHWI weights)."""
    reason = (
        check_layout(a["data_layout"])
        or must_equal("weight format", a["kernel_layout"], "OHWI")
        or must_equal("stride size", len(a["strides"]), 2)
        or must_equal("dilation", list(a["dilation"]), [1, 1])
        or check_rank(data)
        or check_batch(data)
    )
    if reason:
        return reason
    channels = data.shape[-1]
    groups = a["groups"]
    o, _kh, _kw, i = weight.shape
    if groups == 1:
        if i != channels:
            return "Weights tensor must have I dimension equal to the number of channels of the input tensor."
    elif groups == channels and i == 1:
        if o != channels:
            return f"depthwise convolution with channel multiplier {o // channels}: channel multiplier must = 1"
    else:
        return "Weights tensor must have I dimension equal to the number of channels of the input tensor."
    return None


def check_linear_tail(m: Match, linear: Node, *, out_channels: int) -> Reason:
    """What a conv / transposed conv / fully connected composite shares: tensors, weights, bias, scales."""
    reason = check_tensors(m.inputs) or check_tensors(m.outputs) or check_weights(linear.inputs[1])
    if reason:
        return reason
    bias = m.bindings.get("bias")
    reason = check_bias(bias if isinstance(bias, Node) else None, out_channels)
    if reason:
        return reason
    return check_overall_scale(linear.inputs[0].type, linear.inputs[1].type, m.outputs[0].type)


def check_conv2d_transpose_match(m: Match) -> Reason:
    """``ethosn.qnn_conv2d_transpose``: ``qnn.conv2d_transpose(const) → bias_add? → relu? → qnn.requantize``."""
    conv = m.node("conv")
    a = conv.attrs
    strides = list(a["strides"])
    reason = check_layout(a["data_layout"]) or must_equal("stride size", len(strides), 2)
    if reason:
        return reason
    if strides not in ([1, 1], [2, 2]):
        return f"strides={strides}, strides must = [1, 1] or [2, 2]"
    reason = (
        must_equal("dilation", list(a["dilation"]), [1, 1])
        or must_equal("groups", a["groups"], 1)
        or check_batch(conv.inputs[0].type)
    )
    if reason:
        return reason
    return check_linear_tail(m, conv, out_channels=conv.outputs[0].type.shape[-1])


def check_fc_match(m: Match) -> Reason:
    """``ethosn.qnn_fc``: ``qnn.dense(const) → nn.bias_add(const)? → nn.relu? → qnn.requantize``."""
    dense = m.node("dense")
    data = dense.inputs[0].type
    return (
        must_equal("dimensions", data.rank, 2)
        or must_equal("batch size", data.shape[0], 1)
        or check_linear_tail(m, dense, out_channels=dense.outputs[0].type.shape[-1])
    )


# -- pooling and mean ---------------------------------------------------------------------


def _pool_common(node: Node) -> Reason:
    return check_layout(node.attrs["layout"]) or must_equal("dilation", list(node.attrs["dilation"]), [1, 1])


def check_max_pool2d(node: Node) -> Reason:
    return _pool_common(node) or check_tensors([*node.inputs, *node.outputs], quantized=False)


def check_avg_pool2d_match(m: Match) -> Reason:
    """``ethosn.qnn_avg_pool2d``: ``cast | qnn.requantize (to int32) → nn.avg_pool2d → cast | qnn.requantize``."""
    return _pool_common(m.node("pool")) or _widened(m) or check_tensors(m.inputs) or check_tensors(m.outputs)


def _widened(m: Match) -> Reason:
    widen = m.node("widen")
    if widen.outputs[0].type.dtype != "int32":
        return f"the pooled tensor is widened to {widen.outputs[0].type.dtype}, must be widened to int32"
    narrow = m.node("narrow")
    if narrow.op == "cast" and narrow.inputs[0].type.dtype != "int32":
        return "the average must be taken on int32"
    return None


def check_mean_match(m: Match) -> Reason:
    """``ethosn.qnn_mean``: ``cast | qnn.requantize (to int32) → mean over H, W (keepdims) | global_avg_pool2d → qnn.requantize``."""
    node = m.node("mean")
    if node.op == "mean":
        rank = node.inputs[0].type.rank
        axes = sorted(int(a) % rank for a in node.attrs["axis"]) if node.attrs["axis"] else list(range(rank))
        if rank != 4 or axes != [1, 2]:
            return f"mean over axes {axes}: the mean must be over height and width (axes [1, 2] of NHWC)"
        if not node.attrs["keepdims"]:
            return "mean without keepdims: the mean must keep its reduced axes (keepdims=True)"
    else:
        reason = check_layout(node.attrs["layout"])
        if reason:
            return reason
    return _widened(m) or check_tensors(m.inputs) or check_tensors(m.outputs)


# -- activations -----------------------------------------------------------------------------


def _out_params(m: Match) -> tuple[float, int, str]:
    out = m.outputs[0].type
    s, z = _qp(out)
    return float(s), int(z), out.dtype


def check_sigmoid_match(m: Match) -> Reason:
    """``ethosn.qnn_sigmoid``: output zero point 0 (uint8) / -128 (int8), scale 1/256."""
    reason = check_tensors(m.inputs) or check_tensors(m.outputs)
    if reason:
        return reason
    s, z, dt = _out_params(m)
    want = 0 if dt == "uint8" else -128
    if z != want or s != 1.0 / 256:
        return f"output quantization params=({z}, {_fmt_scale(s)}), must = ({want}, 1/256)"
    return None


def check_tanh_match(m: Match) -> Reason:
    """``ethosn.qnn_tanh``: output zero point 128 (uint8) / 0 (int8), scale 1/128."""
    reason = check_tensors(m.inputs) or check_tensors(m.outputs)
    if reason:
        return reason
    s, z, dt = _out_params(m)
    want = 128 if dt == "uint8" else 0
    if z != want or s != 0.0078125:
        return f"output quantization params=({z}, {_fmt_scale(s)}), must = ({want}, 0.0078125)"
    return None


def check_leaky_relu_match(m: Match) -> Reason:
    alpha = float(m.node("act").attrs["alpha"])
    if not 0.0 < alpha < 1.0:
        return f"leaky relu alpha must be less than 1 and greater than 0, but was {alpha}"
    return check_tensors(m.inputs) or check_tensors(m.outputs)


def check_clip(node: Node) -> Reason:
    """``clip`` on a quantized tensor: a ReLU with bounds (a lookup table on the NPU)."""
    reason = check_tensors(node.inputs) or check_tensors(node.outputs)
    if reason:
        return reason
    if float(node.attrs["a_min"]) > float(node.attrs["a_max"]):
        return f"clip bounds [{node.attrs['a_min']}, {node.attrs['a_max']}] are empty"
    return None


# -- requantize, elementwise ------------------------------------------------------------------


def check_requantize(node: Node) -> Reason:
    x, y = node.inputs[0].type, node.outputs[0].type
    if x.dtype == "int32":
        return "dtype='int32': a lone requantize must read uint8 or int8 (int32 only inside a composite)"
    reason = check_activation(x) or check_activation(y)
    if reason:
        return reason
    s_in, _ = _qp(x)
    s_out, _ = _qp(y)
    if not float(s_out) > float(s_in) / 128:
        return "Output scale must be bigger than input scale / 128"
    return None


def check_add_match(m: Match) -> Reason:
    """``ethosn.qnn_add``: two non-constant inputs of one shape."""
    add = m.node("add")
    a, b = (list(v.type.shape) for v in add.inputs)
    if a != b:
        return f"inputs of shapes {a} and {b}: both inputs must have the same shape (no broadcasting)"
    return check_tensors(add.inputs) or check_tensors(add.outputs)


def check_const_binary(node: Node) -> Reason:
    """``qnn.add`` / ``qnn.mul`` with a constant of size 1 or one value per channel (an identity / depthwise)."""
    x, c = node.inputs
    if x.const is not None:
        x, c = c, x
    if c.const is None:
        if node.op == "qnn.add":
            return "qnn.add of two non-constant tensors is ethosn.qnn_add's (same shapes)"
        return "qnn.mul of two non-constant tensors: one input must be a constant"
    if x.const is not None:
        return f"{node.op} of two constants: nothing to compute"
    channels = x.type.shape[-1] if x.type.rank else 1
    if c.type.size not in (1, channels) or (c.type.size == channels and c.type.rank and c.type.shape[-1] != channels):
        return (
            f"constant of shape {list(c.type.shape)}: the constant must have 1 element or one per channel ({channels})"
        )
    if list(node.outputs[0].type.shape) != list(x.type.shape):
        return f"the constant broadcasts the input {list(x.type.shape)} to {list(node.outputs[0].type.shape)}"
    return check_tensors([x]) or check_tensors(node.outputs)


def check_concatenate(node: Node) -> Reason:
    return check_tensors(node.inputs) or check_tensors(node.outputs)


def check_split(node: Node) -> Reason:
    return check_tensors([*node.inputs, *node.outputs], quantized=False)


def check_depth_to_space(node: Node) -> Reason:
    return (
        check_layout(node.attrs["layout"])
        or must_equal("mode", node.attrs["mode"], "DCR")
        or check_tensors([*node.inputs, *node.outputs], quantized=False)
    )


def check_reshape(node: Node) -> Reason:
    return check_tensors([*node.inputs, *node.outputs], quantized=False)


def check_resize_match(m: Match) -> Reason:
    """``ethosn.qnn_resize``: nearest neighbour, upscaling by 2 (``2·H`` or ``2·H − 1``)."""
    node = m.node("resize")
    a = node.attrs
    reason = check_layout(a["layout"]) or must_equal("method", a["method"], "nearest_neighbor")
    if reason:
        return reason
    _, h, w, _ = node.inputs[0].type.shape
    oh, ow = (int(d) for d in a["size"])
    if oh not in (2 * h, 2 * h - 1):
        return "Requested height isn't supported"
    if ow not in (2 * w, 2 * w - 1):
        return "Requested width isn't supported"
    reason = check_tensors(m.inputs) or check_tensors(m.outputs)
    if reason:
        return reason
    if "requantize" in m.bindings:
        return check_requantize(m.node("requantize"))
    return None


# -- the tables --------------------------------------------------------------------------------


def _linear(op: str, label: str, first: Pattern) -> Pattern:
    node = is_op(op)(first, is_constant()).named(label)
    bias = node.optional(lambda x: is_op("nn.bias_add")(x, is_constant()).named("bias"))
    relu = bias.optional(lambda x: is_op("nn.relu")(x).named("relu"))
    return is_op("qnn.requantize")(relu).named("requantize")


def conv2d_pattern() -> Pattern:
    pad = is_op("nn.pad")(wildcard()).named("pad").optional()
    return _linear("qnn.conv2d", "conv", pad)


def conv2d_transpose_pattern() -> Pattern:
    return _linear("qnn.conv2d_transpose", "conv", wildcard())


def fc_pattern() -> Pattern:
    return _linear("qnn.dense", "dense", wildcard())


def avg_pool2d_pattern() -> Pattern:
    widen = is_op("cast", "qnn.requantize")(wildcard()).named("widen")
    pool = is_op("nn.avg_pool2d")(widen).named("pool")
    return is_op("cast", "qnn.requantize")(pool).named("narrow")


def mean_pattern() -> Pattern:
    widen = is_op("cast", "qnn.requantize")(wildcard()).named("widen")
    mean = is_op("mean", "nn.global_avg_pool2d")(widen).named("mean")
    return is_op("qnn.requantize", "cast")(mean).named("narrow")


def _dq_act_q(act: str) -> Pattern:
    dq = is_op("qnn.dequantize")(wildcard()).named("dequantize")
    return is_op("qnn.quantize")(is_op(act)(dq).named("act")).named("quantize")


def add_pattern() -> Pattern:
    def not_const(v: Value) -> bool:
        return v.const is None

    return is_op("qnn.add")(wildcard().where(not_const), wildcard().where(not_const)).named("add")


def resize_pattern() -> Pattern:
    resize = is_op("image.resize2d")(wildcard()).named("resize")
    return resize.optional(lambda x: is_op("qnn.requantize")(x).named("requantize"))


#: (composite name, pattern builder, check), in priority order.
PATTERNS: list[tuple[str, Callable[[], Pattern], Callable[[Match], Reason]]] = [
    ("qnn_conv2d", conv2d_pattern, check_conv2d_match),
    ("qnn_conv2d_transpose", conv2d_transpose_pattern, check_conv2d_transpose_match),
    ("qnn_fc", fc_pattern, check_fc_match),
    ("qnn_avg_pool2d", avg_pool2d_pattern, check_avg_pool2d_match),
    ("qnn_mean", mean_pattern, check_mean_match),
    ("qnn_sigmoid", lambda: _dq_act_q("sigmoid"), check_sigmoid_match),
    ("qnn_tanh", lambda: _dq_act_q("tanh"), check_tanh_match),
    ("qnn_leaky_relu", lambda: _dq_act_q("nn.leaky_relu"), check_leaky_relu_match),
    ("qnn_add", add_pattern, check_add_match),
    ("qnn_resize", resize_pattern, check_resize_match),
]

#: Float ops ethosn runs only in their quantized form (the composite or op that form is).
QUANTIZED_FORMS: dict[str, str] = {
    "nn.conv2d": "ethosn.qnn_conv2d",
    "nn.conv2d_transpose": "ethosn.qnn_conv2d_transpose",
    "nn.dense": "ethosn.qnn_fc",
    "nn.bias_add": "ethosn.qnn_conv2d or ethosn.qnn_fc",
    "nn.relu": "ethosn.qnn_conv2d or ethosn.qnn_fc (a clamp of their requantize)",
    "add": "ethosn.qnn_add or qnn.add",
    "multiply": "qnn.mul",
    "concatenate": "qnn.concatenate",
    "nn.avg_pool2d": "ethosn.qnn_avg_pool2d",
    "nn.global_avg_pool2d": "ethosn.qnn_avg_pool2d",
    "mean": "ethosn.qnn_mean",
    "sigmoid": "ethosn.qnn_sigmoid",
    "tanh": "ethosn.qnn_tanh",
    "nn.leaky_relu": "ethosn.qnn_leaky_relu",
    "image.resize2d": "ethosn.qnn_resize",
}


def check_float_form(node: Node) -> Reason:
    """An op ethosn runs only quantized: the dtype reason for a float one, else the form it takes."""
    for v in (*node.inputs, *node.outputs):
        reason = check_dtype(v.type)
        if reason:
            return reason
    return f"ethosn runs {node.op} only as {QUANTIZED_FORMS[node.op]}"


def check_quantize(node: Node) -> Reason:
    """A float-to-integer quantize of the model's data: ethosn takes quantized tensors in."""
    return (
        "ethosn takes quantized tensors in: a float-to-integer quantize runs on the host "
        "(ethosn quantizes only a sigmoid's, tanh's or leaky relu's result, inside ethosn.qnn_sigmoid and its kin)"
    )


def _per_tensor(t: TensorType, what: str) -> Reason:
    q = t.quant
    if q is None:
        return f"the {what} has no quantization parameters"
    if q.axis is not None:
        return f"the {what} is quantized per axis ({q.axis}); ethosn's runtime converts per-tensor data only"
    return None


def check_edge_quantize(node: Node) -> Reason:
    """A float32 input quantized per tensor to uint8/int8 before the NPU (ethosn's runtime, on the CPU)."""
    x, y = node.inputs[0].type, node.output.type
    if x.dtype != "float32":
        return f"ethosn's runtime quantizes float32 data only, got {x.dtype}"
    return check_rank(x) or check_dtype(y, ACT_DTYPES) or _per_tensor(y, "quantize's output")


def check_edge_dequantize(node: Node) -> Reason:
    """A uint8/int8 output dequantized per tensor to float32 after the NPU (ethosn's runtime, on the CPU)."""
    x = node.inputs[0].type
    return check_rank(x) or check_dtype(x, ACT_DTYPES) or _per_tensor(x, "dequantize's input")


def check_edge_transpose(node: Node) -> Reason:
    """A permutation of an input of at most 4 dimensions before the NPU (ethosn's runtime, on the CPU)."""
    x = node.inputs[0].type
    if x.dtype not in (*ACT_DTYPES, "float32"):
        return f"ethosn's runtime transposes uint8, int8 or float32 data, got {x.dtype}"
    return check_rank(x)


#: What ethosn's runtime converts itself, on the CPU, at a partition's edges (Backend.edge_ops):
#: the NPU takes 8-bit NHWC tensors in and gives them back, so a model's float input is
#: quantized and laid out before the command stream runs and its result dequantized after.
EDGE_OPS: dict[str, Callable[[Node], Reason]] = {
    "qnn.quantize": check_edge_quantize,
    "qnn.dequantize": check_edge_dequantize,
    "transpose": check_edge_transpose,
}

#: Ops ethosn never takes alone, and what it says of them (Backend.declines).
DECLINES: dict[str, Callable[[Node], Reason]] = {
    **dict.fromkeys(QUANTIZED_FORMS, check_float_form),
    "qnn.quantize": check_quantize,
}

#: single ops and their checks.
OP_CHECKS: dict[str, Callable[[Node], Reason]] = {
    "nn.max_pool2d": check_max_pool2d,
    "qnn.requantize": check_requantize,
    "clip": check_clip,
    "qnn.add": check_const_binary,
    "qnn.mul": check_const_binary,
    "qnn.concatenate": check_concatenate,
    "split": check_split,
    "nn.depth_to_space": check_depth_to_space,
    "reshape": check_reshape,
}


def overall_multiplier(in_scale: Any, w_scale: Any, out_scale: Any) -> tuple[np.ndarray, np.ndarray]:
    """The per-channel ``(m, shift)`` a fused requantize uses, exactly as the reference derives them."""
    acc = np.asarray(in_scale, np.float32) * np.asarray(w_scale, np.float32)  # float32 product, as the type rule
    real = acc.astype(np.float64) / float(np.float32(out_scale))
    m, s = quant.quantize_multiplier(np.atleast_1d(real))
    return np.asarray(m, np.int32), np.asarray(s, np.int32)
