"""What ncnn takes: the support table in ncnn's terms, with a reason for every refusal.

One row per op (:data:`OPS`) or composite (:data:`COMPOSITES`): the check the
partitioner calls (``None``: taken, else one line saying why not, as ``accel
inspect`` shows it) and the ncnn layer type the serializer writes for it
(``Convolution`` becomes ``ConvolutionDepthWise`` for a grouped convolution).
Ops ncnn is never handed alone, the quantized ones among them, are in
:data:`DECLINES` with the reason.

Every tensor is float32 in the model's NCHW layout, batch 1: ncnn's ``Mat``
holds one image, [1, C, H, W] as (w=W, h=H, c=C); :func:`mat_shape` is the map,
and :func:`mat_axis` maps an axis of the tensor to ncnn's axis of that Mat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from accel_sdk.reasons import Reason, constant_input, dtype_of, first, must_equal

from accel.ir import Node, Value
from accel.ops.geometry import conv2d_geometry, pool2d_geometry
from accel.pattern import Match, Pattern, is_constant, is_op, wildcard

FLOAT = ("float32",)


@dataclass(frozen=True)
class Support:
    """One row: the check accel calls, and the ncnn layer type the serializer writes."""

    layer: str
    check: Callable[[Any], Reason]
    #: A float32 elementwise op of one input: tests build its graph from the row alone.
    unary: bool = False


def mat_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """The ncnn Mat of a tensor, as (w,), (w, h) or (w, h, c): [1, C, H, W] and [C, H, W] -> (W, H, C),
    [M, K] -> (K, M), [N] -> (N,). Only shapes :func:`mat_reason` accepts."""
    s = list(shape)
    if len(s) == 4:
        s = s[1:]
    return tuple(reversed(s))


def mat_axis(axis: int, rank: int) -> int:
    """ncnn's axis (0 is the outermost of the Mat's dims) of a normalized tensor axis (not the batch)."""
    return axis - 1 if rank == 4 else axis


def mat_reason(v: Value) -> Reason:
    """Why the tensor is not one ncnn Mat: rank 1 to 4, a rank-4 tensor holding one image."""
    shape = list(v.type.shape)
    if not 1 <= len(shape) <= 4:
        return f"rank={len(shape)}, rank must be 1 to 4 (an ncnn Mat)"
    if any(d <= 0 for d in shape):
        return f"shape {shape}: empty tensors are not supported"
    if len(shape) == 4:
        return must_equal("batch", shape[0], 1)
    return None


def float32(node: Node) -> Reason:
    """``dtype='float64', dtype must be float32`` for the first input or output that is not float32."""
    return dtype_of(node, FLOAT)


def activations(node: Node, constants: Sequence[int] = ()) -> Reason:
    """float32 data, each input and output one ncnn Mat; inputs other than ``constants`` computed (ncnn's
    blobs are layer outputs: a constant is data of the layer that reads it)."""
    reason = float32(node)
    for i, v in enumerate(node.inputs):
        if i in constants:
            continue
        if reason is None and v.const is not None:
            reason = f"input {i} of {node.op} is a constant; ncnn takes data here only from layers"
        reason = reason or mat_reason(v)
    return reason or first(mat_reason(v) for v in node.outputs)


def check_unary(node: Node) -> Reason:
    """A computed float32 input that is one ncnn Mat (rank 1 to 4, batch 1)."""
    return activations(node)


def unary(layer: str) -> Support:
    """A float32 elementwise op of one input: ncnn's ``layer`` computes it."""
    return Support(layer, check_unary, unary=True)


def axis_of(node: Node, rank: int) -> Reason:
    """The op's axis must not be the batch axis of a rank-4 tensor."""
    axis = node.attrs["axis"] % rank
    if rank == 4 and axis == 0:
        return "axis=0 is the batch axis; ncnn's Mat holds one image"
    return None


# -- composites -----------------------------------------------------------------------


def _activation(x: Pattern) -> Pattern:
    return is_op("nn.relu")(x).named("relu") | is_op("clip")(x).named("clip")


