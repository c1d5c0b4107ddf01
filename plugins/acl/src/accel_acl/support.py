"""What acl takes: the support table of TVM's ACL integration, and further, with a reason for every refusal.

NHWC, any batch, float32 and uint8/int8, as composites (``acl.conv2d``,
``acl.qnn_conv2d``, ``acl.dense``, ``acl.qnn_dense``, ``acl.avg_pool2d``,
``acl.l2_pool2d``: :data:`PATTERNS`) and single ops (pools, ``reshape``,
``add``, ``maximum``, ``qnn.add``, ``concatenate``, ``qnn.requantize``,
``qnn.quantize``, ``qnn.dequantize``, ``nn.softmax``, ``transpose``, ReLU and
bounded ReLU: :data:`OP_CHECKS`). docs/backends/acl.md lists every reason.
Reasons are written with :mod:`accel_sdk.reasons`, in the form accel reports them
for every backend (``groups=2, groups must = 1 ...``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from accel_sdk.reasons import constant_input, dtype_of, must_equal

from accel.backend import Check
from accel.ir import Node, Value
from accel.ops.geometry import conv2d_geometry, pool2d_geometry
from accel.pattern import Match, Pattern, is_constant, is_op, wildcard

FLOAT = ("float32",)
QUANT = ("uint8", "int8")
#: Depthwise kernels and strides ACL's depthwise convolution layer runs.
DEPTHWISE_KERNELS = ((3, 3), (5, 5))
DEPTHWISE_STRIDES = ((1, 1), (2, 2))
#: The most dimensions an Arm Compute Library tensor has (``TensorShape::num_max_dimensions``).
MAX_RANK = 6
#: Arm Compute Library's concatenation joins along its four innermost dimensions only.
CONCAT_AXES = 4
#: The most dimensions NESoftmaxLayer takes.
SOFTMAX_RANK = 4
#: The most dimensions NEPermute permutes.
PERMUTE_RANK = 4


# -- patterns ---------------------------------------------------------------------------


def _zero_pad(node: Node) -> bool:
    """An ``nn.pad`` a convolution absorbs: constant mode, spatial axes only (NHWC), value 0
    (float) or the data's zero point (quantized: the convolution pads with it too)."""
    attrs = node.attrs
    if attrs["pad_mode"] != "constant" or node.inputs[0].type.rank != 4:
        return False
    pairs = _pad_pairs(attrs["pad_width"])
    if pairs is None or pairs[0] != (0, 0) or pairs[3] != (0, 0) or min(min(p) for p in pairs) < 0:
        return False
    q = node.inputs[0].type.quant
    fill = 0 if q is None or q.axis is not None else int(q.zero_point)
    return float(attrs["pad_value"]) == fill


def _pad_pairs(width: Any) -> list[tuple[int, int]] | None:
    from accel.ops.nn import pad_pairs

    try:
        return [tuple(p) for p in pad_pairs(width, 4)]  # type: ignore[misc]
    except Exception:
        return None


def _data(pad_label: str = "pad") -> Pattern:
    """The data of a convolution: a zero ``nn.pad`` it absorbs, or any value."""
    return is_op("nn.pad")(wildcard()).where(_zero_pad).named(pad_label) | wildcard()


def _bounded_relu(node: Node) -> bool:
    """``clip(0, a)`` with ``a > 0``: ACL's BOUNDED_RELU (ReLU6 is ``a = 6``)."""
    return float(node.attrs["a_min"]) == 0.0 and float(node.attrs["a_max"]) > 0.0


def conv2d_pattern() -> Pattern:
    """``nn.pad? → nn.conv2d(x, const) → nn.bias_add(const)? → (nn.relu | clip(0, a))?`` in float32.

    Labels ``pad``, ``conv``, ``bias``, ``relu``, ``clip``.
    """
    conv = is_op("nn.conv2d")(_data(), wildcard()).has_dtype(*FLOAT).named("conv")
    bias = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()).named("bias"))
    return bias.optional(
        lambda x: is_op("nn.relu")(x).named("relu") | is_op("clip")(x).where(_bounded_relu).named("clip")
    )


