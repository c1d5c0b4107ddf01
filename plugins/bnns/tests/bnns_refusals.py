"""Graphs bnns must refuse, each with the exact reason the partition report (``accel inspect --format json``) gives.

Every reason ``accel_bnns.support`` can give through a graph has a case here, in the order of
docs/backends/bnns.md's table; tests/test_support.py asks the support table directly for the one no graph reaches.
"""

from __future__ import annotations

import numpy as np
from accel_sdk.testing import Refusal

from accel.builder import GraphBuilder
from accel.ir import TensorType

RNG = np.random.default_rng(2027)


def weights(*shape: int, scale: float = 0.3) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _named(graph, op: str) -> str:
    return next(n.name for n in graph.nodes if n.op == op)


def operands() -> list[Refusal]:
    """What every op needs: float32, planar NCHW, constant weights and parameters."""
    out = []
    b = GraphBuilder(x=(1, 3, 8, 8), w=(4, 3, 3, 3))
    y = b.op("nn.conv2d", b.x["x"], b.x["w"])
    reason = "weight %w is not a constant: bnns needs constant weights (bind them before partitioning)"
    out.append(Refusal("conv weights not constant", b.done(y), reason))
    b = GraphBuilder(x=(2, 8), wt=(4, 8))
    y = b.op("nn.dense", b.x["x"], b.x["wt"])
    reason = "weight %wt is not a constant: bnns needs constant weights (bind them before partitioning)"
    out.append(Refusal("dense weights not constant", b.done(y), reason))

    b = GraphBuilder(x=(1, 8, 8, 3))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(4, 3, 3, 3)), data_layout="NHWC", kernel_layout="OHWI")
    out.append(Refusal("NHWC conv", b.done(y), "data_layout=NHWC, data_layout must = NCHW (bnns is planar NCHW)"))
    b = GraphBuilder(x=(1, 3, 8, 8))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(3, 3, 3, 4)), kernel_layout="HWIO")
    out.append(Refusal("HWIO conv weights", b.done(y), "kernel_layout=HWIO, kernel_layout must = OIHW"))
    planar = "layout=NHWC, layout must = NCHW (bnns is planar NCHW)"
    for op, attrs in (
        ("nn.max_pool2d", {"pool_size": (2, 2)}),
        ("nn.avg_pool2d", {"pool_size": (2, 2)}),
        ("nn.global_max_pool2d", {}),
        ("nn.global_avg_pool2d", {}),
    ):
        b = GraphBuilder(x=(1, 8, 8, 4))
        out.append(Refusal(f"NHWC {op}", b.done(b.op(op, b.x["x"], layout="NHWC", **attrs)), planar))

    b = GraphBuilder(x=TensorType((1, 3, 8, 8), "int8"))
    y = b.op("nn.conv2d", b.x["x"], b.const(np.ones((4, 3, 3, 3), np.int8)))
    out.append(Refusal("int8 conv", b.done(y), "dtype='int8', dtype must be float32"))
    b = GraphBuilder(a=TensorType((2, 3, 4), "float16"), c=TensorType((2, 4, 5), "float16"))
    y = b.op("nn.batch_matmul", b.x["a"], b.x["c"], transpose_b=False)
    out.append(Refusal("float16 batch_matmul", b.done(y), "dtype='float16', dtype must be float32"))
    b = GraphBuilder(x=TensorType((1, 3, 8, 8), "float64"))
    y = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2))
    out.append(Refusal("float64 max pool", b.done(y), "dtype='float64', dtype must be float32"))
    # a composite's nodes: the relu after a float16 conv is refused by bnns.conv2d_act
    b = GraphBuilder(x=TensorType((1, 3, 8, 8), "float16"))
    y = b.op("nn.relu", b.op("nn.conv2d", b.x["x"], b.const(np.ones((4, 3, 3, 3), np.float16))))
    out.append(Refusal("float16 conv relu", b.done(y), "bnns.conv2d_act: dtype='float16', dtype must be float32"))
    return out


