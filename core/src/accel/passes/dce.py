"""Dead-code elimination."""

from __future__ import annotations

from accel.ir import Graph


def eliminate_dead_code(graph: Graph, *, in_place: bool = False) -> Graph:
    """Drop every node none of whose outputs reaches a graph output.

    Requires: a graph in topological order. Guarantees: the same inputs,
    outputs and results; the kept nodes in their original order; nested graphs
    (``call`` bodies) cleaned the same way. With ``in_place`` ``graph`` itself
    is cleaned and returned; otherwise the input graph is not modified.
    """
    g = graph if in_place else graph.copy()
    remove_dead_nodes(g)
    return g


def remove_dead_nodes(g: Graph) -> None:
    """In-place dead-code elimination of a graph the caller owns (one backward sweep)."""
    live: set[int] = {id(v) for v in g.outputs}
    kept = []
    for node in reversed(g.nodes):
        if any(id(v) in live for v in node.outputs):
            kept.append(node)
            live.update(id(v) for v in node.inputs)
            if node.body is not None:
                remove_dead_nodes(node.body)
    if len(kept) != len(g.nodes):
        kept.reverse()
        g.nodes = kept
