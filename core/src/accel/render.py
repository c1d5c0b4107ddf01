"""Three views of a :class:`~accel.report.Report`: JSON, terminal tables, an HTML drawing.

- :func:`report_to_json` is what ``accel inspect --format json`` prints: plain
  JSON types, keys in a fixed order, and ``Report.from_json`` reads it back.
- :func:`print_report` is what ``accel compile`` and ``accel inspect`` print:
  partitions per backend, the ops left on the host grouped by (op, reasons),
  timings. Plain text when the console is not a terminal.
- :func:`report_to_html` is one self-contained page (inline CSS, SVG and a
  small script; nothing is fetched): the graph laid out top to bottom in
  columns, coloured by backend, composites as one box, shapes on the edges,
  with zoom/pan, search and collapsible partitions, and the partition and host
  tables under it. The CSS and the script are files of the package
  (``accel/report_assets/report.css`` and ``report.js``), inlined as they are.

Every string that comes from the model (node, value, partition names, reasons)
is escaped: rich markup is never parsed from it and HTML is always escaped.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from itertools import pairwise
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from accel.report import HOST, NodeReport, Report

#: Above this many nodes the drawing has no edges (the layout still follows them).
EDGE_LIMIT = 10000
#: Above this many nodes the HTML page has no drawing, only the tables.
DRAW_LIMIT = 20000
#: An edge across more layers than this is drawn as two stubs, one at each end (click one to go to the other).
LONG_EDGE = 6
#: Grouped host-op rows shown by :func:`print_report` before "N more" (``verbose`` shows all).
HOST_ROWS = 40

HOST_COLOR = "#c4c4c4"
_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#e15759", "#76b7b2", "#edc948", "#9c755f", "#ff9da7")


# --------------------------------------------------------------------------- shared summaries


def _backends(report: Report) -> list[str]:
    """Backends in target order, then any other backend the report mentions (never ``host``)."""
    seen = dict.fromkeys(report.target)
    seen.update(dict.fromkeys(p.backend for p in report.partitions))
    seen.update(dict.fromkeys(n.backend for n in report.nodes))
    seen.pop(HOST, None)
    return list(seen)


def backend_colors(report: Report) -> dict[str, str]:
    """The fill colour of every backend in the drawing (target order), ``host`` last in grey."""
    colors = {b: _PALETTE[i % len(_PALETTE)] for i, b in enumerate(_backends(report))}
    colors[HOST] = HOST_COLOR
    return colors


def _summary(report: Report) -> dict[str, Any]:
    backends: dict[str, dict[str, int]] = {
        b: {"partitions": 0, "nodes": 0, "macs": 0, "work": 0, "transposes": 0} for b in _backends(report)
    }
    for p in report.partitions:
        row = backends[p.backend]
        row["partitions"] += 1
        row["nodes"] += len(p.nodes)
        row["macs"] += p.macs
        row["work"] += p.work
        row["transposes"] += p.transposes
    host = report.host_nodes()
    host_ops = Counter(n.op for n in host)
    return {
        "nodes": len(report.nodes),
        "partitions": len(report.partitions),
        "offloaded_nodes": len(report.nodes) - len(host),
        "host_nodes": len(host),
        "backends": backends,
        "host_ops": dict(sorted(host_ops.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def _ordered_reasons(node: NodeReport, order: list[str]) -> list[tuple[str, str]]:
    """The node's reasons in target order (then any other backend by name)."""
    items = list(node.reasons.items())
    if len(items) > 1:  # called for every node: nothing to build or sort for one reason
        items.sort(key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))
    return items


@dataclass
class _HostGroup:
    op: str
    reasons: list[tuple[str, str]]
    names: list[str] = field(default_factory=list)


def _host_groups(report: Report) -> list[_HostGroup]:
    """Host nodes grouped by (op, reasons), largest group first."""
    order = _backends(report)
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], _HostGroup] = {}
    for n in report.host_nodes():
        reasons = _ordered_reasons(n, order)
        key = (n.op, tuple(reasons))
        groups.setdefault(key, _HostGroup(n.op, reasons)).names.append(n.name)
    return sorted(groups.values(), key=lambda g: (-len(g.names), g.op))


