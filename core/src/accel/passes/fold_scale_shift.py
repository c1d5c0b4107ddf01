"""Fold per-channel scales and shifts into the convolution or dense layer before them."""

from __future__ import annotations

import numpy as np

from accel.ir import CALL_OP, Graph, Node, Value
from accel.ops.registry import Affine, get_op
from accel.passes._rewrite import Rewriter
from accel.passes.dce import remove_dead_nodes

#: Folding rounds the weight once more than the unfolded graph does: within float32
#: rounding for float32 and float64; narrower floats and quantized tensors are left alone.
FOLDABLE_DTYPES = ("float32", "float64")

#: What the pass emits for the folded shift (a per-channel vector along the layer's channel axis).
_BIAS_OP = "nn.bias_add"


def fold_scale_shift(graph: Graph, *, in_place: bool = False, dce: bool = True) -> Graph:
    """``linear → (· s | + t)...`` becomes ``linear' → nn.bias_add``.

    A chain of per-channel scales and shifts after a linear layer folds into
    its weight and bias, as ONNX Runtime's Conv+Mul / Conv+Add fusions and TVM's
    FoldScaleAxis do: the layer is an op with ``channel_axes`` (``nn.conv2d``,
    ``nn.conv2d_transpose`` with one group, ``nn.dense``) and a constant
    weight whose output-channel axis is known; each step is an op with the
    ``affine`` trait (``multiply``, ``add``, ``nn.bias_add``) of a finite
    constant that is per output channel (shapes ``[C,1,1]``, ``[1,C,1,1]``,
    ``[C]`` for dense, a scalar: one value per channel or one for all). With
    the scales ``s`` and shifts ``t`` combined in float64 into one ``s`` and one
    ``t``, the weight's output channels are scaled by ``s`` and the bias is ``t``
    (the layer's own ``nn.bias_add`` is a shift of the chain, so ``b·s + t``).

    Left alone: a layer whose output (or any value of the chain but the last)
    has another reader or is a graph output; a scale or shift after anything
    else (a concatenation, a pooling, a graph input: there is no weight to
    fold into); a constant that would broadcast the data to a larger shape or
    is not finite; dtypes other than float32 and float64; every node of a
    graph with quantized tensors (its weights stay what its quantization was
    computed for). A lone ``nn.bias_add`` is already the folded form.

    Requires: a typed graph in topological order, constants folded (a scale
    computed from constants, such as ``Unsqueeze`` of an initializer, is a
    constant). Guarantees: the same results up to float rounding (relative
    1e-5 on float32 networks), the last folded value keeps its node and value
    names (the layer keeps its own), nodes left without readers removed. With
    ``in_place`` the pass rewrites ``graph`` itself and returns it; otherwise
    the input graph is not modified. ``dce=False`` leaves nodes without readers
    in place (:func:`~accel.passes.simplify` sweeps once, at its end).
    """
    g = graph if in_place else graph.copy()
    if not _has_candidates(g) or _is_quantized(g):
        if dce:
            remove_dead_nodes(g)  # nothing to fold: what the sweep would leave
        return g
    rw = Rewriter(g)
    absorbed: set[Node] = set()
    for node in g.nodes:
        if node in absorbed:
            continue  # folded into the layer before it: its output was replaced there
        if not _fold(node, rw, absorbed):
            rw.keep(node)
    if not absorbed:  # the node list stays the graph's own: simplify sees nothing changed
        if dce:
            remove_dead_nodes(g)
        return g
    # emitted nodes take the layer's place (after its inputs, before every reader of
    # the chain's end) and each replacement is made before any reader is kept
    return rw.finish(dce=dce, sort=False, resolve=False)


