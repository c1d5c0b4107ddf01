"""Type inference: recompute every node's output types from its op's type rule."""

from __future__ import annotations

from accel.errors import GraphError
from accel.ir import Graph
from accel.ops.registry import infer_node_types


def infer_types(graph: Graph, *, in_place: bool = False) -> Graph:
    """Re-run each node's type rule in order and rebuild its output types.

    Use it after changing the types of graph inputs (e.g. binding a batch
    size) or after hand-editing nodes. Requires: nodes in topological order.
    Guarantees: every output type is what its op's rule gives for the current
    input types, attributes are completed with their defaults, and nested
    graphs are typed from their call's arguments. A rule that refuses its
    inputs raises :class:`~accel.errors.TypeInferenceError` naming the node.
    With ``in_place`` the types of ``graph`` itself are updated and it is
    returned; otherwise the input graph is not modified.
    """
    g = graph if in_place else graph.copy()
    g.lint(check_types=False)
    _infer_in_place(g)
    return g


def _infer_in_place(g: Graph) -> None:
    for node in g.nodes:
        if node.body is not None:
            body = node.body
            if len(body.inputs) != len(node.inputs):
                raise GraphError(
                    f"node {node.name!r}: call has {len(node.inputs)} arguments but its graph takes {len(body.inputs)} inputs"
                )
            for param, arg in zip(body.inputs, node.inputs, strict=True):
                param.type = arg.type
            _infer_in_place(body)
        attrs, types = infer_node_types(
            node.op, [v.type for v in node.inputs], node.attrs, body=node.body, node=node.name
        )
        if len(types) != len(node.outputs):
            raise GraphError(
                f"node {node.name!r} ({node.op}): its type rule gives {len(types)} outputs, the node has {len(node.outputs)}"
            )
        node.attrs = attrs
        for v, t in zip(node.outputs, types, strict=True):
            v.type = t