def _si(n: int | float) -> str:
    """``1234567`` -> ``1.23M``: short counts for tables."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return str(n)


def _seconds(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def _names(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit]) or "-"
    return shown + (f", +{len(names) - limit} more" if len(names) > limit else "")


def _headline(report: Report, summary: dict[str, Any]) -> str:
    target = ", ".join(report.target) if report.target else "(none)"
    return (
        f"target {target} (priority order) - {summary['nodes']} nodes: {summary['offloaded_nodes']} offloaded "
        f"in {summary['partitions']} partitions, {summary['host_nodes']} on the host"
    )


# --------------------------------------------------------------------------- JSON


def report_to_json(report: Report) -> dict[str, Any]:
    """The report as plain JSON types, keys in a fixed order.

    ``{"target", "nodes", "partitions", "summary", "timings", "graph_inputs", "graph_outputs", "types"}``;
    each node is ``{"name", "op", "backend", "partition", "composite", "composite_root", "reasons", "inputs",
    "outputs"}``, and ``"details"`` (pattern by pattern, see :class:`~accel.report.NodeReport`) when it has any,
    each partition ``{"name", "backend", "nodes", "inputs", "outputs", "macs", "work", "transposes"}``.
    ``summary`` counts partitions, nodes, MACs, work and transposes per backend (target order) and the
    host ops (most frequent first). ``Report.from_json`` of the result equals the report.
    """
    order = _backends(report)
    return {
        "target": list(report.target),
        "nodes": [
            {
                "name": n.name,
                "op": n.op,
                "backend": n.backend,
                "partition": n.partition,
                "composite": n.composite,
                "composite_root": n.composite_root,
                "reasons": dict(_ordered_reasons(n, order)),
                "inputs": list(n.inputs),
                "outputs": list(n.outputs),
                **({"details": dict(n.details)} if n.details else {}),
            }
            for n in report.nodes
        ],
        "partitions": [
            {
                "name": p.name,
                "backend": p.backend,
                "nodes": list(p.nodes),
                "inputs": list(p.inputs),
                "outputs": list(p.outputs),
                "macs": int(p.macs),
                "work": int(p.work),
                "transposes": int(p.transposes),
            }
            for p in report.partitions
        ],
        "summary": _summary(report),
        "timings": {k: float(v) for k, v in report.timings.items()},
        "graph_inputs": list(report.graph_inputs),
        "graph_outputs": list(report.graph_outputs),
        "types": dict(report.types),
        **({"tuning": report.tuning} if report.tuning is not None else {}),
    }


# --------------------------------------------------------------------------- tuning


def _ms(seconds: Any) -> str:
    return (
        "-"
        if not isinstance(seconds, (int, float)) or seconds != seconds or seconds == float("inf")
        else (f"{seconds * 1e3:.3f} ms")
    )


def _tuning_tables(record: dict[str, Any]) -> tuple[str, list[list[str]], list[list[str]], list[list[str]]]:
    """``accel compile --tune``'s record (:mod:`accel.tune`) as a headline, candidate rows, region rows
    and the segment search's path."""
    machine = record.get("machine") or {}
    cache = record.get("cache") or {}
    head = (
        f"Tuned on {machine.get('cpu', '?')} ({machine.get('arch', '?')}; {', '.join(machine.get('isa', [])) or '-'}) "
        f"with {record.get('threads')} thread(s), p{record.get('percentile', 75):g} of {record.get('runs')} runs, "
        f"in {record.get('elapsed', 0.0):.2f} s (budget {record.get('budget', 0):g} s"
        f"{', reached' if record.get('budget_reached') else ''}; cache {cache.get('hits', 0)} hit(s), "
        f"{cache.get('misses', 0)} miss(es)). Chosen: {record.get('chosen')}."
    )
    if record.get("note"):
        head += " " + str(record["note"])
    candidates = [
        [
            str(c.get("label")),
            ", ".join(f"{b} {k}" for b, k in (c.get("placement") or {}).items()),
            _ms(c.get("time")),
            _ms(c.get("median")),
            ("cached" if c.get("cached") else "measured") + (f"; {c['error']}" if c.get("error") else ""),
            "yes" if c.get("chosen") else "",
        ]
        for c in record.get("candidates", [])
    ]
    regions = _span_rows(record.get("regions") or [])
    segments = _span_rows(record.get("segments") or [])
    if segments and record.get("segment_estimate") is not None:
        head += (
            f" The segment search measured {record.get('segment_spans', 0)} segment(s) alone "
            f"({record.get('segment_measured', 0)} new); its path sums to {_ms(record['segment_estimate'])}."
        )
    return head, candidates, regions, segments


def _span_rows(records: list[dict[str, Any]]) -> list[list[str]]:
    """Rows of a tuning record's regions or segments: the span, each choice's time, the winner, why."""
    return [
        [
            f"{r['nodes'][0]}..{r['nodes'][-1]} ({r.get('size', '?')} nodes)",
            ", ".join(f"{b} {_ms(t)}" for b, t in (r.get("times") or {}).items()),
            str(r.get("winner")),
            str(r.get("why", "")),
        ]
        for r in records
    ]


_CANDIDATE_HEAD = ("candidate", "placement (nodes)", "time", "median", "source", "chosen")
_REGION_HEAD = ("region (of the plain placement)", "end-to-end time with it on", "runs on", "why")
_SEGMENT_HEAD = ("segment (the search's path)", "time alone on", "runs on", "why")


def print_tuning(record: dict[str, Any], console: Console) -> None:
    """The tuning record as a headline and two tables: every candidate, and every region searched."""
    head, candidates, regions, segments = _tuning_tables(record)
    console.print(Text(head))
    table = Table(title="Tuning: candidate placements", title_justify="left")
    for col in _CANDIDATE_HEAD:
        table.add_column(col, justify="right" if col in ("time", "median") else "left")
    for row in candidates:
        table.add_row(*(Text(c) for c in row))
    console.print(table)
    for title, head_row, rows in (("segments", _SEGMENT_HEAD, segments), ("regions", _REGION_HEAD, regions)):
        if rows:
            table = Table(title=f"Tuning: {title}", title_justify="left")
            for col in head_row:
                table.add_column(col)
            for row in rows:
                table.add_row(*(Text(c) for c in row))
            console.print(table)


# --------------------------------------------------------------------------- terminal


def _reason_lines(reasons: list[tuple[str, str]]) -> str:
    return "\n".join(f"{b}: {r}" for b, r in reasons) or "-"


def print_report(report: Report, console: Console, *, verbose: bool = False) -> None:
    """Print the report as tables: partitions per backend, host ops with reasons, timings.

    Host nodes are grouped by (op, reasons) with a count, at most :data:`HOST_ROWS` groups;
    ``verbose`` adds one row per partition and one row per node instead.
    """
    summary = _summary(report)
    console.print(Text(_headline(report, summary)))

    table = Table(title="Partitions per backend", title_justify="left")
    for col in ("backend", "partitions", "nodes", "MACs", "work", "boundary transposes"):
        table.add_column(col, justify="left" if col == "backend" else "right")
    for backend, row in summary["backends"].items():
        table.add_row(
            Text(backend),
            str(row["partitions"]),
            str(row["nodes"]),
            _si(row["macs"]),
            _si(row["work"]),
            str(row["transposes"]),
        )
    table.add_row(HOST, "-", str(summary["host_nodes"]), "-", "-", "-")
    console.print(table)

    if verbose and report.partitions:
        parts = Table(title="Partitions", title_justify="left")
        for col in ("partition", "backend", "nodes", "inputs", "outputs", "MACs", "transposes"):
            parts.add_column(col, justify="right" if col in ("nodes", "MACs", "transposes") else "left")
        for p in report.partitions:
            parts.add_row(
                Text(p.name),
                Text(p.backend),
                str(len(p.nodes)),
                Text(_names(p.inputs, 4)),
                Text(_names(p.outputs, 4)),
                _si(p.macs),
                str(p.transposes),
            )
        console.print(parts)

    if verbose and report.nodes:
        order = _backends(report)
        nodes = Table(title="Nodes", title_justify="left")
        for col in ("node", "op", "backend", "partition", "declined by"):
            nodes.add_column(col)
        for n in report.nodes:
            where = n.partition or "-"
            if n.composite:
                where += f"\n({n.composite})"
            reasons = _ordered_reasons(n, order)
            why = _reason_lines(reasons)
            if n.details:
                why += "".join(f"\n  ({b}: {d})" for b, d in n.details.items())
            nodes.add_row(Text(n.name), Text(n.op), Text(n.backend), Text(where), Text(why))
        console.print(nodes)
    elif not summary["host_nodes"]:
        console.print(Text("No ops left on the host."))
    else:
        groups = _host_groups(report)
        host = Table(title=f"Ops left on the host ({summary['host_nodes']})", title_justify="left")
        host.add_column("op")
        host.add_column("count", justify="right")
        host.add_column("why each backend declined")
        host.add_column("nodes")
        for g in groups[:HOST_ROWS]:
            host.add_row(Text(g.op), str(len(g.names)), Text(_reason_lines(g.reasons)), Text(_names(g.names)))
        console.print(host)
        if len(groups) > HOST_ROWS:
            console.print(Text(f"... {len(groups) - HOST_ROWS} more groups (verbose lists every node)"))

    if report.tuning is not None:
        print_tuning(report.tuning, console)

    if report.timings:
        line = "Timings: " + ", ".join(f"{k} {_seconds(v)}" for k, v in report.timings.items())
        if len(report.timings) > 1 and "total" not in report.timings:
            line += f" (total {_seconds(sum(report.timings.values()))})"
        console.print(Text(line))