def _has_candidates(g: Graph) -> bool:
    """Whether an op with the ``affine`` trait reads the output of a linear layer (an op with
    ``channel_axes``): the start of every chain the pass folds. One sweep, that spares a graph
    with none (most models without batch norms or scale layers) the rewriter's work per node."""
    affine: dict[str, bool] = {}  # op -> whether it is affine (ops looked up once each)
    linear: dict[str, bool] = {}
    for node in g.nodes:
        op = node.op
        found = affine.get(op)
        if found is None:
            found = affine[op] = op != CALL_OP and get_op(op).affine is not None
        if not found:
            continue
        for v in node.inputs:
            layer = v.producer
            if layer is None:
                continue
            is_linear = linear.get(layer.op)
            if is_linear is None:
                is_linear = linear[layer.op] = layer.op != CALL_OP and get_op(layer.op).channel_axes is not None
            if is_linear:
                return True
    return False


def _is_quantized(g: Graph) -> bool:
    return any(v.type.quant is not None for v in g.inputs) or any(
        v.type.quant is not None for node in g.nodes for v in (*node.inputs, *node.outputs)
    )


def _fold(layer: Node, rw: Rewriter, absorbed: set[Node]) -> bool:
    if layer.op == CALL_OP or len(layer.inputs) != 2 or len(layer.outputs) != 1:
        return False
    channel_axes = get_op(layer.op).channel_axes
    out = layer.output
    if channel_axes is None or out.type.dtype not in FOLDABLE_DTYPES:
        return False
    axis, o_axis = channel_axes(layer.attrs, out.type.rank)
    data, weight = (rw.value(v) for v in layer.inputs)
    w = weight.const
    if o_axis is None or w is None or w.dtype.name != out.type.dtype or not np.all(np.isfinite(w)):
        return False

    channels = out.type.shape[axis]
    scale = np.ones(channels)
    shift = np.zeros(channels)
    scaled = False
    chain: list[Node] = []
    x = out
    while True:
        users = rw.users(x)
        if len(users) != 1 or rw.is_output(x):
            break
        step = _per_channel(users[0], x, axis, rw)
        if step is None:
            break
        kind, c = step
        if kind is Affine.SCALE:
            scale *= c
            shift *= c
            scaled = True
        else:
            shift += c
        chain.append(users[0])
        x = users[0].output
    if not chain or (not scaled and len(chain) == 1 and chain[0].op == _BIAS_OP):
        return False

    if scaled:
        shape = [1] * w.ndim
        shape[o_axis] = -1
        # one rounding of the combined scale and one of the product, as fold_batch_norm does
        new_w = rw.const(w * scale.astype(w.dtype).reshape(shape), f"{layer.name}.weight")
        y = rw.remake(layer, [data, new_w]).output
    else:
        y = rw.keep(layer).output
    b = rw.const(shift.astype(w.dtype), f"{layer.name}.bias")
    last = chain[-1]
    bias = rw.adopt_names(rw.emit(_BIAS_OP, [y, b], {"axis": axis}), last)
    rw.replace(last.output, bias.output)
    absorbed.update(chain)
    return True


def _per_channel(node: Node, x: Value, axis: int, rw: Rewriter) -> tuple[Affine, np.ndarray] | None:
    """(kind, per-channel float64 vector) when ``node`` scales or shifts ``x`` by a constant along ``axis``."""
    if node.op == CALL_OP or len(node.outputs) != 1:
        return None
    kind = get_op(node.op).affine
    t = x.type
    if kind is None or node.output.type != t:  # a larger result: the constant broadcasts the data
        return None
    a, b = node.inputs
    rank, channels = t.rank, t.shape[axis]
    if "axis" in node.attrs:  # a vector along its axis, the second operand
        if a is not x or node.attrs["axis"] % rank != axis:
            return None
        c = rw.value(b)
    else:  # numpy broadcasting, either operand
        if (a is x) == (b is x):
            return None
        c = rw.value(b if a is x else a)
        if c.type.rank > rank:
            return None
        full = (1,) * (rank - c.type.rank) + c.type.shape
        if any(d != 1 for i, d in enumerate(full) if i != axis) or full[axis] not in (1, channels):
            return None
    if c.const is None or c.type.quant is not None or not np.all(np.isfinite(c.const)):
        return None
    return kind, np.broadcast_to(c.const.astype(np.float64).reshape(-1), (channels,))
