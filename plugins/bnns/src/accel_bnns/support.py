"""What the bnns backend takes: its pattern table and op checks, each refusal with its reason.

BNNS's operator contract: float32 only, planar NCHW activations (OIHW weights) at
the partition boundary, and weights and biases that are constants (bound before
partitioning). Composites, in priority order (the table order):

============================  ==========================================================
``bnns.conv2d_bias_act``      ``nn.conv2d → bias → nn.relu | sigmoid | clip``
``bnns.conv2d_act``           ``nn.conv2d → nn.relu | sigmoid | clip``
``bnns.conv2d_bias``          ``nn.conv2d → bias``
``bnns.conv2d_batch_norm``    ``nn.conv2d → nn.batch_norm`` (where the core did not fold it)
``bnns.dense_bias_gelu``      ``nn.dense → bias → GELU`` (``nn.gelu``, or the tanh chain)
``bnns.dense_bias``           ``nn.dense → bias``
``bnns.add_relu``             ``add → nn.relu`` (two tensors of one shape: a residual join)
============================  ==========================================================

A conv *bias* is ``nn.bias_add(axis=1)`` or an ``add`` of a constant shaped
``(C, 1, 1)`` or ``(1, C, 1, 1)``; a dense bias is ``nn.bias_add`` on the last
axis or an ``add`` of a constant shaped ``(N,)`` (or with leading 1s). GELU is
``nn.gelu`` (either approximation) or the tanh approximation written out the
way exporters write it, ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`` with
``x³`` as ``power(x, 3)`` or ``x·x·x`` and the products in any order.

Single ops: ``nn.conv2d`` (any groups), ``nn.dense`` (constant 2-D weights),
``nn.batch_matmul``, ``nn.max_pool2d``, ``nn.avg_pool2d``,
``nn.global_max_pool2d``, ``nn.global_avg_pool2d``, ``nn.instance_norm``
(constant gamma and beta, channel axis 1) and ``add`` of two tensors of one shape
(BNNS's arithmetic layer; no broadcasting, and a constant is added only as a
layer's bias).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from accel_sdk.reasons import dtype_of, first, must_equal

from accel.ir import Node, Value
from accel.ops.geometry import pool2d_geometry
from accel.pattern import Match, Pattern, is_constant, is_op, wildcard

#: √(2/π), the tanh approximation's inner factor.
GELU_TANH_SCALE = math.sqrt(2.0 / math.pi)
GELU_TANH_CUBE = 0.044715
#: How far a constant of the written-out chain may be from its exact value (exporters round √(2/π)).
_CHAIN_RTOL = 1e-4

#: Activations BNNS fuses into a layer (``clip`` is its clamp activation: ReLU6 is clip(0, 6)).
ACTIVATIONS = ("nn.relu", "sigmoid", "clip")


# -- patterns ------------------------------------------------------------------------------------
def _scalar(value: float) -> Pattern:
    """A one-element float constant equal to ``value`` (within what exporters round to)."""

    def close(v: Value) -> bool:
        c = v.const
        return c is not None and c.size == 1 and math.isclose(float(c.reshape(())), value, rel_tol=_CHAIN_RTOL)

    return is_constant().where(close)


def _commutative(op: str, a: Pattern, b: Pattern) -> Pattern:
    return is_op(op)(a, b) | is_op(op)(b, a)


def _bias(x: Pattern) -> Pattern:
    """``x + constant``: ``nn.bias_add`` or ``add`` (either operand order); the check says which constants fit."""
    const = is_constant()
    return (is_op("nn.bias_add")(x, const) | _commutative("add", x, const)).named("bias")


def _conv() -> Pattern:
    # weights as a wildcard: a non-constant weight reaches the check, which says why it is refused
    return is_op("nn.conv2d")(wildcard(), wildcard()).named("conv")


def _dense() -> Pattern:
    return is_op("nn.dense")(wildcard(), wildcard()).named("dense")


def _act(x: Pattern) -> Pattern:
    return is_op(*ACTIVATIONS)(x).named("act")


def conv2d_bias_act_pattern() -> Pattern:
    return _act(_bias(_conv()))


def conv2d_act_pattern() -> Pattern:
    return _act(_conv())


def conv2d_bias_pattern() -> Pattern:
    return _bias(_conv())


def conv2d_batch_norm_pattern() -> Pattern:
    return is_op("nn.batch_norm")(_conv(), is_constant(), is_constant(), is_constant(), is_constant()).named("bn")


def gelu_tanh_chain(x: Pattern) -> Pattern:
    """``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`` over ``x`` as exporters write it out.

    ``x³`` is ``power(x, 3)`` or ``(x·x)·x``; each product and sum takes its
    operands in either order; the outer products are ``(0.5·x)·(1 + t)``,
    ``(x·(1 + t))·0.5`` or ``x·(0.5·(1 + t))``. Labels: ``tanh`` (the tanh node)
    and ``gelu`` (the last product).
    """
    cube = is_op("power")(x, _scalar(3.0)) | _commutative("multiply", _commutative("multiply", x, x), x)
    inner = _commutative("add", x, _commutative("multiply", cube, _scalar(GELU_TANH_CUBE)))
    t = is_op("tanh")(_commutative("multiply", inner, _scalar(GELU_TANH_SCALE))).named("tanh")
    one_plus = _commutative("add", t, _scalar(1.0))
    half = _scalar(0.5)
    out = (
        _commutative("multiply", _commutative("multiply", x, half), one_plus)
        | _commutative("multiply", _commutative("multiply", x, one_plus), half)
        | _commutative("multiply", x, _commutative("multiply", half, one_plus))
    )
    return out.named("gelu")


def dense_bias_gelu_pattern() -> Pattern:
    x = _bias(_dense())
    return is_op("nn.gelu")(x).named("gelu") | gelu_tanh_chain(x)


def dense_bias_pattern() -> Pattern:
    return _bias(_dense())


def add_relu_pattern() -> Pattern:
    return is_op("nn.relu")(is_op("add")(wildcard(), wildcard()).named("add")).named("act")


# -- checks --------------------------------------------------------------------------------------
def float32_only(node: Node) -> str | None:
    """``None`` when every input and output of ``node`` is float32, else the reason."""
    return dtype_of(node, ("float32",))


def _planar(what: str, layout: str) -> str | None:
    """``layout=NHWC, layout must = NCHW (bnns is planar NCHW)`` unless ``layout`` is NCHW."""
    reason = must_equal(what, layout, "NCHW")
    return None if reason is None else f"{reason} (bnns is planar NCHW)"


def _constant_weight(node: Node, index: int, what: str) -> str | None:
    v = node.inputs[index]
    if v.const is None:
        return f"{what} %{v.name} is not a constant: bnns needs constant {what}s (bind them before partitioning)"
    return None


def check_conv2d(node: Node) -> str | None:
    """An ``nn.conv2d``: float32, NCHW/OIHW, constant weights; any groups, strides, dilation and padding."""
    a = node.attrs
    return first(
        (
            _planar("data_layout", a["data_layout"]),
            must_equal("kernel_layout", a["kernel_layout"], "OIHW"),
            float32_only(node),
            _constant_weight(node, 1, "weight"),
        )
    )


def check_dense(node: Node) -> str | None:
    """An ``nn.dense``: float32, constant 2-D ``[N, K]`` weights."""
    w = node.inputs[1]
    if w.type.rank != 2:
        return f"weight of rank {w.type.rank} (shape {list(w.type.shape)}), dense weights must be 2-D [N, K]"
    return first((float32_only(node), _constant_weight(node, 1, "weight")))


def _conv_bias(match: Match) -> str | None:
    """The bias of a conv composite must be one value per output channel."""
    bias = match.node("bias")
    channels = match.node("conv").outputs[0].type.shape[1]
    if bias.op == "nn.bias_add":
        if bias.attrs["axis"] % 4 != 1:
            return f"bias_add axis={bias.attrs['axis']}, axis must = 1 (channels)"
        return None
    addend = next(v for v in bias.inputs if v.const is not None)
    shape = tuple(addend.type.shape)
    if shape not in ((channels, 1, 1), (1, channels, 1, 1)):
        return (
            f"add of a constant shaped {list(shape)}: the addend must be per-channel, "
            f"shaped [{channels}, 1, 1] or [1, {channels}, 1, 1]"
        )
    return None


def _dense_bias(match: Match) -> str | None:
    bias = match.node("bias")
    dense = match.node("dense")
    n = dense.outputs[0].type.shape[-1]
    rank = dense.outputs[0].type.rank
    if bias.op == "nn.bias_add":
        if bias.attrs["axis"] % rank != rank - 1:
            return f"bias_add axis={bias.attrs['axis']}, axis must = {rank - 1} (the output features)"
        return None
    addend = next(v for v in bias.inputs if v.const is not None)
    shape = tuple(addend.type.shape)
    if addend.type.rank > rank or shape[-1:] != (n,) or any(d != 1 for d in shape[:-1]):
        return f"add of a constant shaped {list(shape)}: the addend must be one value per output feature, shaped [{n}]"
    return None


def _all_float32(match: Match) -> str | None:
    return first(float32_only(n) for n in match.nodes)


def check_conv2d_bias_act(match: Match) -> str | None:
    return first((check_conv2d(match.node("conv")), _conv_bias(match), _all_float32(match)))


def check_conv2d_act(match: Match) -> str | None:
    return first((check_conv2d(match.node("conv")), _all_float32(match)))


def check_conv2d_bias(match: Match) -> str | None:
    return first((check_conv2d(match.node("conv")), _conv_bias(match), _all_float32(match)))


def check_conv2d_batch_norm(match: Match) -> str | None:
    bn = match.node("bn")
    if bn.attrs["axis"] % 4 != 1:
        return f"batch_norm axis={bn.attrs['axis']}, axis must = 1 (channels)"
    return first((check_conv2d(match.node("conv")), _all_float32(match)))


def check_dense_bias_gelu(match: Match) -> str | None:
    return first((check_dense(match.node("dense")), _dense_bias(match), _all_float32(match)))


def check_dense_bias(match: Match) -> str | None:
    return first((check_dense(match.node("dense")), _dense_bias(match), _all_float32(match)))


#: The most dimensions a bnns tensor has (its runtime's formats).
MAX_RANK = 6


def check_add(node: Node) -> str | None:
    """``add`` of two tensors: float32, one shape (BNNS's arithmetic layer adds elementwise), rank 1 to 6."""
    reason = float32_only(node)
    if reason is not None:
        return reason
    a, b = node.inputs
    for v in (a, b):
        if v.const is not None:
            return (
                f"add of the constant %{v.name}: bnns adds two tensors; a constant is added only as a "
                "convolution's or dense layer's bias (bnns.conv2d_bias, bnns.dense_bias)"
            )
    if a.type.shape != b.type.shape:
        return (
            f"add of shapes {list(a.type.shape)} and {list(b.type.shape)}: broadcasting is not supported, "
            "shapes must be equal"
        )
    if not 1 <= a.type.rank <= MAX_RANK:
        return f"add of rank {a.type.rank}: bnns takes tensors of rank 1 to {MAX_RANK}"
    return None


def check_add_relu(match: Match) -> str | None:
    return first((check_add(match.node("add")), _all_float32(match)))


def check_batch_matmul(node: Node) -> str | None:
    return float32_only(node)


def _nchw(node: Node) -> str | None:
    return _planar("layout", node.attrs["layout"])


def check_max_pool2d(node: Node) -> str | None:
    return first((_nchw(node), float32_only(node)))


def check_avg_pool2d(node: Node) -> str | None:
    reason = first((_nchw(node), float32_only(node)))
    if reason is not None:
        return reason
    g = pool2d_geometry(node.attrs, node.inputs[0].type.shape)
    if node.attrs["count_include_pad"] and (g.eb or g.er):
        return (
            "ceil_mode with count_include_pad: windows that run past the padding would divide by "
            "a count bnns does not use (padding included, the overhang not)"
        )
    return None


def check_global_pool(node: Node) -> str | None:
    return first((_nchw(node), float32_only(node)))


def check_instance_norm(node: Node) -> str | None:
    """``nn.instance_norm``: float32, rank 3 or 4, channels on axis 1, constant gamma and beta."""
    x = node.inputs[0]
    if x.type.rank not in (3, 4):
        return f"rank {x.type.rank} (shape {list(x.type.shape)}), instance_norm data must be of rank 3 or 4"
    axis = node.attrs["axis"] % x.type.rank
    if axis != 1:
        return f"axis={node.attrs['axis']}, axis must = 1 (channels, planar NCHW)"
    for i, name in ((1, "gamma"), (2, "beta")):
        v = node.inputs[i]
        if v.const is None:
            return f"{name} %{v.name} is not a constant: bnns needs constant instance_norm parameters"
    return float32_only(node)


PATTERNS: list[tuple[str, Callable[[], Pattern], Callable[[Match], str | None]]] = [
    ("conv2d_bias_act", conv2d_bias_act_pattern, check_conv2d_bias_act),
    ("conv2d_act", conv2d_act_pattern, check_conv2d_act),
    ("conv2d_bias", conv2d_bias_pattern, check_conv2d_bias),
    ("conv2d_batch_norm", conv2d_batch_norm_pattern, check_conv2d_batch_norm),
    ("dense_bias_gelu", dense_bias_gelu_pattern, check_dense_bias_gelu),
    ("dense_bias", dense_bias_pattern, check_dense_bias),
    ("add_relu", add_relu_pattern, check_add_relu),
]

OP_CHECKS: dict[str, Callable[[Node], str | None]] = {
    "nn.conv2d": check_conv2d,
    "nn.dense": check_dense,
    "nn.batch_matmul": check_batch_matmul,
    "nn.max_pool2d": check_max_pool2d,
    "nn.avg_pool2d": check_avg_pool2d,
    "nn.global_max_pool2d": check_global_pool,
    "nn.global_avg_pool2d": check_global_pool,
    "nn.instance_norm": check_instance_norm,
    "add": check_add,
}


def constant_of(values: Iterable[Value]) -> Value:
    """The constant among ``values`` (a bias op's addend)."""
    return next(v for v in values if v.const is not None)


def as_float32(array: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(array, dtype=np.float32))


__all__ = ["OP_CHECKS", "PATTERNS", "float32_only", "gelu_tanh_chain"]
