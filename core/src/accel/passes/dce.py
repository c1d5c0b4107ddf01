"""Dead-code elimination."""

from __future__ import annotations

from accel.ir import Graph, Value


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


def remove_dead_nodes(g: Graph, *, nested: bool = True) -> None:
    """In-place dead-code elimination of a graph the caller owns (one backward sweep).

    ``nested``: also clean the bodies of kept ``call`` nodes (off for a caller
    that built those bodies without dead nodes).
    """
    # (values themselves as keys: they hash and compare by identity, without an id() object each)
    live: set[Value] = set(g.outputs)
    kept = []
    for node in reversed(g.nodes):
        outs = node.outputs
        if outs[0] in live if len(outs) == 1 else any(v in live for v in outs):
            kept.append(node)
            live.update(node.inputs)
            if nested and node.body is not None:
                remove_dead_nodes(node.body)
    if len(kept) != len(g.nodes):
        kept.reverse()
        g.nodes = kept