def _conv_then(b: GraphBuilder, shape: tuple[int, ...]):
    return b.op("nn.conv2d", b.x["x"], b.const(weights(shape[1], shape[1], 1, 1)))


def conv_epilogues() -> list[Refusal]:
    """What a conv composite fuses: one bias value per output channel, a batch norm over the channels."""
    out = []
    per_channel = "the addend must be per-channel, shaped [4, 1, 1] or [1, 4, 1, 1]"
    # [1, 1, 1, C] and [C] have one element per channel but add them along the width (W = C here): fused as a
    # per-channel bias, such a graph's output was off by a quarter to a third of its largest value
    for x, shape in (((1, 4, 6, 6), (1, 4, 6, 6)), ((1, 4, 6, 4), (1, 1, 1, 4)), ((1, 4, 6, 4), (4,))):
        b = GraphBuilder(x=x)
        y = b.op("add", _conv_then(b, x), b.const(weights(*shape)))
        reason = f"bnns.conv2d_bias: add of a constant shaped {list(shape)}: {per_channel}"
        out.append(Refusal(f"conv add of a constant shaped {list(shape)}", b.done(y), reason))
    b = GraphBuilder(x=(1, 4, 6, 4))
    y = b.op("add", b.const(weights(1, 1, 1, 4)), _conv_then(b, (1, 4, 6, 4)))
    g = b.done(b.op("nn.relu", y))
    reason = f"bnns.conv2d_bias_act: add of a constant shaped [1, 1, 1, 4]: {per_channel}"
    out.append(Refusal("conv add of a [1, 1, 1, C] constant, relu", g, reason, node=_named(g, "add")))

    b = GraphBuilder(x=(1, 4, 4, 6))  # the conv's output height equals its channels
    y = b.op("nn.bias_add", _conv_then(b, (1, 4, 4, 6)), b.const(weights(4)), axis=2)
    reason = "bnns.conv2d_bias: bias_add axis=2, axis must = 1 (channels)"
    out.append(Refusal("conv bias added along the height", b.done(y), reason))

    b = GraphBuilder(x=(1, 4, 4, 6))
    params = (weights(4) + 1, weights(4), weights(4), np.abs(weights(4)) + 0.5)
    y = b.op("nn.batch_norm", _conv_then(b, (1, 4, 4, 6)), *(b.const(p) for p in params), axis=2)
    reason = "bnns.conv2d_batch_norm: batch_norm axis=2, axis must = 1 (channels)"
    out.append(Refusal("conv batch norm along the height", b.done(y), reason))
    return out


def dense_epilogues() -> list[Refusal]:
    """What a dense composite fuses: one bias value per output feature."""
    out = []
    b = GraphBuilder(x=(5, 5))  # as many rows as features
    y = b.op("nn.bias_add", b.op("nn.dense", b.x["x"], b.const(weights(5, 5))), b.const(weights(5)), axis=0)
    reason = "bnns.dense_bias: bias_add axis=0, axis must = 1 (the output features)"
    out.append(Refusal("dense bias added along the rows", b.done(y), reason))
    for shape in ((4, 6), (4, 1)):
        b = GraphBuilder(x=(4, 5))
        y = b.op("add", b.op("nn.dense", b.x["x"], b.const(weights(6, 5))), b.const(weights(*shape)))
        reason = (
            f"bnns.dense_bias: add of a constant shaped {list(shape)}: "
            "the addend must be one value per output feature, shaped [6]"
        )
        out.append(Refusal(f"dense add of a constant shaped {list(shape)}", b.done(y), reason))
    b = GraphBuilder(x=(4, 5))
    y = b.op("add", b.op("nn.dense", b.x["x"], b.const(weights(6, 5))), b.const(weights(4, 6)))
    g = b.done(b.op("nn.gelu", y))
    reason = (
        "bnns.dense_bias_gelu: add of a constant shaped [4, 6]: "
        "the addend must be one value per output feature, shaped [6]"
    )
    out.append(Refusal("dense add of a whole-tensor constant, gelu", g, reason, node=_named(g, "add")))
    b = GraphBuilder(x=(4, 6))
    y = b.op("nn.gelu", b.x["x"])
    reason = "nn.gelu is not supported by bnns on its own, only inside bnns.dense_bias_gelu"
    out.append(Refusal("gelu alone", b.done(y), reason))
    return out