def qnn_conv2d_pattern() -> Pattern:
    """``nn.pad? → qnn.conv2d(x, const) → nn.bias_add(const)? → nn.relu? → qnn.requantize``.

    Labels ``pad``, ``conv``, ``bias``, ``relu``, ``requantize``.
    """
    conv = is_op("qnn.conv2d")(_data(), wildcard()).named("conv")
    bias = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()).named("bias"))
    relu = bias.optional(lambda x: is_op("nn.relu")(x).named("relu"))
    return is_op("qnn.requantize")(relu).has_dtype(*QUANT).named("requantize")


def dense_pattern() -> Pattern:
    """``nn.dense(x, const 2-D) → nn.bias_add(const)?`` in float32. Labels ``dense``, ``bias``."""
    dense = is_op("nn.dense")(wildcard(), wildcard()).has_dtype(*FLOAT).named("dense")
    return dense.optional(lambda x: is_op("nn.bias_add")(x, is_constant()).named("bias"))


def qnn_dense_pattern() -> Pattern:
    """``qnn.dense(x, const) → nn.bias_add(const)? → qnn.requantize``. Labels ``dense``, ``bias``, ``requantize``."""
    dense = is_op("qnn.dense")(wildcard(), wildcard()).named("dense")
    bias = dense.optional(lambda x: is_op("nn.bias_add")(x, is_constant()).named("bias"))
    return is_op("qnn.requantize")(bias).has_dtype(*QUANT).named("requantize")


def avg_pool2d_pattern() -> Pattern:
    """``cast(int32) → nn.avg_pool2d | nn.global_avg_pool2d → cast(uint8 | int8)``: a quantized
    average pool summed in int32. Labels ``cast_in``, ``pool``, ``cast_out``."""
    cast_in = is_op("cast")(wildcard()).has_dtype("int32").named("cast_in")
    pool = is_op("nn.avg_pool2d", "nn.global_avg_pool2d")(cast_in).named("pool")
    return is_op("cast")(pool).has_dtype(*QUANT).named("cast_out")


def l2_pool2d_pattern() -> Pattern:
    """``power(x, 2) → nn.avg_pool2d → sqrt`` in float32. Labels ``power``, ``pool``, ``sqrt``."""
    power = is_op("power")(wildcard(), is_constant().where(_is_two)).has_dtype(*FLOAT).named("power")
    pool = is_op("nn.avg_pool2d")(power).named("pool")
    return is_op("sqrt")(pool).named("sqrt")


def _is_two(v: Value) -> bool:
    return v.const is not None and v.const.size == 1 and float(np.asarray(v.const).reshape(-1)[0]) == 2.0


# -- reasons ----------------------------------------------------------------------------


def _dtypes(node: Node, allowed: Sequence[str]) -> str | None:
    return dtype_of(node, allowed)


def _batch(shape: Sequence[int]) -> str | None:
    """4-D data of any batch: ACL's functions take a batch dimension (TVM's integration took batch 1 only)."""
    return must_equal("rank", len(shape), 4)


def _nhwc(node: Node, key: str = "layout") -> str | None:
    return must_equal(key, node.attrs[key], "NHWC")


def _grouping(conv: Node) -> str | None:
    """groups == 1, or depthwise (groups == channels) with a square 3x3 / 5x5 kernel and stride 1 or 2."""
    g = conv2d_geometry(conv.attrs, conv.inputs[0].type.shape, conv.inputs[1].type.shape)
    if g.groups == 1:
        return None
    if g.groups != g.c or g.o != g.c:
        return (
            f"groups={g.groups}, groups must = 1 or the channel count {g.c} with as many outputs "
            "(depthwise); other grouped convolutions are not supported"
        )
    if (g.kh, g.kw) not in DEPTHWISE_KERNELS:
        return f"depthwise kernel size=[{g.kh}, {g.kw}], kernel size must be [3, 3] or [5, 5]"
    if (g.sh, g.sw) not in DEPTHWISE_STRIDES:
        return f"depthwise strides=[{g.sh}, {g.sw}], strides must be [1, 1] or [2, 2]"
    return None


def _constant_weights(node: Node) -> str | None:
    """Weights (input 1) must be constant: acl packs them once when it loads the blob."""
    return constant_input(node, 1, "weights", "acl packs constant weights only")


