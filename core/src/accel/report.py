"""The partition report: where every node runs, and why.

Built by :func:`accel.partition.partition_graph`; stored in artifacts; shown
by ``accel compile`` and ``accel inspect`` (text, JSON or HTML, see
:mod:`accel.render`). It refers to the nodes of the graph *before*
partitioning, so a user recognises the names of their model.
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import deepcopy
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

HOST = "host"


@dataclass(slots=True)  # one per node of the input graph: no dict each
class NodeReport:
    """One node of the input graph."""

    name: str
    op: str
    #: The backend that runs it, or ``"host"``.
    backend: str
    #: Name of the partition holding it (None on the host).
    partition: str | None = None
    #: ``<backend>.<pattern>`` when it runs inside a composite.
    composite: str | None = None
    #: For every backend that declined it (higher priority ones, or all of them
    #: for a host node): why. The reason of the backend's check when one was
    #: asked, else for an op the backend has patterns but no op check for, why
    #: the pattern that got furthest did not match
    #: (``"acl.conv2d does not match: this nn.conv2d has dtype float32, expected uint8"``).
    #: An edge conversion (:meth:`accel.backend.Backend.edge_ops`) also has a line under the name
    #: of the backend that runs it: that its runtime does it on the CPU, at which edge.
    reasons: dict[str, str] = field(default_factory=dict)
    #: Value names read and written (to draw the graph).
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    #: Name of the root node of its composite, one per composite instance (None outside composites).
    composite_root: str | None = None
    #: For a backend that takes this op only inside its patterns, and declined it here because the
    #: node's surroundings do not fit them: which pattern got furthest and where it failed
    #: (``"ethosn.qnn_sigmoid does not match: input 0 of this qnn.quantize is not an op output,
    #: expected sigmoid"``). Its reason then speaks of the node; `accel inspect -v` shows this too.
    details: Mapping[str, str] | None = None


@dataclass(slots=True)
class PartitionReport:
    """One region offloaded to a backend."""

    name: str
    backend: str
    #: Names of the input-graph nodes in it, in order.
    nodes: list[str]
    #: Value names crossing its boundary.
    inputs: list[str]
    outputs: list[str]
    macs: int
    #: Operations (MACs, plus one per output element of other compute ops).
    work: int
    #: Boundary transposes the compiler inserted for its layout (in + out).
    transposes: int = 0


@dataclass
class Report:
    """The whole picture for one compile."""

    #: Backend names in priority order.
    target: list[str]
    nodes: list[NodeReport]
    partitions: list[PartitionReport]
    graph_inputs: list[str] = field(default_factory=list)
    graph_outputs: list[str] = field(default_factory=list)
    #: Seconds spent in each stage (``"partition"``, ``"serialize"``, ...).
    timings: dict[str, float] = field(default_factory=dict)
    #: Type of every value the nodes read or write, as text (``float32[1,64,56,56]``), to label edges.
    types: dict[str, str] = field(default_factory=dict)
    #: With ``accel compile --tune``: the tuning record (:mod:`accel.tune`: machine, threads, every
    #: candidate placement and its measured time, each region's times per backend, the choice and why).
    tuning: dict[str, Any] | None = None

    def to_json(self, *, copy: bool = True) -> dict[str, Any]:
        """The report as plain JSON types, its nodes and partitions by column: ``"nodes"`` maps
        each :class:`NodeReport` field to the list of its values, node by node (one key per field
        instead of one per field and node: a large model's report is half the size, and made and
        read faster), and ``"partitions"`` likewise. Lists and dicts are copies; with ``copy`` off
        they are the report's own (for a document encoded at once and dropped)."""
        return {
            "target": list(self.target),
            "nodes": _columns(self.nodes, _NODE_FIELDS, copy),
            "partitions": _columns(self.partitions, _PARTITION_FIELDS, copy),
            "graph_inputs": list(self.graph_inputs),
            "graph_outputs": list(self.graph_outputs),
            "timings": dict(self.timings),
            "types": dict(self.types) if copy else self.types,
            "tuning": deepcopy(self.tuning) if copy else self.tuning,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Report:
        """The report :meth:`to_json` gives, or :func:`accel.render.report_to_json` (a dict per node and partition)."""
        return cls(
            target=list(doc["target"]),
            nodes=_items(NodeReport, doc["nodes"], _NODE_FIELDS),
            partitions=_items(PartitionReport, doc["partitions"], _PARTITION_FIELDS),
            graph_inputs=list(doc.get("graph_inputs", [])),
            graph_outputs=list(doc.get("graph_outputs", [])),
            timings=dict(doc.get("timings", {})),
            types=dict(doc.get("types", {})),
            tuning=doc.get("tuning"),
        )

    def host_nodes(self) -> list[NodeReport]:
        return [n for n in self.nodes if n.backend == HOST]

    def by_backend(self) -> dict[str, list[PartitionReport]]:
        out: dict[str, list[PartitionReport]] = {}
        for p in self.partitions:
            out.setdefault(p.backend, []).append(p)
        return out


_NODE_FIELDS = tuple(f.name for f in fields(NodeReport))
_PARTITION_FIELDS = tuple(f.name for f in fields(PartitionReport))


def _columns(items: list[Any], names: tuple[str, ...], copy: bool = True) -> dict[str, list[Any]]:
    """Each field's values, item by item; with ``copy``, lists and dicts copied (their items are
    strings and numbers)."""
    out: dict[str, list[Any]] = {}
    for name in names:
        values = list(map(attrgetter(name), items))
        if copy:
            kinds = set(map(type, values))
            if kinds == {list}:
                values = list(map(list, values))
            elif kinds == {dict}:
                values = list(map(dict, values))
            elif list in kinds or dict in kinds:
                values = [list(v) if type(v) is list else dict(v) if type(v) is dict else v for v in values]
        out[name] = values
    return out


def _items(cls: type, doc: Any, names: tuple[str, ...]) -> list[Any]:
    """The nodes or partitions of a report document: by column (``{field: [value, ...]}``, every
    field given, all lists of one length) or as a list of ``{field: value}``."""
    if type(doc) is list:
        return [cls(**item) for item in doc]
    if type(doc) is not dict:
        raise TypeError(f"expected a list or a mapping of columns, got {type(doc).__name__}")
    if set(doc) != set(names):
        unknown, missing = sorted(set(doc) - set(names)), sorted(set(names) - set(doc))
        raise ValueError(f"unknown field(s) {unknown}" if unknown else f"missing field(s) {missing}")
    columns = [doc[name] for name in names]
    count = len(columns[0])
    if any(type(c) is not list or len(c) != count for c in columns):
        raise ValueError("the columns are not lists of one length")
    return [cls(*row) for row in zip(*columns)]
