"""The intermediate representation: values, nodes and graphs.

Small and explicit. A :class:`Graph` holds its inputs, its outputs and its nodes
in topological order; every :class:`Value` knows the node that produces it (or
holds constant data, or is a graph input) and the graph can answer who uses a
value. Tensor types, quantization parameters and dtypes live in the leaf
module :mod:`accel.tensor_types` (re-exported here), serialization in
:mod:`accel.serialize`, printing in :mod:`accel.printer`: this module knows
neither JSON nor text.

A nested graph hangs off a node whose op is ``call``: with the attribute
``compiler=<backend>`` it is a partition offloaded to a backend, with
``composite=<backend>.<pattern>`` it is a fused pattern.
"""

from __future__ import annotations

import gc
import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

import numpy as np

from accel.errors import GraphError
from accel.ops.registry import infer_node_types
from accel.printer import format_graph
from accel.tensor_types import (
    CALL_OP,
    DTYPES,
    MAX_ELEMENTS,
    QuantParams,
    TensorType,
    dtype_name,
    freeze_attr,
    freeze_attrs,
)

__all__ = [
    "CALL_OP",
    "DTYPES",
    "MAX_ELEMENTS",
    "Graph",
    "Node",
    "QuantParams",
    "TensorType",
    "Value",
    "collector_paused",
    "dtype_name",
    "freeze_after_pauses",
    "freeze_attr",
    "freeze_attrs",
    "readers_by_value",
    "stable_topological_order",
    "toposort",
]


class Value:
    """A tensor in a graph: a graph input, a constant, or a node's output.

    Values (and nodes) hash and compare by identity, and graph code keys its
    dicts and sets by them directly: they must not define ``__eq__`` or ``__hash__``.
    """

    __slots__ = ("name", "type", "producer", "const")

    def __init__(
        self,
        name: str,
        type: TensorType,
        producer: Node | None = None,
        const: np.ndarray | None = None,
    ):
        self.name = name
        self.type = type
        self.producer = producer
        self.const = const

    @classmethod
    def constant(cls, name: str, data: Any, quant: QuantParams | None = None) -> Value:
        arr = np.asarray(data)  # keeps 0-d arrays 0-d
        # a read-only view (or a contiguous copy): the caller's array stays writable
        arr = arr.view() if arr.flags.c_contiguous else arr.copy(order="C")
        arr.setflags(write=False)
        return cls(name, TensorType.of(arr, quant), None, arr)

    @property
    def is_constant(self) -> bool:
        return self.const is not None

    def __repr__(self) -> str:
        kind = "const" if self.const is not None else ("input" if self.producer is None else "value")
        return f"Value(%{self.name}: {self.type}, {kind})"


class Node:
    """One op application. ``attrs`` is read-only; ``body`` is the nested graph of a ``call``."""

    __slots__ = ("name", "op", "inputs", "attrs", "outputs", "body")

    def __init__(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: Mapping[str, Any] | None,
        output_types: Sequence[TensorType],
        *,
        name: str,
        output_names: Sequence[str],
        body: Graph | None = None,
    ):
        if len(output_names) != len(output_types):
            raise GraphError(f"node {name!r}: {len(output_names)} output names for {len(output_types)} outputs")
        self.name = name
        self.op = op
        self.inputs: list[Value] = list(inputs)
        self.attrs = attrs if type(attrs) is MappingProxyType else freeze_attrs(attrs)  # frozen ones as they are
        if len(output_types) == 1:  # most nodes: no comprehension to run
            self.outputs: list[Value] = [Value(output_names[0], output_types[0], self)]
        else:
            self.outputs = [Value(n, t, self) for n, t in zip(output_names, output_types)]
        self.body = body

    def copy_reading(self, inputs: Sequence[Value]) -> Node:
        """A copy of this node that reads ``inputs``: same op, attributes and names, new outputs
        of the same types, the body (of a ``call``) copied."""
        return Node(
            self.op,
            inputs,
            self.attrs,
            [v.type for v in self.outputs],
            name=self.name,
            output_names=[v.name for v in self.outputs],
            body=self.body.copy() if self.body is not None else None,
        )

    @property
    def output(self) -> Value:
        """The single output (error if the node has several)."""
        if len(self.outputs) != 1:
            raise GraphError(f"node {self.name!r} ({self.op}) has {len(self.outputs)} outputs")
        return self.outputs[0]

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op})"