def _conv_common(conv: Node) -> str | None:
    reason = _constant_weights(conv)
    if reason is not None:
        return reason
    if (conv.attrs["data_layout"], conv.attrs["kernel_layout"]) != ("NHWC", "OHWI"):
        return f"layout={conv.attrs['data_layout']}/{conv.attrs['kernel_layout']}, layout must = NHWC/OHWI"
    return _batch(conv.inputs[0].type.shape) or _grouping(conv)


def _bias_axis(match: Match, rank: int) -> str | None:
    if "bias" in match.bindings:
        axis = match.node("bias").attrs["axis"] % rank
        if axis != rank - 1:
            return f"bias_add axis={axis}, axis must = {rank - 1} (channels)"
    return None


def _requantize_reason(node: Node) -> str | None:
    """Requantize of an int32 accumulator: zero point 0 in (a relu before it is then a clamp)."""
    q = node.inputs[0].type.quant
    assert q is not None
    if np.any(np.asarray(q.zero_point) != 0):
        return f"requantize input zero point={np.asarray(q.zero_point).tolist()}, zero point must = 0"
    return None


def _quant_data(v: Value, what: str) -> str | None:
    if v.type.dtype not in QUANT:
        return f"{what} dtype='{v.type.dtype}', dtype must be uint8 or int8"
    q = v.type.quant
    if q is None or q.axis is not None:
        return f"{what} must be quantized per tensor"
    return None


def _quant_weights(v: Value) -> str | None:
    if v.type.dtype not in QUANT:
        return f"weight dtype='{v.type.dtype}', dtype must be uint8 or int8"
    return None


def _acl_rank(node: Node) -> str | None:
    """Every tensor of at most :data:`MAX_RANK` dimensions: what an ACL tensor holds."""
    rank = max(v.type.rank for v in (*node.inputs, *node.outputs))
    if rank > MAX_RANK:
        return (
            f"rank={rank}, rank must be <= {MAX_RANK}: Arm Compute Library's tensors have at most {MAX_RANK} dimensions"
        )
    return None


def _pool_reason(node: Node, dtypes: Sequence[str]) -> str | None:
    reason = _dtypes(node, dtypes) or _nhwc(node) or _batch(node.inputs[0].type.shape)
    if reason is None and "dilation" in node.attrs:
        dilation = list(node.attrs["dilation"])
        if dilation != [1, 1]:
            reason = f"dilation={dilation}, dilation must = [1, 1]"
    if reason is None and node.op == "nn.avg_pool2d":
        g = pool2d_geometry(node.attrs, node.inputs[0].type.shape)
        if node.attrs["count_include_pad"] and (g.eb or g.er):
            reason = "ceil_mode with count_include_pad is not supported: the windows past the edge count differently"
    return reason


# -- checks ---------------------------------------------------------------------------


# composites
def check_conv2d(match: Match) -> str | None:
    """float32 NHWC, any batch, constant OHWI weights, groups 1 or depthwise 3x3/5x5 with stride 1 or 2, bias on the channel axis."""
    conv = match.node("conv")
    return _conv_common(conv) or _bias_axis(match, 4) or _dtypes(conv, FLOAT)


def check_qnn_conv2d(match: Match) -> str | None:
    """as conv2d; uint8/int8 data quantized per tensor, uint8/int8 weights (per-channel allowed), requantized from a zero-point-0 accumulator."""
    conv = match.node("conv")
    return (
        _conv_common(conv)
        or _bias_axis(match, 4)
        or _quant_data(conv.inputs[0], "data")
        or _quant_weights(conv.inputs[1])
        or _requantize_reason(match.node("requantize"))
    )


def check_dense(match: Match) -> str | None:
    """float32 [M, K] data, constant [N, K] weights, bias on the last axis."""
    dense = match.node("dense")
    if dense.inputs[0].type.rank != 2:
        return f"dense data rank={dense.inputs[0].type.rank}, rank must = 2"
    return _constant_weights(dense) or _bias_axis(match, 2) or _dtypes(dense, FLOAT)


def check_qnn_dense(match: Match) -> str | None:
    """as dense; uint8/int8 data quantized per tensor, uint8/int8 weights, requantized from a zero-point-0 accumulator."""
    dense = match.node("dense")
    if dense.inputs[0].type.rank != 2:
        return f"dense data rank={dense.inputs[0].type.rank}, rank must = 2"
    return (
        _constant_weights(dense)
        or _bias_axis(match, 2)
        or _quant_data(dense.inputs[0], "data")
        or _quant_weights(dense.inputs[1])
        or _requantize_reason(match.node("requantize"))
    )


