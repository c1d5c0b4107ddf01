"""Machinery shared by the passes: one linear sweep that rebuilds a graph copy.

A pass walks the nodes of its (already copied) graph in order and, for each
node, either keeps it, drops it, or emits replacement nodes; values that go
away are mapped to their replacements (:meth:`Rewriter.replace`). Nothing is
searched or rewritten in place while walking, so a pass stays linear in the
graph size: :meth:`Graph.replace_uses` (a full scan per call) is never used in
a loop. :meth:`Rewriter.finish` resolves every input once, keeps the graph
outputs' names (callers look results up by name), and drops dead nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np

from accel.errors import AccelError, GraphError
from accel.ir import Graph, Node, QuantParams, TensorType, Value, readers_by_value
from accel.ops.registry import OpContext, get_op, infer_node_types


def is_identity(perm: Sequence[int]) -> bool:
    return tuple(perm) == identity_perm(len(perm))


@cache
def identity_perm(rank: int) -> tuple[int, ...]:
    """``(0, 1, ..., rank - 1)``, one object per rank."""
    return tuple(range(rank))


def permute_quant(q: QuantParams | None, perm: Sequence[int]) -> QuantParams | None:
    """Quantization of ``transpose(x, perm)`` given that of ``x``: a per-axis axis moves with its data."""
    if q is None or q.axis is None:
        return q
    return QuantParams(q.scale, q.zero_point, list(perm).index(q.axis % len(perm)))


def permuted_type(t: TensorType, perm: tuple[int, ...]) -> TensorType:
    """The type of ``transpose(x, perm)`` for ``x`` of type ``t``, as the transpose rule gives it.

    One object per distinct result: a network repeats a few types at many layout
    boundaries, so this neither runs the rule nor builds a new type each time.
    """
    key = (t, perm)
    found = _PERMUTED.get(key)
    if found is None:
        found = TensorType(tuple(t.shape[a] for a in perm), t.dtype, permute_quant(t.quant, perm))
        if len(_PERMUTED) >= 1 << 14:
            _PERMUTED.clear()
        _PERMUTED[key] = found
    return found


_PERMUTED: dict[tuple[TensorType, tuple[int, ...]], TensorType] = {}


def transposed_const(graph: Graph, value: Value, perm: Sequence[int], hint: str | None = None) -> Value:
    """A new constant holding ``transpose(value, perm)`` (quantization axis remapped)."""
    assert value.const is not None
    data = np.ascontiguousarray(np.transpose(value.const, perm))
    return graph.new_const(data, hint or value.name, permute_quant(value.type.quant, perm))


def evaluate(node: Node, inputs: Sequence[Value]) -> list[np.ndarray]:
    """Run ``node``'s reference kernel on the constant data of ``inputs`` (all constants)."""
    in_types = tuple(v.type for v in inputs)
    out_types = tuple(v.type for v in node.outputs)
    consts = tuple(v.const for v in inputs)
    ctx = OpContext(op=node.op, attrs=node.attrs, in_types=in_types, out_types=out_types, consts=consts, name=node.name)
    try:
        result = get_op(node.op).bind(ctx)(*consts)
    except AccelError:
        raise
    except Exception as exc:  # a kernel failing on constants is a property of the model
        raise GraphError(f"node {node.name!r} ({node.op}): evaluating it on its constant inputs failed: {exc}") from exc
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(results) != len(out_types):
        raise GraphError(
            f"node {node.name!r} ({node.op}): kernel returned {len(results)} outputs, expected {len(out_types)}"
        )
    for r, t in zip(results, out_types, strict=True):
        if r.dtype.name != t.dtype or tuple(r.shape) != t.shape:
            raise GraphError(
                f"node {node.name!r} ({node.op}): kernel returned {r.dtype.name}[{','.join(map(str, r.shape))}], "
                f"its type rule says {t}"
            )
    return results