def pools_and_norms() -> list[Refusal]:
    out = []
    b = GraphBuilder(x=(1, 4, 9, 9))
    y = b.op("nn.avg_pool2d", b.x["x"], pool_size=(2, 2), strides=(2, 2), ceil_mode=True, count_include_pad=True)
    reason = (
        "ceil_mode with count_include_pad: windows that run past the padding would divide by "
        "a count bnns does not use (padding included, the overhang not)"
    )
    out.append(Refusal("avg pool overhang counted", b.done(y), reason))

    b = GraphBuilder(x=(1, 4, 2, 3, 3))
    y = b.op("nn.instance_norm", b.x["x"], b.const(weights(4) + 1), b.const(weights(4)))
    reason = "rank 5 (shape [1, 4, 2, 3, 3]), instance_norm data must be of rank 3 or 4"
    out.append(Refusal("instance_norm of rank 5", b.done(y), reason))
    b = GraphBuilder(x=(1, 6, 4, 6))
    y = b.op("nn.instance_norm", b.x["x"], b.const(weights(6) + 1), b.const(weights(6)), axis=3)
    out.append(Refusal("instance_norm over the last axis", b.done(y), "axis=3, axis must = 1 (channels, planar NCHW)"))
    for name in ("gamma", "beta"):
        b = GraphBuilder(x=(1, 4, 5, 5), **{name: (4,)})
        given = {"gamma": b.const(weights(4) + 1), "beta": b.const(weights(4)), name: b.x[name]}
        y = b.op("nn.instance_norm", b.x["x"], given["gamma"], given["beta"])
        reason = f"{name} %{name} is not a constant: bnns needs constant instance_norm parameters"
        out.append(Refusal(f"instance_norm {name} not constant", b.done(y), reason))
    return out


def adds() -> list[Refusal]:
    """add: two tensors of one shape; a constant only as a layer's bias."""
    out = []
    b = GraphBuilder(x=(1, 4, 6, 6), y=(1, 4, 1, 1))
    reason = "add of shapes [1, 4, 6, 6] and [1, 4, 1, 1]: broadcasting is not supported, shapes must be equal"
    out.append(Refusal("add broadcasting", b.done(b.op("add", b.x["x"], b.x["y"])), reason))
    b = GraphBuilder(x=(1, 4, 6, 6), y=(1, 4, 1, 1))
    g = b.done(b.op("nn.relu", b.op("add", b.x["x"], b.x["y"])))
    reason = f"bnns.add_relu: {reason}"
    out.append(Refusal("add broadcasting, relu", g, reason, node=_named(g, "add")))
    b = GraphBuilder(x=(1, 4, 6, 6))
    reason = (
        "add of the constant %c: bnns adds two tensors; a constant is added only as a "
        "convolution's or dense layer's bias (bnns.conv2d_bias, bnns.dense_bias)"
    )
    out.append(Refusal("add of a constant", b.done(b.op("add", b.x["x"], b.const(weights(1, 4, 6, 6)))), reason))
    b = GraphBuilder(x=(1, 2, 1, 2, 1, 2, 2))
    reason = "add of rank 7: bnns takes tensors of rank 1 to 6"
    out.append(Refusal("add of rank 7", b.done(b.op("add", b.x["x"], b.op("abs", b.x["x"]))), reason, node=None))
    b = GraphBuilder(x=TensorType((1, 4, 6, 6), "float16"), y=TensorType((1, 4, 6, 6), "float16"))
    out.append(
        Refusal("float16 add", b.done(b.op("add", b.x["x"], b.x["y"])), "dtype='float16', dtype must be float32")
    )
    return out


def refusals() -> list[Refusal]:
    return [*operands(), *conv_epilogues(), *dense_epilogues(), *pools_and_norms(), *adds()]
