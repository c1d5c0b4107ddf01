"""Constant folding and a few safe algebraic simplifications."""

from __future__ import annotations

from accel.errors import AccelError
from accel.ir import CALL_OP, Graph, Node, Value
from accel.ops.registry import infer_node_types
from accel.passes._rewrite import Rewriter, evaluate, is_identity
from accel.passes.dce import remove_dead_nodes
from accel.passes.qdq_to_qnn import qdq_protected_nodes

#: Folding never creates a constant larger than this, unless it is no larger
#: than its largest constant input (a transposed or reshaped weight): so no
#: chain of folds (concatenations, say) can grow past both.
DEFAULT_MAX_BYTES = 16 << 20


def fold_constants(
    graph: Graph, *, max_bytes: int = DEFAULT_MAX_BYTES, in_place: bool = False, dce: bool = True
) -> Graph:
    """Evaluate nodes whose inputs are all constants; simplify trivial data movement.

    A node reading only constants is run once with its reference kernel and
    replaced by the result, unless the result is larger than ``max_bytes`` and
    than its largest input (folding must not blow the model up, e.g. a
    broadcast or a chain of concatenations). Dequantize/quantize nodes of constants that
    :func:`~accel.passes.qdq_to_qnn` would turn into qnn weights are kept, so
    the quantized weights survive folding run before it. Also:
    ``reshape(reshape(x))`` becomes one reshape, ``transpose(transpose(x))``
    one transpose (or nothing), and identity reshapes, transposes and casts
    disappear.

    Requires: a typed graph in topological order. Guarantees: the same results
    (folded values are exactly what the kernels compute at run time), output
    names kept, nodes left without readers removed. With ``in_place`` the pass
    rewrites ``graph`` itself and returns it; otherwise the input graph is not
    modified.

    ``dce=False`` leaves nodes without readers in place (:func:`~accel.passes.simplify`
    sweeps once, at its end).
    """
    g = graph if in_place else graph.copy()
    if not _anything_to_fold(g):
        if dce:
            remove_dead_nodes(g)  # nothing to fold or simplify: what the sweep would leave
        return g
    protected = qdq_protected_nodes(g)
    rw = Rewriter(g)
    for node in g.nodes:
        inputs = [rw.value(v) for v in node.inputs]
        if _foldable(node, inputs, protected, max_bytes):
            for out, data in zip(node.outputs, evaluate(node, inputs), strict=True):
                rw.replace(out, Value.constant(out.name, data, out.type.quant))
            continue
        if not _simplify(node, inputs, rw):
            rw.keep(node)
    return rw.finish(dce=dce)


_MOVES = ("reshape", "transpose", "cast")  # what _simplify rewrites


def _anything_to_fold(g: Graph) -> bool:
    """Whether a node moves data or reads only constants."""
    for node in g.nodes:
        if node.op in _MOVES:
            return True
        inputs = node.inputs
        if inputs and node.op != CALL_OP:
            for v in inputs:
                if v.const is None:
                    break
            else:
                return True
    return False


def _foldable(node: Node, inputs: list[Value], protected: set[int], max_bytes: int) -> bool:
    if node.op == CALL_OP or not inputs or id(node) in protected:
        return False
    if any(v.const is None for v in inputs):
        return False
    out_bytes = sum(v.type.nbytes for v in node.outputs)
    return out_bytes <= max_bytes or out_bytes <= max(v.type.nbytes for v in inputs)


def _simplify(node: Node, inputs: list[Value], rw: Rewriter) -> bool:
    """Rewrite ``node`` when it is trivial data movement; return whether it was handled."""
    if node.op not in _MOVES or len(inputs) != 1:
        return False
    out = node.output
    x = inputs[0]
    attrs = dict(node.attrs)
    if node.op == "reshape":
        src = x.producer
        if src is not None and src.op == "reshape":
            x = src.inputs[0]  # reshape(reshape(y, a), b) == reshape(y, b)
    elif node.op == "transpose":
        rank = x.type.rank
        perm = tuple(range(rank - 1, -1, -1)) if attrs["axes"] is None else tuple(a % rank for a in attrs["axes"])
        src = x.producer
        if src is not None and src.op == "transpose" and src.attrs["axes"] is not None:
            inner = tuple(a % rank for a in src.attrs["axes"])
            perm = tuple(inner[p] for p in perm)  # transpose(transpose(y, a), b) == transpose(y, a[b])
            x = src.inputs[0]
        if is_identity(perm):
            return _forward(rw, out, x)
        attrs["axes"] = perm
    if x.type == out.type and (node.op != "transpose"):
        return _forward(rw, out, x)
    if x is inputs[0]:
        return False
    try:
        _, types = infer_node_types(node.op, [x.type], attrs)
    except AccelError:
        return False
    if types != [out.type]:
        return False
    rw.remake(node, [x], attrs)
    return True


def _forward(rw: Rewriter, out: Value, x: Value) -> bool:
    """Let readers of ``out`` read ``x`` (same type); a graph output equal to a graph input keeps its node."""
    if x.type != out.type or (rw.is_output(out) and x.producer is None and x.const is None):
        return False
    rw.replace(out, x)
    return True