# --------------------------------------------------------------------------- layout

_ROW_H = 38  # the height of a layer: a composite's two-line box
_NODE_H = 26
_IO_H = 20
_BEND_W = 8.0
_LAYER_STEP = 76  # room under each box for the shapes of the values leaving it
_GAP = 18
_COL_GAP = 90
_MARGIN = 36
_CHAR_W = 6.6  # average width of an 11px sans-serif character
_SMALL_W = 5.6  # the same at 9.5px (shape labels, a composite's ops)
_MAX_LABEL = 24
#: Width : height the wrapped columns aim for (a landscape screen).
_ASPECT = 1.6


def _clip(s: str, n: int = _MAX_LABEL) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


@dataclass
class _Box:
    """What one box draws: a node, or every node of one composite instance."""

    nodes: list[NodeReport]
    composite: str | None = None
    #: In the overview: the partition this box stands for (all its nodes).
    partition: str | None = None

    @property
    def first(self) -> NodeReport:
        return self.nodes[0]


@dataclass
class _Vertex:
    #: "node", "input", "output", or "bend" (where an edge crosses a layer).
    kind: str
    label: str
    box: _Box | None = None
    #: The second line of a composite's box: its ops.
    sub: str = ""
    preds: list[int] = field(default_factory=list)
    succs: list[int] = field(default_factory=list)
    layer: int = 0
    col: int = 0
    x: float = 0.0  # centre
    y: float = 0.0  # top
    w: float = _BEND_W
    h: float = _NODE_H


@dataclass
class _Drawing:
    verts: list[_Vertex]
    #: Every edge as the vertices it passes through, producer first, consumer last.
    edges: list[list[int]]
    #: The values each (producer, consumer) edge carries.
    values: dict[tuple[int, int], list[str]]
    #: Per column: the y of its first row's top and of its last row's bottom.
    columns: list[tuple[float, float]]
    width: float
    height: float


def _short_op(op: str) -> str:
    return op.removeprefix("nn.").removeprefix("qnn.")


def _boxes(report: Report, overview: bool = False) -> list[_Box]:
    """One box per node, except that the nodes of one composite instance share a box.

    An instance is named by ``composite_root``; a report without it (an older artifact)
    groups connected nodes of the same partition and composite instead. In the ``overview``,
    all the nodes of a partition share one box.
    """
    known = {p.name for p in report.partitions} if overview else set()
    key: list[object] = []
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent.get(i, i) != i:
            parent[i] = parent.get(parent[i], parent[i])
            i = parent[i]
        return i

    producer: dict[str, int] = {}
    for i, n in enumerate(report.nodes):
        if n.composite and n.partition is not None and n.composite_root is None:
            for v in n.inputs:
                j = producer.get(v)
                if j is not None:
                    m = report.nodes[j]
                    if (m.composite, m.partition, m.composite_root) == (n.composite, n.partition, None):
                        parent[find(i)] = find(j)
        for v in n.outputs:
            producer[v] = i
    for i, n in enumerate(report.nodes):
        if n.partition in known:
            key.append(("partition", n.partition))
        elif not n.composite or n.partition is None:
            key.append(i)
        elif n.composite_root is not None:
            key.append((n.partition, n.composite, n.composite_root))
        else:
            key.append((n.partition, n.composite, find(i)))
    boxes: dict[object, _Box] = {}
    for n, k in zip(report.nodes, key):
        box = boxes.get(k)
        if box is None:
            if n.partition in known:
                boxes[k] = _Box([n], partition=n.partition)
            else:
                boxes[k] = _Box([n], n.composite if not isinstance(k, int) else None)
        else:
            box.nodes.append(n)
    return list(boxes.values())


def _build(report: Report, overview: bool = False) -> tuple[list[_Vertex], dict[tuple[int, int], list[str]]]:
    """Vertices for graph inputs, boxes and graph outputs, with producer -> consumer edges and their values."""
    verts: list[_Vertex] = []
    producer: dict[str, int] = {}
    for name in report.graph_inputs:
        producer[name] = len(verts)
        verts.append(_Vertex("input", name))
    consumers: list[tuple[int, list[str]]] = []
    for box in _boxes(report, overview):
        i = len(verts)
        if box.partition is not None:
            verts.append(_Vertex("node", box.partition, box=box, sub=_count_line(box.nodes)))
        elif box.composite is not None:
            sub = " · ".join(_short_op(n.op) for n in box.nodes)
            verts.append(_Vertex("node", box.composite, box=box, sub=sub))
        else:
            verts.append(_Vertex("node", box.first.op, box=box))
        inside = dict.fromkeys(out for n in box.nodes for out in n.outputs)
        consumers.append((i, [name for n in box.nodes for name in n.inputs if name not in inside]))
        for name in inside:
            producer[name] = i
    consumers += [(len(verts) + k, [name]) for k, name in enumerate(report.graph_outputs)]
    verts += [_Vertex("output", name) for name in report.graph_outputs]
    values: dict[tuple[int, int], list[str]] = {}
    for i, inputs in consumers:
        for name in inputs:
            src = producer.get(name)
            if src is None or src == i:
                continue
            carried = values.get((src, i))
            if carried is None:
                values[(src, i)] = [name]
                verts[i].preds.append(src)
                verts[src].succs.append(i)
            elif name not in carried:
                carried.append(name)
    for v in verts:
        if v.kind == "node":
            text_w = max(len(_clip(v.label)) * _CHAR_W, len(_clip(v.sub, 40)) * _SMALL_W)
            v.w, v.h = max(64.0, text_w + 20), (_ROW_H if v.sub else _NODE_H)
        else:
            v.w, v.h = max(40.0, len(_clip(v.label)) * _CHAR_W + 16), _IO_H
    return verts, values


