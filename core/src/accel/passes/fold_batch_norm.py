"""Fold inference batch norms into the convolution or dense layer before them."""

from __future__ import annotations

import numpy as np

from accel.ir import CALL_OP, Graph, Node, Value
from accel.ops.common import FLOAT_DTYPES
from accel.ops.registry import get_op
from accel.passes._rewrite import Rewriter, evaluate
from accel.passes.dce import remove_dead_nodes


def fold_batch_norm(graph: Graph, *, in_place: bool = False, dce: bool = True) -> Graph:
    """``linear → [bias] → nn.batch_norm`` becomes ``linear' → nn.bias_add``.

    With ``s = gamma / sqrt(var + eps)``: the weight's output channels are
    scaled by ``s`` and the bias becomes ``(b − mean)·s + beta``. Applies when
    the batch norm's parameters are constants, it normalizes the layer's
    channel axis, the layer (an op with ``channel_axes``: ``nn.conv2d``,
    ``nn.conv2d_transpose`` with one group, ``nn.dense``) has a constant float
    weight whose output-channel axis is known, and every intermediate
    value (layer output, optional ``nn.bias_add`` / ``add`` of a constant) is
    read only by the next node of the chain. A batch norm of a constant folds
    to a constant; any other batch norm is left alone.

    Requires: a typed graph in topological order. Guarantees: the same results
    up to float rounding (parameters combined in float64), output names kept,
    nodes left without readers removed. With ``in_place`` the pass rewrites
    ``graph`` itself and returns it; otherwise the input graph is not modified.

    ``dce=False`` leaves nodes without readers in place (:func:`~accel.passes.simplify`
    sweeps once, at its end).
    """
    g = graph if in_place else graph.copy()
    if not any(node.op == "nn.batch_norm" for node in g.nodes):
        if dce:
            remove_dead_nodes(g)  # nothing to fold: what the sweep would leave
        return g
    rw = Rewriter(g)
    for node in g.nodes:
        if node.op == "nn.batch_norm" and _fold(node, rw):
            continue
        rw.keep(node)
    return rw.finish(dce=dce)


def _fold(bn: Node, rw: Rewriter) -> bool:
    inputs = [rw.value(v) for v in bn.inputs]
    params = [v.const for v in inputs[1:] if v.const is not None]
    if len(params) != len(inputs) - 1 or inputs[0].type.dtype not in FLOAT_DTYPES:
        return False
    if inputs[0].const is not None:
        rw.replace(bn.output, Value.constant(bn.output.name, evaluate(bn, inputs)[0]))
        return True
    x = bn.inputs[0]
    rank = x.type.rank
    axis = bn.attrs["axis"] % rank
    gamma, beta, mean, var = (p.astype(np.float64) for p in params)
    scale = gamma / np.sqrt(var + float(bn.attrs["epsilon"]))
    shift = beta - mean * scale

    bias: np.ndarray | None = None
    layer = x.producer
    if layer is None or not rw.sole_user(x, bn):
        return False
    if layer.op in ("nn.bias_add", "add"):
        found = _const_bias(layer, axis, rank, x.type.shape[axis])
        if found is None:
            return False
        y, bias = found
        if not rw.sole_user(y, layer):
            return False
        layer = y.producer
        if layer is None:
            return False
    channel_axes = None if layer.op == CALL_OP else get_op(layer.op).channel_axes
    if channel_axes is None:
        return False
    out_axis, o_axis = channel_axes(layer.attrs, rank)
    if out_axis != axis or o_axis is None:
        return False
    data, weight = (rw.value(v) for v in layer.inputs)
    if weight.const is None:
        return False
    dtype = weight.const.dtype
    shape = [1] * weight.const.ndim
    shape[o_axis] = -1
    # one rounding of the scale and one of the product: well within float32 tolerance,
    # and half the memory traffic of a float64 round trip on large weights
    new_w = weight.const * scale.astype(dtype).reshape(shape)
    new_b = (shift if bias is None else bias * scale + shift).astype(dtype)
    w = rw.const(new_w, f"{layer.name}.weight")
    b = rw.const(new_b, f"{layer.name}.bias")
    out = rw.emit(layer.op, [data, w], layer.attrs, name=layer.name).output
    out = rw.emit("nn.bias_add", [out, b], {"axis": axis}, name=f"{layer.name}.bias_add").output
    rw.replace(bn.output, out)
    return True


def _const_bias(node: Node, axis: int, rank: int, channels: int) -> tuple[Value, np.ndarray] | None:
    """(layer output, bias vector) of a ``nn.bias_add`` / ``add`` of a constant along ``axis``."""
    a, b = node.inputs
    if node.op == "nn.bias_add":
        if node.attrs["axis"] % rank != axis or b.const is None:
            return None
        return a, b.const.astype(np.float64)
    if b.const is None:
        a, b = b, a
    if b.const is None or a.type.shape != node.output.type.shape or b.type.rank > rank:
        return None
    c = b.const
    full = (1,) * (rank - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(full) if i != axis) or full[axis] not in (1, channels):
        return None
    return a, np.broadcast_to(c.astype(np.float64).reshape(-1), (channels,)).copy()