def check_avg_pool2d(match: Match) -> str | None:
    """a uint8/int8 average pool summed in int32 and cast back to the same dtype; no dilation."""
    src = match.node("cast_in").inputs[0].type.dtype
    out = match.node("cast_out").outputs[0].type.dtype
    if src not in QUANT or src != out:
        return f"cast from {src} back to {out}: the average pool must read and write one of uint8, int8"
    return _pool_reason(match.node("pool"), ("int32",))


def check_l2_pool2d(match: Match) -> str | None:
    """float32 sqrt(avg_pool(x^2)); no dilation."""
    return _pool_reason(match.node("pool"), FLOAT)


# single ops
def check_reshape(node: Node) -> str | None:
    """float32, uint8, int8 or int32; rank <= 6."""
    return _dtypes(node, (*FLOAT, *QUANT, "int32")) or _acl_rank(node)


def check_avg_pool_op(node: Node) -> str | None:
    """float32 (or int32, a QDQ model's average pool) average pools; no dilation; ceil mode not with count_include_pad."""
    # float32 as ACL; int32 too (the quantized average pool of a QDQ model: requantize to int32,
    # pool, requantize back), summed exactly and rounded half away from zero as the reference
    return _pool_reason(node, (*FLOAT, "int32"))


def _per_channel_constant(v: Value, out: Sequence[int]) -> bool:
    """A constant that varies along the last (channel, in NHWC) axis only: ``[1, 1, 1, C]``, ``[C]``."""
    shape = list(v.type.shape)
    return (
        v.const is not None and 1 <= len(shape) <= len(out) and shape[-1] == out[-1] and all(d == 1 for d in shape[:-1])
    )


def check_max_pool(node: Node) -> str | None:
    """float32, uint8 or int8 max pools; no dilation."""
    return _pool_reason(node, (*FLOAT, *QUANT))


def check_relu(node: Node) -> str | None:
    """float32 (a quantized ReLU is the clamp of a requantize); rank <= 6."""
    return _dtypes(node, FLOAT) or _acl_rank(node)


def check_float_binary(node: Node) -> str | None:
    """float32, equal shapes; ``add`` and ``multiply`` also by a per-channel constant (a scale or shift); rank <= 6."""
    a, b = (list(v.type.shape) for v in node.inputs)
    out = list(node.outputs[0].type.shape)
    if a != b:
        full = a == out or b == out
        if not (node.op in ("add", "multiply") and full and any(_per_channel_constant(v, out) for v in node.inputs)):
            return (
                f"{node.op} of shapes {a} and {b}: broadcasting is not supported, shapes must be equal "
                "(or, for add and multiply, one a per-channel constant)"
            )
    return _dtypes(node, FLOAT) or _acl_rank(node)


def check_qnn_add(node: Node) -> str | None:
    """uint8/int8 inputs of one shape (no broadcasting)."""
    a, b = (list(v.type.shape) for v in node.inputs)
    if a != b:
        return f"qnn.add of shapes {a} and {b}: broadcasting is not supported, shapes must be equal"
    return _dtypes(node, QUANT)


def check_concatenate(node: Node) -> str | None:
    """float32, uint8 or int8; quantized inputs share their parameters; rank <= 6, along one of the last 4 axes."""
    reason = _dtypes(node, (*FLOAT, *QUANT)) or _acl_rank(node)
    rank = node.outputs[0].type.rank
    if reason is None and rank > CONCAT_AXES:
        axis = int(node.attrs["axis"])
        axis = axis + rank if axis < 0 else axis
        if axis < rank - CONCAT_AXES:
            return (
                f"concatenate axis={axis} of rank-{rank} tensors, axis must be >= {rank - CONCAT_AXES}: Arm Compute "
                f"Library joins along its {CONCAT_AXES} innermost dimensions only (NEConcatenateLayer: Axis not supported)"
            )
    if reason is None and node.inputs[0].type.quant is not None:
        qs = {v.type.quant for v in (*node.inputs, *node.outputs)}
        if len(qs) != 1:
            return "inputs quantized differently: concatenate must not rescale (use qnn.concatenate)"
    return reason