def _topological(verts: list[_Vertex]) -> list[int]:
    """Kahn's order; vertices on a cycle (a malformed report) follow in index order."""
    indeg = [len(v.preds) for v in verts]
    ready = [i for i, d in enumerate(indeg) if d == 0][::-1]
    order: list[int] = []
    while ready:
        i = ready.pop()
        order.append(i)
        for s in reversed(verts[i].succs):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if len(order) < len(verts):
        done = set(order)
        order += [i for i in range(len(verts)) if i not in done]
    return order


def _assign_layers(verts: list[_Vertex]) -> None:
    """Longest path from the sources; a source without inputs sits just above its first consumer."""
    order = _topological(verts)
    placed = [False] * len(verts)
    for i in order:
        v = verts[i]
        v.layer = max((verts[p].layer + 1 for p in v.preds if placed[p]), default=0)
        placed[i] = True
    for i in reversed(order):
        v = verts[i]
        if not v.preds and v.succs and v.kind == "node":
            v.layer = max(0, min(verts[s].layer for s in v.succs) - 1)


def _split_long_edges(verts: list[_Vertex]) -> list[list[int]]:
    """Put a bend vertex on every layer an edge crosses, shortest edges first, within a budget
    linear in the graph size (longer edges stay straight). Rewires preds/succs along the routes."""
    pairs = sorted(
        ((u, s) for u, v in enumerate(verts) for s in v.succs), key=lambda e: verts[e[1]].layer - verts[e[0]].layer
    )
    budget = 2 * len(verts) + 1000
    routes: list[list[int]] = []
    for u, s in pairs:
        lo, hi = verts[u].layer, verts[s].layer
        route = [u]
        if 1 < hi - lo <= min(budget + 1, LONG_EDGE):
            budget -= hi - lo - 1
            for layer in range(lo + 1, hi):
                route.append(len(verts))
                verts.append(_Vertex("bend", "", layer=layer))
        route.append(s)
        routes.append(route)
    for v in verts:
        v.preds, v.succs = [], []
    for route in routes:
        for a, b in pairwise(route):
            verts[a].succs.append(b)
            verts[b].preds.append(a)
    return routes


def _order_layers(verts: list[_Vertex]) -> list[list[int]]:
    """Vertices of each layer, left to right, after barycentre sweeps down and up."""
    layers: list[list[int]] = [[] for _ in range(max((v.layer for v in verts), default=-1) + 1)]
    for i, v in enumerate(verts):
        layers[v.layer].append(i)
    pos = [0.0] * len(verts)

    def index(layer: list[int]) -> None:
        mid = (len(layer) - 1) / 2
        for k, i in enumerate(layer):
            pos[i] = k - mid

    for layer in layers:
        index(layer)
    for sweep in range(4):
        down = sweep % 2 == 0
        for layer in layers[1:] if down else layers[-2::-1]:
            if len(layer) > 1:
                bary = {}
                for i in layer:
                    nb = verts[i].preds if down else verts[i].succs
                    bary[i] = sum(pos[j] for j in nb) / len(nb) if nb else pos[i]
                layer.sort(key=bary.__getitem__)
            index(layer)
    return layers


def _place(verts: list[_Vertex], layers: list[list[int]]) -> None:
    """x: each vertex pulled towards the mean x of its neighbours, keeping the layer's order and gaps."""
    xs = [0.0] * len(verts)

    def gap(a: _Vertex, b: _Vertex) -> float:
        return (a.w + b.w) / 2 + (_GAP / 2 if "bend" in (a.kind, b.kind) else _GAP)

    gaps = [[gap(verts[a], verts[b]) for a, b in pairwise(layer)] for layer in layers]

    def pack(k: int, want: list[float]) -> None:
        # Closest to `want` from the left and from the right, averaged: both keep the gaps, so does the mean.
        g, n = gaps[k], len(want)
        left, right = list(want), list(want)
        for j in range(1, n):
            left[j] = max(left[j], left[j - 1] + g[j - 1])
        for j in range(n - 2, -1, -1):
            right[j] = min(right[j], right[j + 1] - g[j])
        for i, lo, hi in zip(layers[k], left, right):
            xs[i] = (lo + hi) / 2

    for k, layer in enumerate(layers):
        pack(k, [0.0] * len(layer))
    for sweep in range(6):
        down = sweep % 2 == 0
        for k in range(1, len(layers)) if down else range(len(layers) - 2, -1, -1):
            want = []
            for i in layers[k]:
                nb = verts[i].preds if down else verts[i].succs
                want.append(sum(xs[j] for j in nb) / len(nb) if nb else xs[i])
            pack(k, want)
    for i, x in enumerate(xs):
        verts[i].x = x


