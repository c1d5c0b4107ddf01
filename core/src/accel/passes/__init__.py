"""Graph passes: pure ``Graph -> Graph`` functions.

Each pass copies its input (``graph.copy()``), never mutates it, and returns a
graph that passes :meth:`~accel.ir.Graph.lint`; each docstring says what the
pass requires and what it guarantees. :func:`simplify` is the standard
pipeline :func:`accel.import_onnx` runs.
"""

from __future__ import annotations

from accel.ir import Graph
from accel.passes.dce import eliminate_dead_code
from accel.passes.fold_batch_norm import fold_batch_norm
from accel.passes.fold_constants import DEFAULT_MAX_BYTES, fold_constants
from accel.passes.infer_types import infer_types
from accel.passes.layout import convert_layout
from accel.passes.qdq_to_qnn import qdq_protected_nodes, qdq_to_qnn


def simplify(graph: Graph) -> Graph:
    """The default pipeline: types, QDQ → qnn, folding, batch-norm folding, dead code.

    ``infer_types → qdq_to_qnn → fold_constants → fold_batch_norm →
    fold_constants → eliminate_dead_code``, then ``lint``. ``qdq_to_qnn`` runs
    before folding so that quantized weights stay quantized; the dequantizes of
    constants it leaves (a float head's weights) fold to float constants.
    """
    g = infer_types(graph)
    g = qdq_to_qnn(g)
    g = fold_constants(g)
    g = fold_batch_norm(g)
    g = fold_constants(g)
    g = eliminate_dead_code(g)
    g.lint()
    return g


__all__ = [
    "DEFAULT_MAX_BYTES",
    "convert_layout",
    "eliminate_dead_code",
    "fold_batch_norm",
    "fold_constants",
    "infer_types",
    "qdq_protected_nodes",
    "qdq_to_qnn",
    "simplify",
]