class Graph:
    """Inputs, outputs and nodes in topological order.

    Mutating ``nodes``, ``inputs`` or ``outputs`` through the setters drops the
    cached use lists and output set; after editing a node's ``inputs`` (or the
    ``outputs`` list) in place call :meth:`invalidate`.
    """

    def __init__(
        self,
        inputs: Sequence[Value],
        outputs: Sequence[Value],
        nodes: Sequence[Node],
        name: str = "main",
    ):
        self.name = name
        self._inputs = list(inputs)
        self._outputs = list(outputs)
        self._nodes = list(nodes)
        self._users: dict[Value, list[Node]] | None = None
        self._output_set: set[Value] | None = None
        self._names: set[str] | None = None
        self._name_layers: tuple[AbstractSet[str], ...] = ()  # names avoided too, shared (see adopt_names)
        self._counter = itertools.count()

    # -- structure -----------------------------------------------------------------
    @property
    def inputs(self) -> list[Value]:
        return self._inputs

    @inputs.setter
    def inputs(self, values: Sequence[Value]) -> None:
        self._inputs = list(values)
        self.invalidate()

    @property
    def outputs(self) -> list[Value]:
        return self._outputs

    @outputs.setter
    def outputs(self, values: Sequence[Value]) -> None:
        self._outputs = list(values)
        self.invalidate()

    @property
    def nodes(self) -> list[Node]:
        return self._nodes

    @nodes.setter
    def nodes(self, nodes: Sequence[Node]) -> None:
        self._nodes = list(nodes)
        self.invalidate()

    def invalidate(self) -> None:
        """Forget cached use lists and outputs (call after editing node inputs, or the outputs list, in place)."""
        self._users = None
        self._output_set = None

    def users(self, value: Value) -> list[Node]:
        """Nodes that read ``value``, in graph order (a node reading it twice appears once)."""
        return list(self.readers(value))

    def readers(self, value: Value) -> Sequence[Node]:
        """:meth:`users` without the copy: a view to read, not to keep across edits."""
        users = self._users
        if users is None:
            users = self._users = readers_by_value((node, node.inputs) for node in self._nodes)
        return users.get(value, ())

    def is_output(self, value: Value) -> bool:
        outputs = self._output_set
        if outputs is None:  # (a set: a pattern asks this of every value it matches, and a model may have many outputs)
            outputs = self._output_set = set(self._outputs)
        return value in outputs

    def constants(self) -> list[Value]:
        """Distinct constant values read by nodes or returned as outputs, in first-use order."""
        seen: dict[Value, None] = {}  # (insertion-ordered)
        for node in self._nodes:
            for v in node.inputs:
                if v.const is not None:
                    seen[v] = None
        for v in self._outputs:
            if v.const is not None:
                seen[v] = None
        return list(seen)

    def values(self) -> Iterator[Value]:
        """Every value once: inputs, constants, then node outputs in order."""
        yield from self._inputs
        yield from self.constants()
        for node in self._nodes:
            yield from node.outputs

    def walk(self) -> Iterator[Node]:
        """Every node, descending into nested graphs (parents first)."""
        for node in self._nodes:
            yield node
            if node.body is not None:
                yield from node.body.walk()

    def __len__(self) -> int:
        return len(self._nodes)

    def __str__(self) -> str:
        return format_graph(self)

    def __repr__(self) -> str:
        return (
            f"Graph({self.name!r}, {len(self._inputs)} inputs, {len(self._nodes)} nodes, {len(self._outputs)} outputs)"
        )

    # -- building -----------------------------------------------------------------
    def fresh_name(self, hint: str) -> str:
        """A value/node name not yet used in this graph, derived from ``hint``."""
        used = self._names if self._names is not None else self._used_names()
        layers = self._name_layers
        hint = hint or "v"
        name = hint
        while True:  # (the layers looked at in a loop, not a generator: this runs once per new name)
            if name not in used:
                for names in layers:
                    if name in names:
                        break
                else:
                    break
            name = f"{hint}_{next(self._counter)}"
        used.add(name)
        return name

    def _used_names(self) -> set[str]:
        if self._names is None:
            names: set[str] = {v.name for v in self.values()}
            names.update(n.name for n in self._nodes)
            self._names = names
        return self._names

    def adopt_names(self, names: set[str], *layers: AbstractSet[str]) -> None:
        """Take ``names`` and ``layers`` (kept, not copied) as the names :meth:`fresh_name` avoids,
        instead of collecting them from the graph on first use: a builder that knows every name it
        gave (the importer) saves that walk, and a graph made from another one (a layout view)
        avoids that one's names without a copy. Together they must hold every value and node
        name of the graph; the names given later are added to ``names``, never to a layer."""
        self._names = names
        self._name_layers = layers

    def name_sets(self) -> tuple[AbstractSet[str], ...]:
        """The sets of names :meth:`fresh_name` avoids (kept, not copied): for a graph made from this
        one to avoid them too, as ``derived.adopt_names(set(), *graph.name_sets())``."""
        return (self._used_names(), *self._name_layers)

    def names_in_use(self) -> set[str]:
        """A copy of the names :meth:`fresh_name` avoids: every value and node name, and those reserved."""
        return set(self._used_names()).union(*self._name_layers)

    def reserve_names(self, names: Iterable[str]) -> None:
        """Names :meth:`fresh_name` must not give, besides those this graph uses."""
        self._used_names().update(names)

    def new_node(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        output_names: Sequence[str] | None = None,
        body: Graph | None = None,
    ) -> Node:
        """Create (not insert) a node; attributes are completed and output types inferred.

        Insert it by assigning a new ``nodes`` list (then :meth:`sort` if the
        order is not already topological).
        """
        node_name = self.fresh_name(name or op.rsplit(".", 1)[-1])
        full_attrs, out_types = infer_node_types(op, [v.type for v in inputs], attrs, body=body, node=node_name)
        if output_names is None:
            output_names = [
                self.fresh_name(node_name if len(out_types) == 1 else f"{node_name}:{i}") for i in range(len(out_types))
            ]
        else:
            output_names = [self.fresh_name(n) for n in output_names]
        return Node(op, inputs, full_attrs, out_types, name=node_name, output_names=output_names, body=body)

    def new_const(self, data: Any, hint: str = "const", quant: QuantParams | None = None) -> Value:
        return Value.constant(self.fresh_name(hint), data, quant)

    def replace_uses(self, old: Value, new: Value, *, include_outputs: bool = True) -> None:
        """Make every reader of ``old`` (and, optionally, the graph outputs) read ``new``."""
        for node in self._nodes:
            node.inputs = [new if v is old else v for v in node.inputs]
        if include_outputs:
            self._outputs = [new if v is old else v for v in self._outputs]
        self.invalidate()

    def sort(self) -> None:
        """Reorder nodes topologically (stable); raise :class:`GraphError` on a cycle."""
        self.nodes = toposort(self._nodes, self._inputs)

    def copy(self) -> Graph:
        """A structural copy: new Nodes and Values, constant data shared (read-only)."""
        vmap: dict[Value, Value] = {}

        def get(v: Value) -> Value:
            nv = vmap.get(v)
            if nv is None:
                if v.producer is not None:
                    raise GraphError(f"value %{v.name} is used before its producer {v.producer.name!r}")
                nv = Value(v.name, v.type, None, v.const)
                vmap[v] = nv
            return nv

        inputs = [get(v) for v in self._inputs]
        nodes = []
        for node in self._nodes:
            new = node.copy_reading([get(v) for v in node.inputs])
            for old_v, new_v in zip(node.outputs, new.outputs):
                vmap[old_v] = new_v
            nodes.append(new)
        outputs = [get(v) for v in self._outputs]
        return Graph(inputs, outputs, nodes, self.name)

    # -- checking -----------------------------------------------------------------
    def lint(self, *, check_types: bool = True) -> None:
        """Check the invariants; raise :class:`GraphError` naming the first broken one.

        Topological order, unique value and node names, every value produced
        once, producers consistent, graph outputs defined, and (``check_types``)
        every node's output types equal to what its op's type rule infers.
        Nested graphs are checked too.
        """
        defined: set[Value] = set()  # the values defined so far
        names: dict[str, Value] = {}

        def define(v: Value) -> None:
            other = names.get(v.name)
            if other is not None and other is not v:
                raise GraphError(f"duplicate value name {v.name!r} in graph {self.name!r}")
            names[v.name] = v
            defined.add(v)

        for v in self._inputs:
            if v.producer is not None or v.const is not None:
                raise GraphError(f"graph input %{v.name} must have neither producer nor constant data")
            define(v)
        node_names: set[str] = set()
        for node in self._nodes:
            count = len(node_names)
            node_names.add(node.name)
            if len(node_names) == count:  # (one hash lookup: the name was there)
                raise GraphError(f"duplicate node name {node.name!r} in graph {self.name!r}")
            for v in node.inputs:
                if v in defined:
                    continue
                if v.const is not None and v.producer is None:
                    define(v)
                    continue
                if v.producer is None:
                    raise GraphError(
                        f"node {node.name!r} reads %{v.name}, which is not a graph input, constant or node output"
                    )
                raise GraphError(
                    f"node {node.name!r} reads %{v.name} before its producer {v.producer.name!r} "
                    "(nodes are not in topological order, or the graph has a cycle)"
                )
            for v in node.outputs:  # define(v), inlined: every value of the graph passes here
                if v.producer is not node:
                    raise GraphError(f"output %{v.name} of node {node.name!r} names another producer")
                count = len(defined)
                defined.add(v)
                if len(defined) == count:
                    raise GraphError(f"value %{v.name} is produced twice")
                if names.setdefault(v.name, v) is not v:
                    raise GraphError(f"duplicate value name {v.name!r} in graph {self.name!r}")
            if node.body is not None:
                node.body.lint(check_types=check_types)
            if check_types:
                _, types = infer_node_types(
                    node.op, [v.type for v in node.inputs], node.attrs, body=node.body, node=node.name
                )
                actual = [v.type for v in node.outputs]
                if types != actual:
                    raise GraphError(
                        f"node {node.name!r} ({node.op}): outputs typed "
                        f"{', '.join(map(str, actual))} but the type rule gives {', '.join(map(str, types))}"
                    )
        for v in self._outputs:
            if v not in defined:
                if v.const is not None and v.producer is None:
                    define(v)
                else:
                    raise GraphError(f"graph output %{v.name} is not defined in graph {self.name!r}")


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a whole graph is built or rewritten.

    Importing, simplifying or partitioning a graph allocates many small objects
    (nodes, values, types) that all stay alive; every automatic collection of the
    oldest generation walks all of them again, which made these steps grow faster
    than the graph (2.5x the time at 100k nodes). What becomes garbage meanwhile
    (a graph copy dropped: values and their producers refer to each other) is
    collected once the collector runs again. Nests: only the outermost use resumes it.

    A short-lived process (the ``accel`` command) can also :func:`freeze_after_pauses`.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if _freeze_after_pauses:
                gc.freeze()
            gc.enable()