def _column_breaks(verts: list[_Vertex], layers: list[list[int]]) -> list[int]:
    """The first layer of every column: the layers wrapped into side-by-side columns.

    The number of columns makes the drawing closest to :data:`_ASPECT`; each break moves,
    within a quarter of a column, to where the fewest edges cross between two layers.
    """
    n = len(layers)
    lo = [min((verts[i].x - verts[i].w / 2 for i in layer), default=0.0) for layer in layers]
    hi = [max((verts[i].x + verts[i].w / 2 for i in layer), default=0.0) for layer in layers]
    crossing = [sum(len(verts[i].preds) for i in layer) for layer in layers]
    best, best_score = [0], float("inf")
    most = max(1, n // 6)  # at least six layers in a column
    tries = sorted({min(most, max(1, round(1.12**k))) for k in range(80)})
    for cols in tries:
        per = n / cols
        window = max(1, int(per / 4))
        starts = [0]
        for j in range(1, cols):
            ideal = round(j * per)
            cands = range(max(starts[-1] + 1, ideal - window), min(n - 1, ideal + window) + 1)
            if not cands:
                break
            starts.append(min(cands, key=lambda k: (crossing[k], abs(k - ideal))))
        bounds = [*starts, n]
        width = sum(max(hi[a:b]) - min(lo[a:b]) for a, b in pairwise(bounds)) + _COL_GAP * (len(starts) - 1)
        height = max(b - a for a, b in pairwise(bounds)) * _LAYER_STEP
        score = abs(math.log(max(width, 1.0) / height / _ASPECT))
        if score < best_score:
            best, best_score = starts, score
    return best


def _layout(report: Report, overview: bool = False) -> _Drawing:
    """Longest-path layers top to bottom, barycentre order within layers, bends on long edges;
    the layers are wrapped into columns so that a deep graph is drawn about as wide as tall.
    The ``overview`` draws each partition as one box."""
    verts, values = _build(report, overview)
    _assign_layers(verts)
    edges = _split_long_edges(verts)
    layers = _order_layers(verts)
    _place(verts, layers)
    starts = _column_breaks(verts, layers) if layers else [0]
    bounds = [*starts, len(layers)]
    columns: list[tuple[float, float]] = []
    x0 = float(_MARGIN)
    for col, (a, b) in enumerate(pairwise(bounds)):
        members = [i for layer in layers[a:b] for i in layer]
        left = min(verts[i].x - verts[i].w / 2 for i in members)
        right = max(verts[i].x + verts[i].w / 2 for i in members)
        for k in range(a, b):
            top = _MARGIN + (k - a) * _LAYER_STEP
            for i in layers[k]:
                v = verts[i]
                v.col, v.x, v.y = col, v.x - left + x0, top + (_ROW_H - v.h) / 2
        columns.append((float(_MARGIN), _MARGIN + (b - a - 1) * _LAYER_STEP + _ROW_H))
        x0 += right - left + _COL_GAP
    width = max(x0 - _COL_GAP + _MARGIN, 2 * _MARGIN)
    height = max((bottom for _, bottom in columns), default=0.0) + _MARGIN
    return _Drawing(verts, edges, values, columns, width, height)


# --------------------------------------------------------------------------- HTML

# The page's stylesheet and its script (zoom and pan by wheel, drag and keys, search, collapsing
# partitions; no network, no globals) are files of the package, inlined into every page.
_ASSETS = "report_assets"


@cache
def _asset(name: str) -> str:
    """The text of ``report_assets/<name>``, read once."""
    return resources.files("accel").joinpath(_ASSETS).joinpath(name).read_text(encoding="utf-8")


#: Ids of the page's controls (the script finds them by these).
CONTROL_IDS = ("search", "search-count", "prev", "next", "fit", "zoom-in", "zoom-out", "collapse-all", "expand-all")


def _e(s: object) -> str:
    return html.escape(str(s), quote=True)


def _ink(fill: str) -> str:
    """Black or white text, whichever reads better on ``fill`` (#rrggbb)."""
    r, g, b = (int(fill[k : k + 2], 16) for k in (1, 3, 5))
    return "#1a1a1a" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


def _tooltip(n: NodeReport, order: list[str]) -> str:
    lines = [n.name, f"op: {n.op}", f"backend: {n.backend}", f"partition: {n.partition or '-'}"]
    if n.composite:
        lines.append(f"composite: {n.composite}")
    reasons = _ordered_reasons(n, order)
    if reasons:
        lines.append("declined by:")
        lines += [f"  {b}: {r}" for b, r in reasons]
    return "\n".join(lines)


def _box_tooltip(box: _Box, order: list[str]) -> str:
    if box.composite is None:
        return _tooltip(box.first, order)
    head = [
        f"composite {box.composite} ({len(box.nodes)} nodes)",
        f"backend: {box.first.backend}",
        f"partition: {box.first.partition or '-'}",
    ]
    return "\n".join(head + [f"  {n.name}: {n.op}" for n in box.nodes])


_SHAPE = re.compile(r"(\w+)\[([\d,]*)\]")
_DTYPES = {"float32": "", "float16": "f16 ", "int8": "i8 ", "uint8": "u8 ", "int32": "i32 ", "int64": "i64 "}


def _shape_label(type_text: str) -> str:
    """``float32[1,64,56,56]`` -> ``1×64×56×56``; other dtypes keep a short prefix (``u8 1×8``)."""
    m = _SHAPE.match(type_text)
    if m is None:
        return _clip(type_text, 20)
    dtype, dims = m.groups()
    prefix = _DTYPES.get(dtype, f"{dtype} ")
    return prefix + ("×".join(dims.split(",")) if dims else "scalar")


def _edge_paths(drawing: _Drawing, route: list[int], offset: float) -> tuple[str, str, str]:
    """The edge's line (S-curves between layers, straight through each bend's layer), and its stubs.

    An edge longer than :data:`LONG_EDGE` layers, or the part of an edge that wraps from the bottom of
    one column to the top of the next, is drawn as two short stubs instead: one leaving its producer
    (or the column) and one entering its consumer (``offset`` from the centre, so that the stubs into
    one box stay apart). Returns ``(line, stubs out, stubs in)``, each an SVG path or ``""``.
    """
    verts, cols = drawing.verts, drawing.columns
    line: list[str] = []
    outs: list[str] = []
    ins: list[str] = []
    drawing_line = False
    for a, b in pairwise(route):
        va, vb = verts[a], verts[b]
        if a != route[0]:  # a bend: straight down through its layer
            if not drawing_line:
                line.append(f"M{va.x:.1f},{va.y:.1f}")
            line.append(f"L{va.x:.1f},{va.y + va.h:.1f}")
            drawing_line = True
        x1, y1, x2, y2 = va.x, va.y + va.h, vb.x, vb.y
        if b == route[-1]:
            x2 += offset
        if va.col != vb.col or vb.layer - va.layer > 1:
            wrap = va.col != vb.col and vb.layer - va.layer == 1  # to the next column's first layer
            outs.append(f"M{x1:.1f},{y1:.1f} V{cols[va.col][1] + 14 if wrap else y1 + 14:.1f}")
            ins.append(f"M{x2:.1f},{cols[vb.col][0] - 14 if wrap else y2 - 14:.1f} V{y2:.1f}")
            drawing_line = False
            continue
        if not drawing_line:
            line.append(f"M{x1:.1f},{y1:.1f}")
        dy = max((y2 - y1) / 2, 12)
        line.append(f"C{x1:.1f},{y1 + dy:.1f} {x2:.1f},{y2 - dy:.1f} {x2:.1f},{y2:.1f}")
        drawing_line = True
    return " ".join(line), " ".join(outs), " ".join(ins)


def _node_svg(v: _Vertex, vid: str, colors: dict[str, str], order: list[str], cls: str, target: str = "") -> str:
    """A box: ``cls`` is ``node`` (``node member`` inside a partition's group) in the drawing, ``obox``
    in the overview, where ``target`` is the id of what the box stands for in the drawing."""
    box = v.box
    assert box is not None
    n = box.first
    fill = colors.get(n.backend, HOST_COLOR)
    ink = _ink(fill)
    attrs = f'id="{vid}" data-backend="{_e(n.backend)}"'
    if target:
        attrs += f' data-target="{target}"'
    if box.partition is None:
        attrs += f' data-nodes="{_e(json.dumps([m.name for m in box.nodes], ensure_ascii=False))}"'
        attrs += f' data-ops="{_e(" ".join(m.op for m in box.nodes))}"'
        tip = _box_tooltip(box, order)
    else:
        cls += " pbox"
        attrs += f' data-partition="{_e(box.partition)}"'
        tip = f"partition {box.partition} ({n.backend}), {_count_line(box.nodes)}\nclick to show its nodes"
    if box.composite is not None:
        cls += " composite"
        attrs += f' data-composite="{_e(box.composite)}"'
    if v.sub:
        text = (
            f'<text x="{v.x:.1f}" y="{v.y + 15:.1f}" text-anchor="middle" fill="{ink}">{_e(_clip(v.label))}</text>'
            f'<text class="ops" x="{v.x:.1f}" y="{v.y + 29:.1f}" text-anchor="middle" fill="{ink}">'
            f"{_e(_clip(v.sub, 40))}</text>"
        )
    else:
        text = (
            f'<text x="{v.x:.1f}" y="{v.y + v.h / 2 + 4:.1f}" text-anchor="middle" fill="{ink}">'
            f"{_e(_clip(v.label))}</text>"
        )
    return (
        f'<g class="{cls}" {attrs}><title>{_e(tip)}</title>'
        f'<rect x="{v.x - v.w / 2:.1f}" y="{v.y:.1f}" width="{v.w:.1f}" height="{v.h:.1f}" rx="4" '
        f'fill="{fill}" stroke="rgba(0,0,0,.35)"/>{text}</g>'
    )


def _wrap_words(text: str, width: int, lines: int) -> list[str]:
    """``text`` in at most ``lines`` lines of at most ``width`` characters, the last one clipped."""
    out: list[str] = []
    for word in text.split(" "):
        if out and len(out[-1]) + 1 + len(word) <= width:
            out[-1] += " " + word
        else:
            out.append(word)
    keep = out[: max(lines, 1)]
    if len(out) > len(keep):
        keep[-1] += " …"
    return [_clip(line, width) for line in keep]


def _members(v: _Vertex) -> list[NodeReport]:
    return v.box.nodes if v.box is not None else []


def _op_counts(nodes: list[NodeReport]) -> str:
    counts = Counter(_short_op(n.op) for n in nodes)
    return " · ".join(f"{op} ×{k}" for op, k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _count_line(nodes: list[NodeReport]) -> str:
    """``12 nodes: conv2d ×8 · add ×2 · relu ×2``"""
    return f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}: {_op_counts(nodes)}"


def _edges_svg(report: Report, drawing: _Drawing, prefix: str) -> list[tuple[int, int, str]]:
    """Every edge as ``(producer, consumer, its SVG content)``: the line or the stubs (which lead to
    ``{prefix}{vertex}``), the values' names and types as its tooltip, and the shape of each value
    once under its producer."""
    verts = drawing.verts
    out: list[tuple[int, int, str]] = []
    labelled: set[tuple[int, str]] = set()
    stubs_into: Counter[int] = Counter()
    for route in drawing.edges:
        src, dst = route[0], route[-1]
        carried = drawing.values.get((src, dst), [])
        title = "\n".join(f"{v}: {report.types.get(v, '?')}" for v in carried)
        before = verts[route[-2]]
        stubbed_end = before.col != verts[dst].col or verts[dst].layer - before.layer > 1
        offset = 0.0
        if stubbed_end:
            k = stubs_into[dst]
            stubs_into[dst] += 1
            half = max(verts[dst].w / 2 - 6, 6.0)
            offset = ((k + 1) // 2 * 6.0) % half * (1 if k % 2 else -1)
        line, out_stub, in_stub = _edge_paths(drawing, route, offset)
        arrow = ' marker-end="url(#arrow)"'
        parts = [f"<title>{_e(title)}</title>"]
        if line:
            parts.append(f'<path d="{line}"{"" if stubbed_end else arrow}/>')
        if out_stub:
            parts.append(
                f'<path class="stub" d="{out_stub}" data-go="{prefix}{dst}" marker-end="url(#dot)">'
                f"<title>{_e(f'to {verts[dst].label} (click to go there)')}</title></path>"
            )
            parts.append(
                f'<path class="stub" d="{in_stub}" data-go="{prefix}{src}"{arrow if stubbed_end else ""} '
                f'marker-start="url(#dot)"><title>{_e(f"from {verts[src].label} (click to go there)")}</title></path>'
            )
        producer = verts[src]
        dx = 6.0
        for value in carried:
            if (src, value) in labelled or value not in report.types:
                continue
            labelled.add((src, value))
            label = _shape_label(report.types[value])
            x, y = producer.x + dx, producer.y + producer.h + 12
            parts.append(f'<text class="shape" x="{x:.1f}" y="{y:.1f}">{_e(label)}</text>')
            dx += len(label) * _SMALL_W + 6
        out.append((src, dst, "".join(parts)))
    return out


def _io_svg(v: _Vertex, vid: str) -> str:
    return (
        f'<g class="io {v.kind}" id="{vid}"><title>{_e(f"graph {v.kind}: {v.label}")}</title>'
        f'<ellipse cx="{v.x:.1f}" cy="{v.y + v.h / 2:.1f}" rx="{v.w / 2:.1f}" ry="{v.h / 2:.1f}" '
        f'fill="#ffffff" stroke="#777"/>'
        f'<text x="{v.x:.1f}" y="{v.y + v.h / 2 + 3.5:.1f}" text-anchor="middle">{_e(_clip(v.label))}</text></g>'
    )


def _view(name: str, drawing: _Drawing, body: list[str], hidden: bool = False) -> str:
    w, h = f"{drawing.width:.0f}", f"{drawing.height:.0f}"
    return (
        f'<g class="view" id="{name}-view" data-width="{w}" data-height="{h}" '
        f'data-columns="{len(drawing.columns)}"{" display=" + chr(34) + "none" + chr(34) if hidden else ""}>\n'
        + "\n".join(body)
        + "\n</g>"
    )


def _detail_svg(report: Report, colors: dict[str, str], draw_edges: bool) -> tuple[_Drawing, list[str], dict[str, str]]:
    """The drawing: edges between partitions, then one group per partition (outline, name, inner edges,
    boxes, the box shown when collapsed), then host boxes and graph inputs/outputs. Also returns the
    id of every host node's box."""
    drawing = _layout(report)
    verts = drawing.verts
    order = _backends(report)
    part_of = {i: v.box.first.partition for i, v in enumerate(verts) if v.box is not None}
    known = {p.name for p in report.partitions}

    def group(i: int) -> str | None:
        p = part_of.get(i)
        return p if p in known else None

    out: list[str] = []
    inner: dict[str, list[str]] = {p.name: [] for p in report.partitions}
    for src, dst, content in _edges_svg(report, drawing, "n") if draw_edges else []:
        p_src, p_dst = group(src), group(dst)
        if p_src is not None and p_src == p_dst:
            inner[p_src].append(f'<g class="edge member">{content}</g>')
        else:
            out.append(f'<g class="edge">{content}</g>')

    members: dict[str, list[int]] = {}
    for i in range(len(verts)):
        owner = group(i)
        if owner is not None:
            members.setdefault(owner, []).append(i)
    by_name = {p.name: p for p in report.partitions}
    for k, p in enumerate(report.partitions):
        idx = members.get(p.name)
        if not idx or by_name[p.name] is not p:
            continue
        c = colors.get(p.backend, HOST_COLOR)
        segments: dict[int, list[_Vertex]] = {}
        for i in idx:
            segments.setdefault(verts[i].col, []).append(verts[i])
        rects, summary, label = [], [], ""
        nodes = [n for i in idx for n in _members(verts[i])]
        counts = _count_line(nodes)
        for j, (_col, vs) in enumerate(sorted(segments.items())):
            x0 = min(v.x - v.w / 2 for v in vs) - 8
            x1 = max(v.x + v.w / 2 for v in vs) + 8
            y0 = min(v.y for v in vs) - 17
            y1 = max(v.y + v.h for v in vs) + 8
            geom = f'x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" rx="10"'
            rects.append(
                f'<rect {geom} fill="{c}" fill-opacity="0.10" stroke="{c}" stroke-width="1.5" stroke-dasharray="5 3"/>'
            )
            chars = max(int((x1 - x0 - 16) / _CHAR_W), 8)
            name = p.name if j == 0 else f"{p.name} (continued)"
            lines = _wrap_words(counts, chars, int((y1 - y0 - 22) / 14))
            summary.append(
                f'<rect class="frame" {geom} fill="#ffffff" stroke="{c}" stroke-width="2"/>'
                f'<rect {geom} fill="{c}" fill-opacity="0.25" stroke="none"/>'
                f'<text class="name" x="{x0 + 8:.1f}" y="{y0 + 16:.1f}">{_e(_clip(name, chars))}</text>'
                + "".join(
                    f'<text x="{x0 + 8:.1f}" y="{y0 + 31 + 14 * r:.1f}">{_e(text)}</text>'
                    for r, text in enumerate(lines)
                )
            )
            label += (
                f'<text class="plabel" x="{x0 + 8:.1f}" y="{y0 + 12:.1f}" fill="{c}">{_e(_clip(name, 40))}'
                "<title>click to collapse</title></text>"
            )
        out.append(
            f'<g class="partition" id="p{k}" data-partition="{_e(p.name)}" data-backend="{_e(p.backend)}">'
            f"<title>{_e(f'{p.name} ({p.backend}), {counts}')}</title>"
            f'<g class="outline member">{"".join(rects)}</g>{label}'
        )
        out += inner.get(p.name, [])
        out += [_node_svg(verts[i], f"n{i}", colors, order, "node member") for i in idx]
        out.append(f'<g class="summary"><title>{_e(p.name)}: click to expand</title>{"".join(summary)}</g></g>')

    ids: dict[str, str] = {}
    for i, v in enumerate(verts):
        if v.box is not None and group(i) is None:
            out.append(_node_svg(v, f"n{i}", colors, order, "node"))
            ids[v.box.first.name] = f"n{i}"
        elif v.kind in ("input", "output"):
            out.append(_io_svg(v, f"n{i}"))
    return drawing, out, ids


def _overview_svg(
    report: Report, colors: dict[str, str], draw_edges: bool, targets: dict[str, str]
) -> tuple[_Drawing, list[str]]:
    """Every partition as one box (its node and op counts), laid out like the drawing. A box's
    ``data-target`` is the id of its partition's group, or of the host node's box, in the drawing."""
    drawing = _layout(report, overview=True)
    order = _backends(report)
    group_of = {p.name: f"p{k}" for k, p in reversed(list(enumerate(report.partitions)))}
    out = (
        [f'<g class="oedge">{content}</g>' for _, _, content in _edges_svg(report, drawing, "o")] if draw_edges else []
    )
    for i, v in enumerate(drawing.verts):
        if v.box is not None:
            target = group_of[v.box.partition] if v.box.partition is not None else targets.get(v.box.first.name, "")
            out.append(_node_svg(v, f"o{i}", colors, order, "obox", target))
        elif v.kind in ("input", "output"):
            out.append(_io_svg(v, f"o{i}"))
    return drawing, out


def _svg(report: Report, colors: dict[str, str], draw_edges: bool) -> str:
    """The drawing, and with partitions, the overview (hidden until asked for) in one ``<svg>``."""
    drawing, body, host_ids = _detail_svg(report, colors, draw_edges)
    w, h = f"{drawing.width:.0f}", f"{drawing.height:.0f}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="graph" viewBox="0 0 {w} {h}" data-width="{w}" '
        f'data-height="{h}" data-columns="{len(drawing.columns)}" role="img" aria-label="partitioned graph">',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#8a8a8a"/></marker>'
        '<marker id="dot" viewBox="0 0 6 6" refX="3" refY="3" markerWidth="5" markerHeight="5">'
        '<circle cx="3" cy="3" r="2.4" fill="#ffffff" stroke="#8a8a8a"/></marker></defs>',
        _view("detail", drawing, body),
    ]
    if any(n.partition in {p.name for p in report.partitions} for n in report.nodes):
        overview, obody = _overview_svg(report, colors, draw_edges, host_ids)
        out.append(_view("overview", overview, obody, hidden=True))
    out.append("</svg>")
    return "\n".join(out)


def _toolbar() -> str:
    return (
        '<div class="toolbar">'
        '<input id="search" type="search" placeholder="search a node name, op or partition  ( / )" '
        'aria-label="search">'
        '<span id="search-count"></span>'
        '<button id="prev" title="previous match (shift+enter)">&#9650;</button>'
        '<button id="next" title="next match (enter)">&#9660;</button>'
        '<button id="fit" title="whole graph (0)">fit</button>'
        '<button id="zoom-in" title="zoom in (+)">+</button>'
        '<button id="zoom-out" title="zoom out (-)">&#8722;</button>'
        '<button id="collapse-all" title="every partition as one box, drawn compactly">collapse partitions</button>'
        '<button id="expand-all" title="every node">expand partitions</button>'
        "</div>"
    )


_HINT = (
    "Wheel or +/- zooms, drag or the arrow keys pan, 0 fits the whole graph. Click a partition's name "
    "to collapse it in place into one box with its op counts (click the box to expand it); 'collapse "
    "partitions' redraws the graph with every partition as one box (click one to see its nodes). Enter "
    "in the search field steps through the matches. Hover a box for its nodes and reasons, an edge for "
    "its values; click a stub to go to the other end of its edge."
)


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], classes: dict[int, str] | None = None) -> str:
    """An HTML table; cells are already-escaped HTML, ``classes`` maps a column index to its CSS class."""
    classes = classes or {}
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        cells = (f'<td class="{classes[k]}">{c}</td>' if k in classes else f"<td>{c}</td>" for k, c in enumerate(row))
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _swatch(color: str) -> str:
    return f'<span class="swatch" style="background:{color}"></span>'