def conv2d_pattern() -> Pattern:
    """``nn.conv2d(x, const) → nn.bias_add(const)? → (nn.relu | clip)?``: ncnn's Convolution (or
    ConvolutionDepthWise) with its bias and fused activation; labels ``conv``, ``bias``, ``relu``, ``clip``."""
    conv = is_op("nn.conv2d")(wildcard(), wildcard()).has_dtype(*FLOAT).named("conv")
    bias = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()).named("bias"))
    return bias.optional(_activation)


def check_conv2d(match: Match) -> Reason:
    """Constant OIHW weights; float32 NCHW data of one image; the bias along the channels (any groups)."""
    conv = match.node("conv")
    g = conv2d_geometry(conv.attrs, conv.inputs[0].type.shape, conv.inputs[1].type.shape)
    bias_axis = match.node("bias").attrs["axis"] % 4 if "bias" in match.bindings else 1
    return (
        constant_input(conv, 1, "weights", "ncnn reads constant weights from its .bin when it loads")
        or (None if g.nchw else "the data layout must be NCHW (ncnn's Mat)")
        or must_equal("kernel_layout", g.kernel_layout, "OIHW")
        or activations(conv, constants=(1,))
        or must_equal("bias_add axis", bias_axis, 1)
    )


def dense_pattern() -> Pattern:
    """``nn.dense(x, const) → nn.bias_add(const)? → nn.relu?``: ncnn's InnerProduct; labels ``dense``,
    ``bias``, ``relu``."""
    dense = is_op("nn.dense")(wildcard(), wildcard()).has_dtype(*FLOAT).named("dense")
    bias = dense.optional(lambda x: is_op("nn.bias_add")(x, is_constant()).named("bias"))
    return bias.optional(lambda x: is_op("nn.relu")(x).named("relu"))


def check_dense(match: Match) -> Reason:
    """Constant [N, K] weights; float32 [M, K] data; the bias along the columns."""
    dense = match.node("dense")
    bias_axis = match.node("bias").attrs["axis"] % 2 if "bias" in match.bindings else 1
    return (
        constant_input(dense, 1, "weights", "ncnn reads constant weights from its .bin when it loads")
        or must_equal("data rank", dense.inputs[0].type.rank, 2)
        or activations(dense, constants=(1,))
        or must_equal("bias_add axis", bias_axis, 1)
    )


# -- single ops -----------------------------------------------------------------------


def check_add(node: Node) -> Reason:
    """Two computed float32 inputs of one shape (no broadcasting), each one ncnn Mat."""
    a, b = (list(v.type.shape) for v in node.inputs)
    if a != b:
        return f"add of shapes {a} and {b}: broadcasting is not supported, shapes must be equal"
    return activations(node)


def check_clip(node: Node) -> Reason:
    """A computed float32 input, one ncnn Mat (rank 1 to 4, batch 1)."""
    return activations(node)


def check_pool(node: Node) -> Reason:
    """NCHW float32, batch 1; no dilation; count_include_pad not with ceil_mode."""
    reason = (
        must_equal("layout", node.attrs.get("layout", "NCHW"), "NCHW")
        or must_equal("rank", node.inputs[0].type.rank, 4)
        or activations(node)
    )
    if reason is not None or node.op.startswith("nn.global_"):
        return reason
    g = pool2d_geometry(node.attrs, node.inputs[0].type.shape)
    reason = must_equal("dilation", [g.dh, g.dw], [1, 1])
    if reason is None and node.attrs.get("count_include_pad") and (g.eb or g.er):
        # ncnn divides every window by its full area, the ceil_mode windows past the edge too; the reference not
        reason = "count_include_pad with ceil_mode is not supported: the last windows would count differently"
    return reason


def check_softmax(node: Node) -> Reason:
    """float32, one ncnn Mat; any axis but the batch."""
    return activations(node) or axis_of(node, node.inputs[0].type.rank)


def check_concat(node: Node) -> Reason:
    """Computed float32 inputs, each one ncnn Mat; any axis but the batch."""
    return activations(node) or axis_of(node, node.inputs[0].type.rank)


def check_reshape(node: Node) -> Reason:
    """float32; input and output each one ncnn Mat (rank 1 to 4, batch 1)."""
    return activations(node)