class Rewriter:
    """Rebuilds the node list of ``graph`` (a copy the pass owns) in one forward sweep."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: list[Node] = []
        self._subst: dict[Value, Value] = {}
        self._outputs = list(graph.outputs)
        self._output_set = set(graph.outputs)
        # Use lists of the graph as it was when the sweep started, built on the first query
        # (many passes never ask): the sweep replaces input lists, it never edits one.
        self._start = [(node, node.inputs) for node in graph.nodes]
        self._users_map: dict[Value, list[Node]] | None = None

    @property
    def _users(self) -> dict[Value, list[Node]]:
        if self._users_map is None:
            self._users_map = readers_by_value(self._start)
        return self._users_map

    # -- queries about the original graph --------------------------------------------------
    def users(self, value: Value) -> list[Node]:
        """Readers of ``value`` in the graph as it was before the sweep (empty for new values)."""
        return self._users.get(value, [])

    def is_output(self, value: Value) -> bool:
        return value in self._output_set

    def sole_user(self, value: Value, node: Node) -> bool:
        """``node`` is the only reader of ``value``, which is no graph output."""
        users = self._users.get(value, ())
        return len(users) == 1 and users[0] is node and value not in self._output_set

    # -- building -----------------------------------------------------------------------
    def value(self, v: Value) -> Value:
        """What ``v`` stands for now (follows replacements)."""
        seen = v
        subst = self._subst
        while v in subst:
            v = subst[v]
        if v is not seen:
            subst[seen] = v
        return v

    def replace(self, old: Value, new: Value) -> None:
        """Every later reader of ``old`` (and the graph outputs) reads ``new`` instead."""
        if old is not new:
            self._subst[old] = new

    def keep(self, node: Node) -> Node:
        """Keep ``node``, reading the current replacements of its inputs.

        When a replacement changed an input's type, the node's output types are
        inferred again (in place), so later nodes see the new types.
        """
        new_inputs = [self.value(v) for v in node.inputs]
        changed = any(a is not b for a, b in zip(new_inputs, node.inputs, strict=True))
        if changed:
            retype = any(a.type != b.type for a, b in zip(new_inputs, node.inputs, strict=True))
            node.inputs = new_inputs
            if retype:
                attrs, types = infer_node_types(
                    node.op, [v.type for v in new_inputs], node.attrs, body=node.body, node=node.name
                )
                node.attrs = attrs
                for v, t in zip(node.outputs, types, strict=True):
                    v.type = t
        self.nodes.append(node)
        return node

    def emit(
        self, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any] | None = None, *, name: str | None = None
    ) -> Node:
        """Create a node (types inferred, fresh names) reading the current replacements, and append it."""
        node = self.graph.new_node(op, [self.value(v) for v in inputs], attrs, name=name)
        self.nodes.append(node)
        return node

    def remake(
        self, old: Node, inputs: Sequence[Value], attrs: Mapping[str, Any] | None = None, *, op: str | None = None
    ) -> Node:
        """A replacement of ``old`` under its own node and output names; maps old outputs to new ones."""
        op = op or old.op
        inputs = [self.value(v) for v in inputs]
        full, types = infer_node_types(
            op, [v.type for v in inputs], old.attrs if attrs is None else attrs, body=old.body, node=old.name
        )
        node = Node(op, inputs, full, types, name=old.name, output_names=[v.name for v in old.outputs], body=old.body)
        self.nodes.append(node)
        for o, n in zip(old.outputs, node.outputs, strict=True):
            self.replace(o, n)
        return node

    def adopt_names(self, new: Node, old: Node) -> Node:
        """Give ``new`` the node and output names of ``old``, which this rewrite makes dead.

        Only for nodes that will have no reader left when the sweep ends (dead
        nodes are dropped before names are checked), so that a rewritten model
        keeps the names of the model it came from.
        """
        new.name = old.name
        for nv, ov in zip(new.outputs, old.outputs, strict=True):
            nv.name = ov.name
        return new

    def const(self, data: Any, hint: str = "const", quant: QuantParams | None = None) -> Value:
        return self.graph.new_const(data, hint, quant)

    # -- finishing ----------------------------------------------------------------------
    def finish(self, *, dce: bool = True, sort: bool = True, resolve: bool = True) -> Graph:
        """Install the new node list, resolve every input and output, keep output names.

        ``sort=False`` when the pass emitted every node after its inputs (saves a toposort);
        ``resolve=False`` when no emitted node reads a value replaced after it was emitted.
        """
        g = self.graph
        subst = self._subst
        if subst and resolve:
            for node in self.nodes:
                for v in node.inputs:
                    if v in subst:
                        node.inputs = [self.value(x) for x in node.inputs]
                        break
        g.nodes = self.nodes
        g.outputs = [self.value(v) for v in self._outputs]
        if sort:
            g.sort()
        if dce:
            from accel.passes.dce import remove_dead_nodes

            remove_dead_nodes(g)
        _restore_output_names(g, [v.name for v in self._outputs])
        return g


def _restore_output_names(g: Graph, names: list[str]) -> None:
    """Give each graph output value its original name (renaming, or adding a copy when it cannot)."""
    if all(v.name == n for v, n in zip(g.outputs, names, strict=True)):
        return
    owner = _Owners(g)
    claimed: dict[Value, str] = {}
    outputs = list(g.outputs)
    extra: list[Node] = []
    for i, (v, name) in enumerate(zip(outputs, names, strict=True)):
        if v.name == name and claimed.get(v, name) == name:
            claimed[v] = name
            continue
        renamable = v not in claimed and not any(v is x for x in g.inputs)
        if renamable:
            target = v
        elif v.const is not None:
            target = Value.constant(g.fresh_name(name), v.const, v.type.quant)
        else:
            # A graph input (or a value already named as another output) needs a copy node.
            node = g.new_node("reshape", [v], {"newshape": v.type.shape}, name="copy")
            extra.append(node)
            target = node.output
        other = owner.get(name)
        if other is not None and other is not target:
            other.name = g.fresh_name(name)
            owner.set(other.name, other)
        target.name = name
        owner.set(name, target)
        claimed[target] = name
        outputs[i] = target
    if extra:
        g.nodes = [*g.nodes, *extra]
    g.outputs = outputs


class _Owners:
    """The value of ``g`` holding each name, for :func:`_restore_output_names`.

    An output to rename is usually the last node's: a name is first looked for
    from the end of the node list, and the whole table is built only when a
    name is not found there (a graph input or a constant holds it, or no value).
    """

    def __init__(self, g: Graph):
        self.g = g
        self.table: dict[str, Value] | None = None
        self.renamed: dict[str, Value] = {}

    def get(self, name: str) -> Value | None:
        if name in self.renamed:
            return self.renamed[name]
        if self.table is None:
            for node in reversed(self.g.nodes[-64:]):
                for v in node.outputs:
                    if v.name == name:
                        return v
            self.table = {v.name: v for v in self.g.values()}
        return self.table.get(name)

    def set(self, name: str, v: Value) -> None:
        self.renamed[name] = v
        if self.table is not None:
            self.table[name] = v