def report_to_html(report: Report, title: str) -> str:
    """One self-contained HTML page: legend, graph drawing (inline SVG and script), partition and host tables.

    Each node is a box labelled with its op and filled with its backend's colour (grey on the host);
    the nodes of one composite instance share one box labelled with the composite and its ops. Every
    box has a ``<title>`` tooltip: names, backend, partition, composite and every backend's reason to
    decline the node. Edges carry the shapes of their values. A partition is one ``<g>``: a dashed
    outline named at its top-left corner, its boxes and inner edges, and the box shown when it is
    collapsed (its op counts). Deep graphs wrap into columns. A small inline script (no network)
    zooms and pans (wheel, drag, keys), searches node names, ops and partitions, and collapses
    partitions. Above :data:`EDGE_LIMIT` nodes the edges are left out, above :data:`DRAW_LIMIT` the drawing.
    """
    summary = _summary(report)
    colors = backend_colors(report)
    order = _backends(report)
    legend = "".join(f"<span>{_swatch(c)}{_e(b)}</span>" for b, c in colors.items())
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="headline">{_e(_headline(report, summary))}</p>',
        f'<div class="legend">{legend}</div>',
    ]

    n_nodes = len(report.nodes)
    script = False
    if n_nodes > DRAW_LIMIT:
        body.append(f'<p class="note">The drawing is omitted: {n_nodes} nodes (more than {DRAW_LIMIT}).</p>')
    elif n_nodes or report.graph_inputs or report.graph_outputs:
        if n_nodes > EDGE_LIMIT:
            body.append(f'<p class="note">Edges are omitted: {n_nodes} nodes (more than {EDGE_LIMIT}).</p>')
        body.append(_toolbar())
        body.append(
            f'<div class="drawing" id="drawing" tabindex="0">{_svg(report, colors, n_nodes <= EDGE_LIMIT)}</div>'
        )
        body.append(f'<p class="hint">{_e(_HINT)}</p>')
        script = True
    else:
        body.append('<p class="note">The graph is empty.</p>')

    body.append("<h2>Partitions</h2>")
    if report.partitions:
        rows = (
            [
                _e(p.name),
                _swatch(colors.get(p.backend, HOST_COLOR)) + _e(p.backend),
                str(len(p.nodes)),
                _e(_names(p.inputs, 6)),
                _e(_names(p.outputs, 6)),
                _si(p.macs),
                _si(p.work),
                str(p.transposes),
            ]
            for p in report.partitions
        )
        head = ("partition", "backend", "nodes", "inputs", "outputs", "MACs", "work", "boundary transposes")
        body.append(_table(head, rows, dict.fromkeys((2, 5, 6, 7), "num")))
    else:
        body.append('<p class="note">No partitions: every node runs on the host.</p>')

    body.append(f"<h2>Nodes on the host ({summary['host_nodes']})</h2>")
    host = report.host_nodes()
    if host:
        rows = ([_e(n.name), _e(n.op), _e(_reason_lines(_ordered_reasons(n, order)))] for n in host)
        body.append(_table(("node", "op", "why each backend declined"), rows, {2: "reasons"}))
    else:
        body.append('<p class="note">No ops left on the host.</p>')

    if report.tuning is not None:
        headline, candidates, regions, segments = _tuning_tables(report.tuning)
        body.append("<h2>Tuning</h2>")
        body.append(f'<p class="note">{_e(headline)}</p>')
        body.append(_table(_CANDIDATE_HEAD, ([_e(c) for c in row] for row in candidates), {2: "num", 3: "num"}))
        if segments:
            body.append(_table(_SEGMENT_HEAD, ([_e(c) for c in row] for row in segments)))
        if regions:
            body.append(_table(_REGION_HEAD, ([_e(c) for c in row] for row in regions)))

    if report.timings:
        body.append("<h2>Timings</h2>")
        body.append(
            _table(("stage", "time"), ([_e(k), _e(_seconds(v))] for k, v in report.timings.items()), {1: "num"})
        )
    if script:
        body.append(f"<script>\n{_asset('report.js')}</script>")

    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_e(title)}</title>\n<style>\n{_asset('report.css')}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
