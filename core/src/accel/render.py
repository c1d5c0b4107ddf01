"""Three views of a :class:`~accel.report.Report`: JSON, terminal tables, an HTML drawing.

- :func:`report_to_json` is what ``accel inspect --format json`` prints: plain
  JSON types, keys in a fixed order, and ``Report.from_json`` reads it back.
- :func:`print_report` is what ``accel compile`` and ``accel inspect`` print:
  partitions per backend, the ops left on the host grouped by (op, reasons),
  timings. Plain text when the console is not a terminal.
- :func:`report_to_html` is one self-contained page (inline CSS and SVG, no
  script): the graph laid out top to bottom, coloured by backend, with the
  partition and host tables under it.

Every string that comes from the model (node, value, partition names, reasons)
is escaped: rich markup is never parsed from it and HTML is always escaped.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from accel.report import HOST, NodeReport, Report

#: Above this many nodes the drawing has no edges (the layout still follows them).
EDGE_LIMIT = 3000
#: Above this many nodes the HTML page has no drawing, only the tables.
DRAW_LIMIT = 10000
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
    rank = {b: i for i, b in enumerate(order)}
    return sorted(node.reasons.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))


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

    ``{"target", "nodes", "partitions", "summary", "timings", "graph_inputs", "graph_outputs"}``;
    each node is ``{"name", "op", "backend", "partition", "composite", "reasons", "inputs", "outputs"}``,
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
                "reasons": dict(_ordered_reasons(n, order)),
                "inputs": list(n.inputs),
                "outputs": list(n.outputs),
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
    }


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
            nodes.add_row(Text(n.name), Text(n.op), Text(n.backend), Text(where), Text(_reason_lines(reasons)))
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

    if report.timings:
        line = "Timings: " + ", ".join(f"{k} {_seconds(v)}" for k, v in report.timings.items())
        if len(report.timings) > 1 and "total" not in report.timings:
            line += f" (total {_seconds(sum(report.timings.values()))})"
        console.print(Text(line))


# --------------------------------------------------------------------------- layout

_NODE_H = 26
_IO_H = 20
_BEND_W = 8.0
_LAYER_STEP = 64
_GAP = 18
_MARGIN = 30
_CHAR_W = 6.6  # average width of an 11px sans-serif character
_MAX_LABEL = 24


def _clip(s: str, n: int = _MAX_LABEL) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


@dataclass
class _Vertex:
    #: "node", "input", "output", or "bend" (where an edge crosses a layer).
    kind: str
    label: str
    node: NodeReport | None = None
    preds: list[int] = field(default_factory=list)
    succs: list[int] = field(default_factory=list)
    layer: int = 0
    x: float = 0.0  # centre
    y: float = 0.0  # top
    w: float = _BEND_W
    h: float = _NODE_H


@dataclass
class _Drawing:
    verts: list[_Vertex]
    #: Every edge as the vertices it passes through, producer first, consumer last.
    edges: list[list[int]]
    width: float
    height: float


def _build(report: Report) -> list[_Vertex]:
    """Vertices for graph inputs, nodes and graph outputs, with producer -> consumer edges."""
    verts: list[_Vertex] = []
    producer: dict[str, int] = {}
    for name in report.graph_inputs:
        producer[name] = len(verts)
        verts.append(_Vertex("input", name))
    first_node = len(verts)
    for n in report.nodes:
        for out in n.outputs:
            producer[out] = len(verts)
        verts.append(_Vertex("node", n.op, node=n))
    consumers = [(i, n.inputs) for i, n in enumerate(report.nodes, first_node)]
    consumers += [(len(verts) + k, [name]) for k, name in enumerate(report.graph_outputs)]
    verts += [_Vertex("output", name) for name in report.graph_outputs]
    for i, inputs in consumers:
        for src in dict.fromkeys(producer[v] for v in inputs if v in producer):
            if src != i:
                verts[i].preds.append(src)
                verts[src].succs.append(i)
    for v in verts:
        text_w = len(_clip(v.label)) * _CHAR_W
        v.w, v.h = (max(64.0, text_w + 20), _NODE_H) if v.kind == "node" else (max(40.0, text_w + 16), _IO_H)
    return verts


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
        if 1 < hi - lo <= budget + 1:
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
    for k, layer in enumerate(layers):
        for i in layer:
            v = verts[i]
            v.x, v.y = xs[i], _MARGIN + k * _LAYER_STEP + (_NODE_H - v.h) / 2


def _layout(report: Report) -> _Drawing:
    """Longest-path layers top to bottom, barycentre order within layers, bends on long edges."""
    verts = _build(report)
    _assign_layers(verts)
    edges = _split_long_edges(verts)
    layers = _order_layers(verts)
    _place(verts, layers)
    shift = _MARGIN - min((v.x - v.w / 2 for v in verts), default=0.0)
    for v in verts:
        v.x += shift
    width = max((v.x + v.w / 2 for v in verts), default=0.0) + _MARGIN
    height = 2 * _MARGIN + max(len(layers) - 1, 0) * _LAYER_STEP + _NODE_H
    return _Drawing(verts, edges, width, height)


# --------------------------------------------------------------------------- HTML

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
       margin: 24px 32px; background: #fafafa; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.headline { color: #555; margin: 0 0 12px; }
.legend span { display: inline-block; margin-right: 18px; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 3px; vertical-align: -1px;
          margin-right: 6px; border: 1px solid rgba(0,0,0,.25); }
.drawing svg { display: block; margin: 0 auto; }
.drawing { overflow: auto; max-height: 80vh; border: 1px solid #ddd; border-radius: 6px; background: #fff;
           margin-top: 10px; }
.note { color: #666; font-style: italic; }
table { border-collapse: collapse; background: #fff; }
th, td { border: 1px solid #ddd; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.reasons { white-space: pre-line; color: #444; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; }
svg .node text { font-size: 11px; pointer-events: none; }
svg .io text { font-size: 10px; fill: #444; }
svg .partition text { font-size: 10px; font-weight: 600; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
svg .edge { fill: none; stroke: #8a8a8a; stroke-width: 1.1; }
"""


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