def check_lrn(node: Node) -> Reason:
    """Across the channels (axis 1) of float32 NCHW data, batch 1; an odd window."""
    size = int(node.attrs["size"])
    if size % 2 == 0:
        return f"size={size}: ncnn's window of an even size starts one channel before the reference's"
    return (
        must_equal("rank", node.inputs[0].type.rank, 4)
        or activations(node)
        or must_equal("axis", node.attrs["axis"] % 4, 1)
    )


def check_batch_norm(node: Node) -> Reason:
    """Constant gamma, beta, mean and var along the channels (axis 1) of float32 NCHW data, batch 1."""
    names = ("gamma", "beta", "mean", "var")
    return (
        must_equal("rank", node.inputs[0].type.rank, 4)
        or first(constant_input(node, i + 1, name, "ncnn reads them from its .bin") for i, name in enumerate(names))
        or activations(node, constants=(1, 2, 3, 4))
        or must_equal("axis", node.attrs["axis"] % 4, 1)
    )


#: Single ops: op -> (ncnn layer, check).
OPS: dict[str, Support] = {
    "nn.relu": unary("ReLU"),
    "sigmoid": unary("Sigmoid"),
    "clip": Support("Clip", check_clip),
    "add": Support("BinaryOp", check_add),
    "nn.max_pool2d": Support("Pooling", check_pool),
    "nn.avg_pool2d": Support("Pooling", check_pool),
    "nn.global_avg_pool2d": Support("Pooling", check_pool),
    "nn.global_max_pool2d": Support("Pooling", check_pool),
    "nn.lrn": Support("LRN", check_lrn),
    "nn.softmax": Support("Softmax", check_softmax),
    "concatenate": Support("Concat", check_concat),
    "reshape": Support("Reshape", check_reshape),
    "nn.batch_norm": Support("BatchNorm", check_batch_norm),
}

#: Composites, in priority order: name (the call is ``ncnn.<name>``) -> (pattern, row).
COMPOSITES: dict[str, tuple[Callable[[], Pattern], Support]] = {
    "conv2d": (conv2d_pattern, Support("Convolution", check_conv2d)),
    "dense": (dense_pattern, Support("InnerProduct", check_dense)),
}


def quantized(node: Node) -> Reason:
    """Why a quantized op stays on the host (ncnn's int8 is built out of the library)."""
    return "quantized graphs are not supported: this backend runs ncnn in float32 only (int8 is built out)"


#: Ops never taken, with the check that says why (``accel inspect`` shows it).
DECLINES: dict[str, Callable[[Node], Reason]] = {
    op: quantized
    for op in ("qnn.add", "qnn.concatenate", "qnn.conv2d", "qnn.conv2d_transpose", "qnn.dense", "qnn.dequantize",
               "qnn.mul", "qnn.quantize", "qnn.requantize")
}  # fmt: skip

#: The table as accel's Backend contract takes it.
PATTERNS = [(name, pattern, row.check) for name, (pattern, row) in COMPOSITES.items()]
OP_CHECKS = {op: row.check for op, row in OPS.items()}


def layer_of(node: Node) -> str:
    """The ncnn layer type of ``node`` (an op of :data:`OPS` or a ``ncnn.`` composite call)."""
    composite = node.attrs.get("composite") if node.op == "call" else None
    if composite is not None:
        return COMPOSITES[str(composite).partition(".")[2]][1].layer
    return OPS[node.op].layer


def layer_table() -> str:
    """The table as README.md shows it (markdown): each op or composite and its ncnn layer."""
    rows = [f"| `ncnn.{name}` (composite) | {row.layer} |" for name, (_, row) in COMPOSITES.items()]
    rows += [f"| `{op}` | {row.layer} |" for op, row in OPS.items()]
    return "\n".join(["| accel op | ncnn layer |", "|---|---|", *rows])


__all__ = [
    "COMPOSITES",
    "DECLINES",
    "FLOAT",
    "OPS",
    "OP_CHECKS",
    "PATTERNS",
    "Support",
    "conv2d_pattern",
    "dense_pattern",
    "layer_of",
    "layer_table",
    "mat_axis",
    "mat_shape",
    "unary",
]
