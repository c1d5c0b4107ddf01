"""Graph passes: pure ``Graph -> Graph`` functions.

Each pass copies its input (``graph.copy()``), never mutates it, and returns a
graph that passes :meth:`~accel.ir.Graph.lint`; each docstring says what the
pass requires and what it guarantees. With ``in_place=True`` a pass rewrites
the graph it is given instead, for a caller that owns it: :func:`simplify`, the
standard pipeline :func:`accel.import_onnx` runs, copies its input once and
runs every pass on that copy.
"""

from __future__ import annotations

from accel.ir import Graph, collector_paused
from accel.passes.dce import eliminate_dead_code
from accel.passes.fold_batch_norm import fold_batch_norm
from accel.passes.fold_constants import DEFAULT_MAX_BYTES, fold_constants
from accel.passes.fold_scale_shift import fold_scale_shift
from accel.passes.infer_types import infer_types
from accel.passes.layout import convert_layout
from accel.passes.qdq_to_qnn import qdq_protected_nodes, qdq_to_qnn


def simplify(graph: Graph, *, in_place: bool = False) -> Graph:
    """The default pipeline: types, QDQ → qnn, folding, batch-norm and scale folding, dead code.

    ``infer_types → qdq_to_qnn → fold_constants → fold_batch_norm →
    fold_constants → fold_scale_shift → eliminate_dead_code``, then ``lint``
    (the batch-norm folding and the folding after it only when the graph has
    batch norms: one folding sweep leaves nothing to fold). ``qdq_to_qnn`` runs
    before folding so that quantized weights stay quantized; the dequantizes of
    constants it leaves (a float head's weights) fold to float constants.
    ``fold_scale_shift`` comes after every constant is folded (a scale computed
    from initializers is a constant by then) and after the batch norms, whose
    folding leaves the ``nn.bias_add`` a scale or shift after it extends; it
    computes the folded weights itself, so nothing is left to fold after it.

    The input graph is copied once (by ``infer_types``) and every pass rewrites
    that copy. With ``in_place`` the passes rewrite ``graph`` itself, which must
    be typed and valid already: every output type what its op's rule gives, as
    :func:`~accel.frontend.onnx.import_model` returns it, linted (``infer_types``
    is then skipped, and so is the final lint when no pass changed anything;
    :func:`accel.import_onnx` does this). Each pass infers the types of
    the nodes it creates or whose inputs it retypes, so the result's final lint
    does not run every type rule again.
    """
    with collector_paused():
        if in_place:
            g = graph
        else:
            g = infer_types(graph)
        # a pass that changes the graph gives it a new node (or output) list: with both
        # lists unchanged, an in-place graph is the valid one it was
        nodes, outputs = g.nodes, g.outputs
        batch_norms = any(node.op == "nn.batch_norm" for node in g.nodes)
        g = qdq_to_qnn(g, in_place=True, dce=False)
        g = fold_constants(g, in_place=True, dce=False)
        if batch_norms:  # (the passes before make none): what folding them leaves folds again
            g = fold_batch_norm(g, in_place=True, dce=False)
            g = fold_constants(g, in_place=True, dce=False)
        g = fold_scale_shift(g, in_place=True, dce=False)
        g = eliminate_dead_code(g, in_place=True)  # one sweep for all of them
        if not (in_place and g is graph and g.nodes is nodes and g.outputs is outputs):
            g.lint(check_types=False)
    return g


__all__ = [
    "DEFAULT_MAX_BYTES",
    "convert_layout",
    "eliminate_dead_code",
    "fold_batch_norm",
    "fold_constants",
    "fold_scale_shift",
    "infer_types",
    "qdq_protected_nodes",
    "qdq_to_qnn",
    "simplify",
]