def _edge_path(verts: list[_Vertex], route: list[int]) -> str:
    """A smooth path: vertical through each bend's layer, S-curves between layers."""
    first = verts[route[0]]
    points = [(first.x, first.y + first.h)]
    for i in route[1:-1]:
        b = verts[i]
        points += [(b.x, b.y), (b.x, b.y + b.h)]
    last = verts[route[-1]]
    points.append((last.x, last.y))
    d = [f"M{points[0][0]:.1f},{points[0][1]:.1f}"]
    for k in range(1, len(points)):
        (x1, y1), (x2, y2) = points[k - 1], points[k]
        if k % 2 == 0:  # inside a bend's layer: straight down
            d.append(f"L{x2:.1f},{y2:.1f}")
        else:
            dy = max((y2 - y1) / 2, 12)
            d.append(f"C{x1:.1f},{y1 + dy:.1f} {x2:.1f},{y2 - dy:.1f} {x2:.1f},{y2:.1f}")
    return " ".join(d)


def _svg(report: Report, colors: dict[str, str], draw_edges: bool) -> str:
    drawing = _layout(report)
    verts = drawing.verts
    order = _backends(report)
    w, h = f"{drawing.width:.0f}", f"{drawing.height:.0f}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#8a8a8a"/></marker></defs>',
    ]

    # Partitions: a rounded outline around their nodes, behind everything else.
    where = {v.node.name: v for v in verts if v.node is not None}
    for p in report.partitions:
        members = [where[name] for name in p.nodes if name in where]
        if not members:
            continue
        x0 = min(v.x - v.w / 2 for v in members) - 8
        x1 = max(v.x + v.w / 2 for v in members) + 8
        y0 = min(v.y for v in members) - 17
        y1 = max(v.y + v.h for v in members) + 8
        c = colors.get(p.backend, HOST_COLOR)
        out.append(
            f'<g class="partition"><rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" '
            f'rx="10" fill="{c}" fill-opacity="0.10" stroke="{c}" stroke-width="1.5" stroke-dasharray="5 3"/>'
            f'<text x="{x0 + 8:.1f}" y="{y0 + 12:.1f}" fill="{c}">{_e(_clip(p.name, 40))}</text>'
            f"<title>{_e(f'{p.name} ({p.backend}, {len(p.nodes)} nodes)')}</title></g>"
        )

    if draw_edges:
        out += [f'<path class="edge" d="{_edge_path(verts, r)}" marker-end="url(#arrow)"/>' for r in drawing.edges]

    for v in verts:
        label = _e(_clip(v.label))
        if v.kind in ("input", "output"):
            out.append(
                f'<g class="io {v.kind}"><title>{_e(f"graph {v.kind}: {v.label}")}</title>'
                f'<ellipse cx="{v.x:.1f}" cy="{v.y + v.h / 2:.1f}" rx="{v.w / 2:.1f}" ry="{v.h / 2:.1f}" '
                f'fill="#ffffff" stroke="#777"/>'
                f'<text x="{v.x:.1f}" y="{v.y + v.h / 2 + 3.5:.1f}" text-anchor="middle">{label}</text></g>'
            )
        elif v.node is not None:
            n = v.node
            fill = colors.get(n.backend, HOST_COLOR)
            out.append(
                f'<g class="node" data-backend="{_e(n.backend)}"><title>{_e(_tooltip(n, order))}</title>'
                f'<rect x="{v.x - v.w / 2:.1f}" y="{v.y:.1f}" width="{v.w:.1f}" height="{v.h:.1f}" rx="4" '
                f'fill="{fill}" stroke="rgba(0,0,0,.35)"/>'
                f'<text x="{v.x:.1f}" y="{v.y + v.h / 2 + 4:.1f}" text-anchor="middle" fill="{_ink(fill)}">'
                f"{label}</text></g>"
            )
    out.append("</svg>")
    return "\n".join(out)


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
    """One self-contained HTML page: legend, graph drawing (inline SVG), partition and host tables.

    Each node is a box labelled with its op and filled with its backend's colour (grey on the host),
    with a ``<title>`` tooltip: name, backend, partition, composite and every backend's reason to
    decline it. Partitions are dashed rounded outlines named at their top-left corner. Above
    :data:`EDGE_LIMIT` nodes the edges are left out, above :data:`DRAW_LIMIT` the drawing.
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
    if n_nodes > DRAW_LIMIT:
        body.append(f'<p class="note">The drawing is omitted: {n_nodes} nodes (more than {DRAW_LIMIT}).</p>')
    elif n_nodes or report.graph_inputs or report.graph_outputs:
        if n_nodes > EDGE_LIMIT:
            body.append(f'<p class="note">Edges are omitted: {n_nodes} nodes (more than {EDGE_LIMIT}).</p>')
        body.append(f'<div class="drawing">{_svg(report, colors, n_nodes <= EDGE_LIMIT)}</div>')
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

    if report.timings:
        body.append("<h2>Timings</h2>")
        body.append(
            _table(("stage", "time"), ([_e(k), _e(_seconds(v))] for k, v in report.timings.items()), {1: "num"})
        )

    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