def freeze_after_pauses(on: bool = True) -> None:
    """Freeze (:func:`gc.freeze`) what each :func:`collector_paused` leaves allocated, from now on.

    The first collections after a pause walk every object it built, just to age
    them: 1.5 s of a 100k-node ``accel inspect``. Frozen objects are never walked
    again, nor freed when they become garbage: for a process that compiles once
    and exits (the ``accel`` command), not for a library caller that goes on.
    """
    global _freeze_after_pauses
    _freeze_after_pauses = on


_freeze_after_pauses = False


def stable_topological_order(deps: Sequence[Iterable[int]]) -> tuple[list[int], int | None]:
    """Kahn's algorithm over item indices, ties broken by index (stable).

    ``deps[i]`` are the indices item ``i`` depends on. Returns the order and,
    when a cycle leaves items unordered, the index of one item on it (else None).
    """
    if all(j < i for i, d in enumerate(deps) for j in d):
        return list(range(len(deps))), None  # already in order (as most models are): the stable order
    indegree = [0] * len(deps)
    consumers: list[list[int]] = [[] for _ in deps]
    for i, d in enumerate(deps):
        unique = set(d)
        indegree[i] = len(unique)
        for j in unique:
            consumers[j].append(i)
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for c in consumers[i]:
            indegree[c] -= 1
            if indegree[c] == 0:
                heapq.heappush(ready, c)
    stuck = None if len(order) == len(deps) else next(i for i, d in enumerate(indegree) if d > 0)
    return order, stuck


def readers_by_value(nodes: Iterable[tuple[Node, Sequence[Value]]]) -> dict[Value, list[Node]]:
    """For each value read, the nodes reading it in order, from ``(node, its inputs)`` pairs (a node
    reading a value twice is listed once)."""
    users: dict[Value, list[Node]] = {}
    for node, inputs in nodes:
        for v in inputs:
            found = users.get(v)
            if found is None:
                users[v] = [node]
            elif found[-1] is not node:
                found.append(node)
    return users


def toposort(nodes: Iterable[Node], inputs: Iterable[Value] = ()) -> list[Node]:
    """Stable topological order; :class:`GraphError` names a node on a cycle."""
    nodes = list(nodes)
    producer_index = {v: i for i, n in enumerate(nodes) for v in n.outputs}
    if all(producer_index.get(v, -1) < i for i, n in enumerate(nodes) for v in n.inputs):
        return nodes  # already in order: the stable order is this one
    deps = [[producer_index[v] for v in n.inputs if v in producer_index] for n in nodes]
    order, stuck = stable_topological_order(deps)
    if stuck is not None:
        raise GraphError(f"the graph has a cycle through node {nodes[stuck].name!r} ({nodes[stuck].op})")
    return [nodes[i] for i in order]