def check_clip(node: Node) -> str | None:
    """float32 clip(0, a) with a > 0: ACL's bounded ReLU (ReLU6 is a = 6)."""
    if not _bounded_relu(node):
        lo, hi = node.attrs["a_min"], node.attrs["a_max"]
        return f"clip({lo}, {hi}): only clip(0, a) with a > 0 (bounded ReLU) is supported"
    return _dtypes(node, FLOAT) or _acl_rank(node)


def check_requantize(node: Node) -> str | None:
    """uint8, int8 or int32 to uint8, int8 or int32, per tensor or per channel."""
    x, y = node.inputs[0].type, node.outputs[0].type
    dtypes = (*QUANT, "int32")
    if x.dtype not in dtypes or y.dtype not in dtypes:
        return f"requantize from {x.dtype} to {y.dtype}: both must be uint8, int8 or int32"
    return None


def check_dequantize(node: Node) -> str | None:
    """uint8 or int8 quantized per tensor, to float32 (accel-sdk's dequantize, the definition); rank <= 6."""
    return _quant_data(node.inputs[0], "data") or _acl_rank(node)


def check_quantize(node: Node) -> str | None:
    """float32 to uint8 or int8 quantized per tensor (accel-sdk's Quantizer, the definition); rank <= 6."""
    return dtype_of(node.inputs, FLOAT) or _quant_data(node.outputs[0], "output") or _acl_rank(node)


def check_transpose(node: Node) -> str | None:
    """float32, uint8, int8 or int32, rank <= 4 (NEPermute). The partitioner asks it of the transposes
    at a region's inputs: acl runs those in its partition, not the host."""
    rank = node.inputs[0].type.rank
    if rank > PERMUTE_RANK:
        return f"rank={rank}, rank must be <= {PERMUTE_RANK}: NEPermute permutes at most {PERMUTE_RANK} dimensions"
    return _dtypes(node, (*FLOAT, *QUANT, "int32"))


def check_softmax(node: Node) -> str | None:
    """float32 along the last axis (channels, in NHWC), rank <= 4 (NESoftmaxLayer)."""
    x = node.inputs[0].type
    axis = int(node.attrs["axis"]) % max(x.rank, 1)
    if axis != x.rank - 1:
        return f"softmax axis={axis}, axis must = {x.rank - 1} (the last)"
    if x.rank > SOFTMAX_RANK:
        return f"rank={x.rank}, rank must be <= {SOFTMAX_RANK}: NESoftmaxLayer takes at most {SOFTMAX_RANK} dimensions"
    return _dtypes(node, FLOAT)


# -- the support table ------------------------------------------------------------------

#: Composites in priority order, ``(name, pattern builder, check)``: each becomes one ``call`` node
#: named ``acl.<name>``.
PATTERNS: list[tuple[str, Callable[[], Pattern], Callable[[Match], str | None]]] = [
    ("conv2d", conv2d_pattern, check_conv2d),
    ("qnn_conv2d", qnn_conv2d_pattern, check_qnn_conv2d),
    ("dense", dense_pattern, check_dense),
    ("qnn_dense", qnn_dense_pattern, check_qnn_dense),
    ("avg_pool2d", avg_pool2d_pattern, check_avg_pool2d),
    ("l2_pool2d", l2_pool2d_pattern, check_l2_pool2d),
]

#: Single ops: ``{op: check(node)}``.
OP_CHECKS: dict[str, Check] = {
    "reshape": check_reshape,
    "nn.max_pool2d": check_max_pool,
    "nn.avg_pool2d": check_avg_pool_op,
    "nn.global_max_pool2d": check_max_pool,
    "nn.global_avg_pool2d": check_avg_pool_op,
    "maximum": check_float_binary,
    "add": check_float_binary,
    "multiply": check_float_binary,
    "qnn.add": check_qnn_add,
    "concatenate": check_concatenate,
    "nn.relu": check_relu,
    "clip": check_clip,
    "qnn.requantize": check_requantize,
    "qnn.quantize": check_quantize,
    "qnn.dequantize": check_dequantize,
    "nn.softmax": check_softmax,
    "transpose": check_transpose,
}

__all__ = [
    "OP_CHECKS",
    "PATTERNS",
    "avg_pool2d_pattern",
    "conv2d_pattern",
    "dense_pattern",
    "l2_pool2d_pattern",
    "qnn_conv2d_pattern",
    "qnn_dense_pattern",
]
