"""The three views of a partition report: JSON, terminal tables, HTML drawing.

The HTML page is checked by its structure everywhere, and its script in headless chromium where
chromium is installed (set ``ACCEL_REQUIRE_BROWSER=1`` to make a missing chromium a failure).
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from importlib import resources
from itertools import pairwise

import pytest
from rich.console import Console

import accel
from accel import render
from accel.backend import Backend, PatternEntry
from accel.partition import partition_graph
from accel.pattern import is_constant, is_op, wildcard
from accel.render import backend_colors, print_report, report_to_html, report_to_json
from accel.report import HOST, NodeReport, PartitionReport, Report
from accel.testing import modelgen

EVIL = "<script>alert(1)</script>"
SVG = "{http://www.w3.org/2000/svg}"


def _node(name, op, backend, inputs, outputs, partition=None, composite=None, reasons=None):
    return NodeReport(name, op, backend, partition, composite, dict(reasons or {}), list(inputs), list(outputs))


def sample() -> Report:
    """A small branching graph over two backends and the host."""
    nodes = [
        _node("conv1", "qnn.conv2d", "ethosn", ["x", "w1"], ["c1"], "ethosn_0", "ethosn.qnn_conv2d"),
        _node("req1", "qnn.requantize", "ethosn", ["c1"], ["r1"], "ethosn_0", "ethosn.qnn_conv2d"),
        _node("conv2a", "qnn.conv2d", "ethosn", ["r1", "w2"], ["c2"], "ethosn_0"),
        _node("conv2b", "qnn.conv2d", "acl", ["r1"], ["c3"], "acl_0", reasons={"ethosn": "stride size=3, must = 2"}),
        _node("add", "qnn.add", "ethosn", ["c2", "c3"], ["a"], "ethosn_1"),
        _node("pool", "nn.max_pool2d", "ethosn", ["a"], ["p"], "ethosn_1"),
        _node("flatten", "reshape", HOST, ["p"], ["f"], reasons={"ethosn": "no MACs", "acl": "no MACs"}),
        _node(EVIL, "nn.dense", "acl", ["f", "wd"], ["d"], "acl_1", reasons={"ethosn": "float32 [not] supported"}),
        _node("softmax", "nn.softmax", HOST, ["d"], ["y"], reasons={"acl": "no softmax", "ethosn": "no softmax"}),
        _node("argmax", "argmax", HOST, ["d"], ["z"], reasons={"ethosn": "no argmax", "acl": "no argmax"}),
    ]
    partitions = [
        PartitionReport(
            "ethosn_0", "ethosn", ["conv1", "req1", "conv2a"], ["x"], ["r1", "c2"], 1_200_000, 1_300_000, 1
        ),
        PartitionReport("acl_0", "acl", ["conv2b"], ["r1"], ["c3"], 800_000, 820_000, 2),
        PartitionReport("ethosn_1", "ethosn", ["add", "pool"], ["c2", "c3"], ["p"], 0, 40_000, 0),
        PartitionReport("acl_1", "acl", [EVIL], ["f"], ["d"], 10_000, 10_010, 0),
    ]
    types = {v: "uint8[1,8,8,16] q(scale=0.1, zp=3)" for v in ("x", "c1", "r1", "c2", "c3", "a")}
    types.update(p="uint8[1,4,4,16]", f="uint8[1,256]", d="float32[1,10]", y="float32[1,10]", z="int64[1]")
    timings = {"partition": 0.0123, "serialize": 0.004}
    return Report(["ethosn", "acl"], nodes, partitions, ["x"], ["y", "z"], timings, types)


# Producer -> consumer edges of sample(), graph input and outputs included.
SAMPLE_EDGES = {
    ("x", "conv1"),
    ("conv1", "req1"),
    ("req1", "conv2a"),
    ("req1", "conv2b"),
    ("conv2a", "add"),
    ("conv2b", "add"),
    ("add", "pool"),
    ("pool", "flatten"),
    ("flatten", EVIL),
    (EVIL, "softmax"),
    (EVIL, "argmax"),
    ("softmax", "y"),
    ("argmax", "z"),
}


def chain(n: int) -> Report:
    nodes = [_node(f"n{i}", "nn.relu", HOST, [f"v{i}"], [f"v{i + 1}"], reasons={"acl": "fp16"}) for i in range(n)]
    return Report(["acl"], nodes, [], ["v0"], [f"v{n}"])


# --------------------------------------------------------------------------- JSON


def test_json_shape_and_key_order():
    doc = report_to_json(sample())
    assert list(doc) == [
        "target",
        "nodes",
        "partitions",
        "summary",
        "timings",
        "graph_inputs",
        "graph_outputs",
        "types",
    ]
    assert list(doc["nodes"][0]) == [
        "name",
        "op",
        "backend",
        "partition",
        "composite",
        "composite_root",
        "reasons",
        "inputs",
        "outputs",
    ]
    assert list(doc["partitions"][0]) == ["name", "backend", "nodes", "inputs", "outputs", "macs", "work", "transposes"]
    assert json.loads(json.dumps(doc)) == doc
    assert doc["target"] == ["ethosn", "acl"]
    assert doc["nodes"][0]["composite"] == "ethosn.qnn_conv2d"
    assert doc["nodes"][3]["reasons"] == {"ethosn": "stride size=3, must = 2"}
    assert doc["partitions"][1] == {
        "name": "acl_0",
        "backend": "acl",
        "nodes": ["conv2b"],
        "inputs": ["r1"],
        "outputs": ["c3"],
        "macs": 800_000,
        "work": 820_000,
        "transposes": 2,
    }
    assert doc["timings"] == {"partition": 0.0123, "serialize": 0.004}


def test_json_summary_counts_per_backend_and_host_ops():
    summary = report_to_json(sample())["summary"]
    assert summary["nodes"] == 10
    assert summary["partitions"] == 4
    assert summary["offloaded_nodes"] == 7
    assert summary["host_nodes"] == 3
    assert list(summary["backends"]) == ["ethosn", "acl"]
    assert summary["backends"]["ethosn"] == {
        "partitions": 2,
        "nodes": 5,
        "macs": 1_200_000,
        "work": 1_340_000,
        "transposes": 1,
    }
    assert summary["backends"]["acl"] == {
        "partitions": 2,
        "nodes": 2,
        "macs": 810_000,
        "work": 830_010,
        "transposes": 2,
    }
    assert summary["host_ops"] == {"argmax": 1, "nn.softmax": 1, "reshape": 1}


def test_json_reasons_follow_target_order():
    doc = report_to_json(sample())
    softmax = next(n for n in doc["nodes"] if n["name"] == "softmax")
    assert list(softmax["reasons"]) == ["ethosn", "acl"]  # given as acl, ethosn


def test_json_round_trips_through_report_from_json():
    report = sample()
    assert Report.from_json(json.loads(json.dumps(report_to_json(report)))) == report


def test_report_to_json_is_its_fields_copied():
    """Report.to_json (what artifacts store) is dataclasses.asdict with nodes and partitions by
    column, shares no list or dict, and reads back; from_json reads a dict per node too."""
    from dataclasses import asdict

    report = sample()
    report.timings["partition"] = 0.5
    report.types["x"] = "float32[1]"
    doc = report.to_json()
    rows = asdict(report)
    for key in ("nodes", "partitions"):
        assert [dict(zip(doc[key], row)) for row in zip(*doc[key].values())] == rows[key]
    assert {k: v for k, v in doc.items() if k not in ("nodes", "partitions")} == {
        k: v for k, v in rows.items() if k not in ("nodes", "partitions")
    }
    assert Report.from_json(doc) == report == Report.from_json(rows)
    doc["nodes"]["inputs"][0].append("extra")
    doc["nodes"]["reasons"][0]["extra"] = "?"
    doc["partitions"]["nodes"][0].append("extra")
    doc["target"].append("extra")
    assert report.to_json() != doc and asdict(report) == rows
    empty = Report([], [], []).to_json()
    assert empty["nodes"]["name"] == [] and Report.from_json(empty) == Report([], [], [])
    # without copies (what an artifact encodes at once): the same document, holding the report's own lists
    shared = report.to_json(copy=False)
    assert shared == report.to_json()
    assert shared["nodes"]["inputs"][0] is report.nodes[0].inputs and shared["types"] is report.types


def test_json_of_an_empty_report():
    doc = report_to_json(Report([], [], []))
    assert doc["nodes"] == [] and doc["partitions"] == [] and doc["timings"] == {}
    assert doc["summary"] == {
        "nodes": 0,
        "partitions": 0,
        "offloaded_nodes": 0,
        "host_nodes": 0,
        "backends": {},
        "host_ops": {},
    }


# --------------------------------------------------------------------------- terminal


def _text(report: Report, **kwargs) -> str:
    console = Console(record=True, width=120, file=io.StringIO())
    print_report(report, console, **kwargs)
    return console.export_text()


def _rows(text: str) -> list[list[str]]:
    """The cells of every table row in rich's output."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.count("│") >= 2]


def test_text_partitions_per_backend():
    text = _text(sample())
    rows = _rows(text)
    assert ["ethosn", "2", "5", "1.2M", "1.34M", "1"] in rows
    assert ["acl", "2", "2", "810k", "830k", "2"] in rows
    assert ["host", "-", "3", "-", "-", "-"] in rows
    assert "10 nodes: 7 offloaded in 4 partitions, 3 on the host" in text


def test_text_host_ops_with_reasons():
    rows = _rows(_text(sample()))
    assert ["nn.softmax", "1", "ethosn: no softmax", "softmax"] in rows
    assert ["", "", "acl: no softmax", ""] in rows  # the second reason, on its own line
    assert ["reshape", "1", "ethosn: no MACs", "flatten"] in rows


def test_text_groups_identical_host_rows():
    nodes = [_node(f"r{i}", "nn.relu", HOST, [], [], reasons={"acl": "fp16 unsupported"}) for i in range(1000)]
    nodes.append(_node("odd", "nn.relu", HOST, [], [], reasons={"acl": "rank 5"}))
    text = _text(Report(["acl"], nodes, []))
    rows = _rows(text)
    assert ["nn.relu", "1000", "acl: fp16 unsupported", "r0, r1, r2, +997 more"] in rows
    assert ["nn.relu", "1", "acl: rank 5", "odd"] in rows
    assert len(text.splitlines()) < 30


def test_text_caps_the_number_of_groups():
    nodes = [_node(f"r{i}", f"op{i:03d}", HOST, [], []) for i in range(render.HOST_ROWS + 5)]
    text = _text(Report([], nodes, []))
    assert "5 more groups" in text
    assert "op000" in text and f"op{render.HOST_ROWS - 1:03d}" in text and f"op{render.HOST_ROWS:03d}" not in text


def test_text_verbose_lists_every_node_and_partition():
    report = sample()
    text = _text(report, verbose=True)
    for n in report.nodes:
        assert n.name in text
    for p in report.partitions:
        assert p.name in text
    rows = _rows(text)
    assert ["conv2b", "qnn.conv2d", "acl", "acl_0", "ethosn: stride size=3, must = 2"] in rows
    assert ["", "", "", "(ethosn.qnn_conv2d)", ""] in rows


def test_text_never_reads_markup_from_the_model():
    nodes = [_node("[bold]x[/bold]", "[red]op", HOST, [], [], reasons={"acl": "dtype [int64] unsupported"})]
    report = Report(["acl"], nodes, [])
    assert "[red]op" in _text(report)
    text = _text(report, verbose=True)
    assert "[bold]x[/bold]" in text and "dtype [int64] unsupported" in text


def test_text_timings():
    assert "Timings: partition 12.3 ms, serialize 4.0 ms (total 16.3 ms)" in _text(sample())


def test_text_without_partitions_or_host_ops():
    assert "No ops left on the host." in _text(Report([], [], []))
    offloaded = Report(
        ["acl"], [_node("a", "nn.relu", "acl", [], [], "acl_0")], [PartitionReport("acl_0", "acl", ["a"], [], [], 0, 1)]
    )
    assert "No ops left on the host." in _text(offloaded)
    rows = _rows(_text(chain(4)))
    assert ["acl", "0", "0", "0", "0", "0"] in rows
    assert ["host", "-", "4", "-", "-", "-"] in rows


def test_text_on_a_console_that_is_not_a_terminal():
    buf = io.StringIO()
    print_report(sample(), Console(file=buf, width=80), verbose=True)
    out = buf.getvalue()
    assert "\x1b[" not in out  # no colour codes in CI logs
    assert "ethosn_0" in out and "softmax" in out


# --------------------------------------------------------------------------- HTML


class _Balance(HTMLParser):
    """Checks that every non-void element is closed in order."""

    VOID = frozenset({"meta", "br", "img", "input", "link", "hr"})

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()


def _balanced(page: str) -> None:
    parser = _Balance()
    parser.feed(page)
    parser.close()
    assert parser.stack == []


def _svg(page: str) -> ET.Element:
    match = re.search(r"<svg\b.*?</svg>", page, re.S)
    assert match, "no drawing"
    return ET.fromstring(match.group(0))


def _cls(el: ET.Element) -> list[str]:
    return el.get("class", "").split()


def _groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if cls in _cls(g)]


def _box_nodes(g: ET.Element) -> list[str]:
    return json.loads(g.get("data-nodes"))


def _node_boxes(svg: ET.Element) -> dict[str, ET.Element]:
    """Node name -> the <rect> of the box drawing it."""
    return {name: g.find(f"{SVG}rect") for g in _groups(svg, "node") for name in _box_nodes(g)}


def _rect(el: ET.Element) -> tuple[float, float, float, float]:
    return tuple(float(el.get(k)) for k in ("x", "y", "width", "height"))  # type: ignore[return-value]


def _edges(svg: ET.Element) -> list[ET.Element]:
    return _groups(svg, "edge")


def _view(svg: ET.Element, name: str) -> ET.Element:
    (view,) = [g for g in svg.iter(f"{SVG}g") if g.get("id") == f"{name}-view"]
    return view


def _check_drawing(report: Report, page: str) -> ET.Element:
    """What every drawing must satisfy: each node in exactly one box, one group per partition holding
    its boxes, composites as one box, edges labelled with shapes, ids unique and every reference resolved."""
    _balanced(page)
    svg = _svg(page)
    names = [name for g in _groups(svg, "node") for name in _box_nodes(g)]
    assert sorted(names) == sorted(n.name for n in report.nodes)  # each node drawn once
    ids = [el.get("id") for el in svg.iter() if el.get("id")]
    assert len(ids) == len(set(ids))
    for el in svg.iter():
        if el.get("data-go"):
            assert el.get("data-go") in ids
    # one group per partition, holding exactly the boxes of its nodes, plus its collapsed summary
    parts = _groups(svg, "partition")
    drawn = {p.name for p in report.partitions if any(n.partition == p.name for n in report.nodes)}
    assert sorted(g.get("data-partition") for g in parts) == sorted(drawn)
    of = {n.name: n for n in report.nodes}
    for g in parts:
        inside = [name for b in _groups(g, "node") for name in _box_nodes(b)]
        assert sorted(inside) == sorted(n for n in names if of[n].partition == g.get("data-partition"))
        (summary,) = _groups(g, "summary")
        assert re.search(r"\d+ nodes?: ", _svg_text(summary))
    # a composite instance is one box with its label; other boxes hold one node
    for g in _groups(svg, "node"):
        members = [of[name] for name in _box_nodes(g)]
        if "composite" in _cls(g):
            assert {m.composite for m in members} == {g.get("data-composite")}
            assert len({m.partition for m in members}) == 1
            assert g.find(f"{SVG}text").text == _clip(g.get("data-composite"))
        else:
            assert len(members) == 1
    # every edge with a known value type is labelled with its shape once per producer
    for e in _edges(svg):
        for line in e.find(f"{SVG}title").text.splitlines():
            assert re.fullmatch(r".+: .+", line)
    return svg


def _svg_text(el: ET.Element) -> str:
    """The text of an SVG element, its <text> lines joined by spaces."""
    return " ".join(" ".join(t.itertext()) for t in el.iter(f"{SVG}text"))


def _clip(s: str) -> str:
    return render._clip(s)


def test_html_is_self_contained_and_balanced():
    page = report_to_html(sample(), "demo")
    _balanced(page)
    assert page.startswith("<!DOCTYPE html>")
    assert "<link" not in page and "@import" not in page and not re.search(r"\bsrc\s*=", page)
    assert re.findall(r"https?://[^\"']+", page) == ["http://www.w3.org/2000/svg"]
    assert not re.search(r"\b(fetch|XMLHttpRequest|import\(|WebSocket)\b", page)
    assert set(re.findall(r"url\([^)]*\)", page)) <= {"url(#arrow)", "url(#dot)"}
    assert page.count("<script") == 1 and "<script>" in page


def test_html_script_refers_only_to_elements_of_the_page():
    page = report_to_html(sample(), "demo")
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    wanted = set(re.findall(r'getElementById\("([^"]+)"\)', script))
    assert wanted == {"drawing", "graph", "detail-view", "overview-view", *render.CONTROL_IDS}
    for ident in wanted:
        assert len(re.findall(rf'\bid="{re.escape(ident)}"', page)) == 1, ident
    # the script's features: wheel zoom, drag pan, keys, search, collapse
    for needle in ('"wheel"', '"pointerdown"', '"keydown"', '"input"', "collapsed", "viewBox"):
        assert needle in script
    # every class the script queries is in the drawing
    svg = _svg(page)
    for cls in ("node", "partition", "summary", "plabel"):
        assert any(cls in _cls(el) for el in svg.iter()), cls


def test_html_inlines_the_stylesheet_and_script_shipped_in_the_package():
    assets = resources.files("accel").joinpath("report_assets")
    css = assets.joinpath("report.css").read_text(encoding="utf-8")
    script = assets.joinpath("report.js").read_text(encoding="utf-8")
    assert ".drawing svg" in css and "svg .partition.collapsed" in css
    assert '"use strict"' in script and "</script" not in script and "</style" not in css
    page = report_to_html(sample(), "demo")
    assert f"<style>\n{css}</style>" in page
    assert f"<script>\n{script}</script>" in page
    # an empty graph has nothing to zoom or search: the stylesheet without the script
    empty = report_to_html(Report([], [], []), "empty")
    assert css in empty and "<script" not in empty


def test_html_escapes_every_string_from_the_model():
    report = sample()
    page = report_to_html(report, "model <v2> & co")
    assert EVIL not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<title>model &lt;v2&gt; &amp; co</title>" in page
    assert "float32 [not] supported" in page
    assert EVIL in _node_boxes(_svg(page))
    # quotes, ampersands and non-ASCII survive the attributes the search reads
    odd = 'conv "1" & é'
    page = report_to_html(Report([], [_node(odd, "nn.relu", HOST, ["x"], ["y"])], [], ["x"], ["y"]), "odd")
    assert odd in _node_boxes(_svg(page)) and "é" in page


def test_html_one_tooltip_per_box_with_backend_partition_composite_and_reasons():
    report = sample()
    svg = _check_drawing(report, report_to_html(report, "demo"))
    tips = {}
    for g in _groups(svg, "node"):
        titles = g.findall(f"{SVG}title")
        assert len(titles) == 1
        for name in _box_nodes(g):
            tips[name] = titles[0].text
    assert set(tips) == {n.name for n in report.nodes}
    for n in report.nodes:
        tip = tips[n.name]
        assert f"backend: {n.backend}" in tip and f"partition: {n.partition or '-'}" in tip
        if n.composite:
            assert f"composite {n.composite}" in tip and f"{n.name}: {n.op}" in tip
        else:
            assert tip.startswith(n.name + "\n") and f"op: {n.op}" in tip
        for backend, reason in n.reasons.items():
            assert f"{backend}: {reason}" in tip


def test_html_a_composite_instance_is_one_box_with_its_label_and_ops():
    svg = _svg(report_to_html(sample(), "demo"))
    (box,) = _groups(svg, "composite")
    assert _box_nodes(box) == ["conv1", "req1"]
    assert [t.text for t in box.findall(f"{SVG}text")] == ["ethosn.qnn_conv2d", "conv2d · requantize"]
    assert len(_groups(svg, "node")) == len(sample().nodes) - 1


def _conv_chain(roots: bool) -> Report:
    """Two back-to-back instances of one composite (conv -> relu) in one partition, then a third alone."""
    nodes, value = [], "x"
    for k in range(3):
        for op in ("nn.conv2d", "nn.relu"):
            name = f"{op[3:]}{k}"
            part = "npu_0" if k < 2 else "npu_1"
            nodes.append(_node(name, op, "npu", [value], [name + "_out"], part, "npu.conv_relu"))
            nodes[-1].composite_root = f"conv2d{k}" if roots else None
            value = name + "_out"
        if k == 1:
            nodes.append(_node("pool", "nn.max_pool2d", HOST, [value], ["pool_out"]))
            value = "pool_out"
    parts = [
        PartitionReport("npu_0", "npu", [n.name for n in nodes if n.partition == "npu_0"], ["x"], [], 0, 0),
        PartitionReport("npu_1", "npu", [n.name for n in nodes if n.partition == "npu_1"], [], [], 0, 0),
    ]
    return Report(["npu"], nodes, parts, ["x"], [value])


def test_html_composite_instances_are_told_apart_by_their_root():
    report = _conv_chain(roots=True)
    svg = _check_drawing(report, report_to_html(report, "convs"))
    assert [_box_nodes(g) for g in _groups(svg, "composite")] == [
        ["conv2d0", "relu0"],
        ["conv2d1", "relu1"],
        ["conv2d2", "relu2"],
    ]
    # Without roots (an older report), connected nodes of one composite and partition share a box.
    report = _conv_chain(roots=False)
    svg = _check_drawing(report, report_to_html(report, "convs"))
    assert [_box_nodes(g) for g in _groups(svg, "composite")] == [
        ["conv2d0", "relu0", "conv2d1", "relu1"],
        ["conv2d2", "relu2"],
    ]


def test_html_colours_per_backend_with_a_legend():
    report = sample()
    colors = backend_colors(report)
    assert list(colors) == ["ethosn", "acl", HOST]
    assert len(set(colors.values())) == 3
    page = report_to_html(report, "demo")
    legend = re.search(r'<div class="legend">(.*?)</div>', page, re.S).group(1)
    for backend, color in colors.items():
        assert f"background:{color}" in legend and backend in legend
    backend_of = {n.name: n.backend for n in report.nodes}
    for name, rect in _node_boxes(_svg(page)).items():
        assert rect.get("fill") == colors[backend_of[name]]


def test_html_draws_edges_and_io_ellipses_top_to_bottom():
    page = report_to_html(sample(), "demo")
    svg = _svg(page)
    # conv1 -> req1 is inside the composite's box
    assert len(_edges(svg)) == len(SAMPLE_EDGES) - 1
    tops = {name: _rect(r)[1] for name, r in _node_boxes(svg).items()}
    for g in _groups(svg, "io"):
        e = g.find(f"{SVG}ellipse")
        tops[g.find(f"{SVG}title").text.split(": ", 1)[1]] = float(e.get("cy")) - float(e.get("ry"))
    assert {g.find(f"{SVG}title").text for g in _groups(svg, "io")} == {
        "graph input: x",
        "graph output: y",
        "graph output: z",
    }
    for src, dst in SAMPLE_EDGES:
        assert tops[src] <= tops[dst], (src, dst)
        if (src, dst) != ("conv1", "req1"):
            assert tops[src] < tops[dst], (src, dst)


def test_html_edges_carry_the_shapes_of_their_values():
    report = sample()
    svg = _svg(report_to_html(report, "demo"))
    titles = {e.find(f"{SVG}title").text for e in _edges(svg)}
    assert "r1: uint8[1,8,8,16] q(scale=0.1, zp=3)" in titles  # req1 -> conv2a and req1 -> conv2b
    assert "d: float32[1,10]" in titles
    labels = [t.text for e in _edges(svg) for t in e.iter(f"{SVG}text") if "shape" in _cls(t)]
    # one label per value and producer (r1 and d feed two boxes each; c1 stays inside the composite):
    # x, r1, c2, c3, a; then p, f, d, y, z
    assert sorted(labels) == sorted(["u8 1×8×8×16"] * 5 + ["u8 1×4×4×16", "u8 1×256", "1×10", "1×10", "i64 1"])
    # a report without types (an older artifact) draws no labels
    bare = sample()
    bare.types = {}
    assert not [t for t in _svg(report_to_html(bare, "demo")).iter(f"{SVG}text") if "shape" in _cls(t)]


def test_html_shape_labels():
    assert render._shape_label("float32[1,64,56,56]") == "1×64×56×56"
    assert render._shape_label("uint8[1,8] q(scale=0.1, zp=0)") == "u8 1×8"
    assert render._shape_label("float32[]") == "scalar"
    assert render._shape_label("bfloat16[2,3]") == "bfloat16 2×3"


def test_html_partitions_are_groups_outlining_their_boxes():
    report = sample()
    svg = _check_drawing(report, report_to_html(report, "demo"))
    colors = backend_colors(report)
    parts = _groups(svg, "partition")
    assert [g.get("data-partition") for g in parts] == [p.name for p in report.partitions]
    for p, g in zip(report.partitions, parts):
        labels = [t.text for t in g.iter(f"{SVG}text") if "plabel" in _cls(t)]
        assert labels == [p.name]
        (outline,) = _groups(g, "outline")
        rects = [_rect(r) for r in outline.iter(f"{SVG}rect")]
        assert all(r.get("stroke") == colors[p.backend] for r in outline.iter(f"{SVG}rect"))
        for box in _groups(g, "node"):
            bx, by, bw, bh = _rect(box.find(f"{SVG}rect"))
            assert any(ox <= bx and bx + bw <= ox + ow and oy <= by and by + bh <= oy + oh for ox, oy, ow, oh in rects)
        # collapsed, the partition shows one box per outline segment with its op counts
        (summary,) = _groups(g, "summary")
        frames = [_rect(r) for r in summary.iter(f"{SVG}rect") if "frame" in _cls(r)]
        assert frames == rects
        assert f"{len(p.nodes)} node{'s' if len(p.nodes) > 1 else ''}: " in _svg_text(summary)
    text = _svg_text(_groups(parts[0], "summary")[0])
    assert "conv2d ×2" in text and "requantize ×1" in text


def test_html_overview_draws_each_partition_as_one_box():
    report = sample()
    svg = _check_drawing(report, report_to_html(report, "demo"))
    overview = _view(svg, "overview")
    assert overview.get("display") == "none" and _view(svg, "detail").get("display") is None
    boxes = _groups(overview, "obox")
    assert not _groups(overview, "node") and not _groups(overview, "partition")
    groups = {g.get("data-partition"): g.get("id") for g in _groups(svg, "partition")}
    pboxes = {g.get("data-partition"): g for g in boxes if "pbox" in _cls(g)}
    assert set(pboxes) == {p.name for p in report.partitions}
    for name, g in pboxes.items():
        assert g.get("data-target") == groups[name]
    texts = [t.text for t in pboxes["ethosn_0"].iter(f"{SVG}text")]
    assert texts == ["ethosn_0", "3 nodes: conv2d ×2 · requantize ×1"]
    # a host node keeps its own box, which leads to its box in the drawing
    detail_boxes = {g.get("id"): _box_nodes(g) for g in _groups(svg, "node")}
    host = {_box_nodes(g)[0]: g.get("data-target") for g in boxes if "pbox" not in _cls(g)}
    assert set(host) == {n.name for n in report.host_nodes()}
    for name, target in host.items():
        assert detail_boxes[target] == [name]
    # edges between the boxes: x -> ethosn_0 -> acl_0, both -> ethosn_1 -> flatten -> acl_1 -> softmax, argmax
    # -> y, z
    assert len(_groups(overview, "oedge")) == 10
    # without partitions there is nothing to collapse
    assert not [g for g in _svg(report_to_html(chain(5), "chain")).iter(f"{SVG}g") if g.get("id") == "overview-view"]


def test_html_boxes_of_a_layer_do_not_overlap():
    fan = [_node(f"b{i}", "nn.conv2d", "acl" if i % 2 else HOST, ["x"], [f"v{i}"]) for i in range(12)]
    fan.append(_node("cat", "concatenate", HOST, [f"v{i}" for i in range(12)], ["y"]))
    svg = _svg(report_to_html(Report(["acl"], fan, [], ["x"], ["y"]), "fan"))
    layer = [r for name, r in _node_boxes(svg).items() if name.startswith("b")]
    assert len({r.get("y") for r in layer}) == 1  # the twelve branches share a layer
    rects = sorted((float(r.get("x")), float(r.get("width"))) for r in layer)
    for (x0, w0), (x1, _) in pairwise(rects):
        assert x0 + w0 < x1


def _columns(svg: ET.Element) -> list[list[tuple[float, float, float, float]]]:
    """Boxes grouped into columns by x overlap, each column top to bottom."""
    rects = sorted((_rect(r) for r in _node_boxes(svg).values()), key=lambda r: r[0])
    cols: list[list[tuple[float, float, float, float]]] = []
    right = -1.0
    for r in rects:
        if r[0] > right + render._GAP:
            cols.append([])
        cols[-1].append(r)
        right = max(right, r[0] + r[2])
    return [sorted(c, key=lambda r: r[1]) for c in cols]


def test_html_deep_graphs_wrap_into_columns():
    report = chain(600)
    page = report_to_html(report, "chain")
    svg = _check_drawing(report, page)
    width, height = float(svg.get("data-width")), float(svg.get("data-height"))
    assert 0.5 < width / height < 4  # not one 600-box column
    cols = _columns(svg)
    assert len(cols) > 5
    assert sum(len(c) for c in cols) == 600
    for col in cols:
        for a, b in pairwise(col):
            assert a[1] + a[3] < b[1]  # a column reads top to bottom
    # the chain continues from the bottom of one column at the top of the next: stubs that lead there
    stubs = [p for e in _edges(svg) for p in e.iter(f"{SVG}path") if "stub" in _cls(p)]
    assert len(stubs) == 2 * (len(cols) - 1)
    ids = {g.get("id"): g for g in _groups(svg, "node")}
    for stub in stubs:
        assert stub.get("data-go") in ids


def test_html_long_edges_are_drawn_as_stubs():
    # x feeds the first and the last node of a chain longer than LONG_EDGE
    n = render.LONG_EDGE + 4
    nodes = [_node(f"n{i}", "nn.relu", HOST, [f"v{i}"], [f"v{i + 1}"]) for i in range(n)]
    nodes.append(_node("add", "add", HOST, [f"v{n}", "v1"], ["y"]))
    svg = _svg(report_to_html(Report([], nodes, [], ["v0"], ["y"]), "skip"))
    long = [e for e in _edges(svg) if e.find(f"{SVG}title").text.startswith("v1:")]
    assert len(long) == 2  # n0 -> n1 and n0 -> add
    stubbed = [e for e in long if e.findall(f"{SVG}path[@class='stub']")]
    assert len(stubbed) == 1
    out_stub, in_stub = stubbed[0].findall(f"{SVG}path[@class='stub']")
    ids = {g.get("id"): _box_nodes(g)[0] for g in _groups(svg, "node")}
    assert ids[out_stub.get("data-go")] == "add" and ids[in_stub.get("data-go")] == "n0"


def test_html_tables_under_the_drawing():
    page = report_to_html(sample(), "demo")
    body = page[page.index("</svg>") :]
    for p in ("ethosn_0", "acl_0", "ethosn_1", "acl_1"):
        assert f"<td>{p}</td>" in body
    assert "<td>softmax</td><td>nn.softmax</td>" in body
    assert "ethosn: no softmax\nacl: no softmax" in body
    assert "<td>partition</td>" in body and "12.3 ms" in body


def test_html_of_an_empty_report():
    page = report_to_html(Report([], [], []), "empty")
    _balanced(page)
    assert "<svg" not in page and "<script" not in page
    assert "The graph is empty" in page and "No partitions" in page and "No ops left on the host" in page


def test_html_of_a_3000_node_chain():
    report = chain(3000)
    page = report_to_html(report, "chain")
    svg = _check_drawing(report, page)
    assert len(_groups(svg, "node")) == 3000
    assert len(_edges(svg)) == 3001
    assert len(re.findall(r"<td>nn\.relu</td>", page)) == 3000


def test_html_large_graphs_lose_edges_then_the_drawing(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(render, "EDGE_LIMIT", 10)
    page = report_to_html(chain(20), "chain")
    svg = _svg(page)
    assert len(_groups(svg, "node")) == 20
    assert not _edges(svg)
    assert "Edges are omitted: 20 nodes" in page
    monkeypatch.setattr(render, "DRAW_LIMIT", 15)
    page = report_to_html(chain(20), "chain")
    assert "<svg" not in page and "<script" not in page and "The drawing is omitted: 20 nodes" in page
    assert len(re.findall(r"<td>nn\.relu</td>", page)) == 20


def test_html_tolerates_a_malformed_report():
    # A cycle, a dangling input and a partition naming an unknown node still give a drawing.
    nodes = [_node("a", "add", HOST, ["b_out", "ghost"], ["a_out"]), _node("b", "add", HOST, ["a_out"], ["b_out"])]
    report = Report([], nodes, [PartitionReport("p", "acl", ["nope"], [], [], 0, 0)])
    svg = _svg(report_to_html(report, "odd"))
    assert set(_node_boxes(svg)) == {"a", "b"}


# --------------------------------------------------------------------------- real networks


class _Convs(Backend):
    """NCHW float backend: conv2d -> bias_add? -> relu? composites, relu, add and pools."""

    name = "convs"
    layout = "NCHW"

    def pattern_table(self):
        conv = is_op("nn.conv2d")(wildcard(), is_constant())
        conv = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
        conv = conv.optional(lambda x: is_op("nn.relu")(x))
        return [PatternEntry("conv2d", conv, lambda match: None)]

    def op_checks(self):
        return dict.fromkeys(("nn.relu", "add", "nn.max_pool2d", "nn.avg_pool2d"), lambda node: None)


@pytest.fixture(scope="module", params=["resnet50", "densenet121"])
def network(request) -> tuple[str, Report]:
    """A ResNet-50- or DenseNet-121-shaped model (64x64 input), partitioned for _Convs."""
    model = getattr(modelgen, request.param)(64, num_classes=10)
    return request.param, partition_graph(accel.import_onnx(model), [_Convs()], materialize=False).report


def test_html_of_real_networks(network):
    name, report = network
    page = report_to_html(report, name)
    svg = _check_drawing(report, page)
    boxes = _groups(svg, "node")
    instances = {(n.partition, n.composite_root) for n in report.nodes if n.composite_root}
    assert len(_groups(svg, "composite")) == len(instances) > 50
    sizes = Counter((n.partition, n.composite_root) for n in report.nodes if n.composite_root)
    assert len(boxes) == len(report.nodes) - sum(k - 1 for k in sizes.values())
    # drawn about as wide as tall (DenseNet-121 was one 222 x 42,966 px column), boxes apart
    width, height = float(svg.get("data-width")), float(svg.get("data-height"))
    assert 0.6 < width / height < 3.5, (width, height)
    rects = sorted(_rect(g.find(f"{SVG}rect")) for g in boxes)
    for k, (x, y, w, h) in enumerate(rects):
        for x2, y2, w2, h2 in rects[k + 1 :]:
            if x2 >= x + w:
                break
            assert y + h <= y2 or y2 + h2 <= y, ((x, y, w, h), (x2, y2, w2, h2))
    # every value between two boxes is named with its type on its edges, and labelled once with its shape
    carried = {line.split(": ")[0] for e in _edges(svg) for line in e.find(f"{SVG}title").text.splitlines()}
    labels = [t.text for t in _view(svg, "detail").iter(f"{SVG}text") if "shape" in _cls(t)]
    assert len(labels) == len(carried)
    assert all(re.fullmatch(r"1×\d+(×\d+×\d+)?", label) for label in labels)
    # the overview: one box per partition and host node, drawn smaller
    overview = _view(svg, "overview")
    host = len(report.host_nodes())
    assert len(_groups(overview, "obox")) == len(report.partitions) + host
    area = float(overview.get("data-width")) * float(overview.get("data-height"))
    assert area < width * height * (0.9 if name == "densenet121" else 0.1)  # DenseNet has 124 host nodes
    if name == "densenet121":
        # each Concat reads every earlier feature map of its block: the far ones arrive as stubs
        stubs = [p for e in _edges(svg) for p in e.iter(f"{SVG}path") if "stub" in _cls(p)]
        assert len(stubs) > 200
        assert len(_groups(svg, "partition")) == len(report.partitions) > 50
    else:
        # one partition across several columns: an outline per column
        (part,) = _groups(svg, "partition")
        segments = len(list(_groups(part, "outline")[0].iter(f"{SVG}rect")))
        assert segments > 2
        labels = [t.text for t in part.iter(f"{SVG}text") if "plabel" in _cls(t)]
        assert labels == [report.partitions[0].name] + [f"{report.partitions[0].name} (continued)"] * (segments - 1)


def test_html_renders_10000_nodes():
    # a smoke check of the size limits (the time is measured in docs/cli.md, not asserted)
    report = chain(10_000)
    svg = _svg(report_to_html(report, "big"))
    assert len(_groups(svg, "node")) == 10_000 and len(_edges(svg)) == 10_001


# --------------------------------------------------------------------------- in a browser

_CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)

_PROBE = """
(function () {
  var out = {}, svg = document.getElementById("graph");
  try {
  function vb() { return svg.getAttribute("viewBox").split(" ").map(Number); }
  var r = svg.getBoundingClientRect();
  out.box = [r.width, r.height]; out.fit = vb();
  var input = document.getElementById("search");
  input.value = "CONCAT"; input.dispatchEvent(new Event("input"));
  out.count = document.getElementById("search-count").textContent;
  out.matches = svg.querySelectorAll("g.node.match").length;
  out.dimmed = getComputedStyle(svg.querySelector("g.node:not(.match)")).opacity;
  input.dispatchEvent(new KeyboardEvent("keydown", {key: "Enter"}));
  input.dispatchEvent(new KeyboardEvent("keydown", {key: "Enter"}));
  var hits = svg.querySelectorAll("g.node.match"), current = svg.querySelector("g.current");
  out.current = current ? current.id : null;
  out.secondMatch = hits.length > 1 ? hits[1].id : null;
  out.afterSearch = vb();
  svg.dispatchEvent(new WheelEvent("wheel", {deltaY: -500, clientX: r.left + 10, clientY: r.top + 10,
                                             cancelable: true}));
  out.afterWheel = vb();
  window.dispatchEvent(new Event("resize"));
  out.afterResize = vb();
  document.getElementById("drawing").dispatchEvent(new KeyboardEvent("keydown", {key: "0"}));
  out.afterFit = vb();
  document.getElementById("drawing").dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowRight"}));
  out.afterArrow = vb();
  var p = svg.querySelectorAll("g.partition")[1] || svg.querySelector("g.partition");
  p.querySelector(".plabel").dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.collapsed = svg.querySelectorAll("g.partition.collapsed").length;
  out.member = getComputedStyle(p.querySelector(".node.member")).display;
  out.summary = getComputedStyle(p.querySelector(".summary")).display;
  p.querySelector(".summary").dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.expandedOne = !p.classList.contains("collapsed");
  var detail = document.getElementById("detail-view"), overview = document.getElementById("overview-view");
  document.getElementById("collapse-all").click();
  out.overviewShown = overview.getAttribute("display") === null && detail.getAttribute("display") === "none";
  out.overviewView = vb();
  var pbox = overview.querySelector('g.obox[data-partition="' + p.getAttribute("data-partition") + '"]');
  out.pboxVisible = getComputedStyle(pbox).display !== "none" && pbox.getBBox().width > 0;
  pbox.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.detailShown = detail.getAttribute("display") === null && overview.getAttribute("display") === "none";
  var b = p.getBBox(), v = vb();
  out.partitionCentred = Math.abs(b.x + b.width / 2 - (v[0] + v[2] / 2)) < 1 && Math.abs(b.y + b.height / 2 - (v[1] + v[3] / 2)) < 1;
  document.getElementById("collapse-all").click();
  document.getElementById("expand-all").click();
  out.afterExpandAll = vb();
  var stub = detail.querySelector("path.stub");
  stub.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.stubTarget = stub.getAttribute("data-go");
  out.afterStub = svg.querySelector("g.current").id;
  } catch (e) { out.error = String(e); }
  var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""


@pytest.fixture
def chromium() -> str:
    if _CHROMIUM is None:
        if os.environ.get("ACCEL_REQUIRE_BROWSER"):
            pytest.fail("ACCEL_REQUIRE_BROWSER is set but no chromium is installed")
        pytest.skip("no chromium: the page's behaviour is not checked in a browser (its structure is, above)")
    return _CHROMIUM


def test_html_in_a_browser(chromium, tmp_path, network):
    """Load the page in headless chromium, then search, zoom, pan, collapse and follow a stub from script."""
    name, report = network
    page = report_to_html(report, name).replace("</body>", f"<script>{_PROBE}</script></body>")
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    run = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1400,900",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    match = re.search(r'<pre id="probe">(.*?)</pre>', run.stdout, re.S)
    assert match, run.stderr[-2000:]
    out = json.loads(html.unescape(match.group(1)))
    assert "error" not in out, out
    svg = _svg(report_to_html(report, name))
    width, height = float(svg.get("data-width")), float(svg.get("data-height"))
    # fitted: the whole drawing in view, the view as wide as the box
    x, y, w, h = out["fit"]
    assert w / h == pytest.approx(out["box"][0] / out["box"][1], rel=1e-3)
    assert x <= 0 and y <= 0 and x + w >= width - 1 and y + h >= height - 1
    assert min(w / width, h / height) == pytest.approx(1, rel=1e-3)
    # search is case-insensitive over names and ops; Enter steps through the matches and centres them
    concat = [g for g in _groups(svg, "node") if "concat" in (g.get("data-nodes") + g.get("data-ops")).lower()]
    assert out["matches"] == len(concat) and out["count"] == (f"{len(concat)} found" if concat else "no match")
    if concat:
        assert float(out["dimmed"]) < 1
        assert out["current"] == out["secondMatch"]
        assert out["afterSearch"][2] <= out["box"][0] + 1  # at least 1:1
    # the wheel zooms in, 0 fits again, an arrow pans
    assert out["afterWheel"][2] < out["fit"][2]
    assert out["afterResize"] == pytest.approx(out["afterWheel"])  # a resize keeps the zoom
    assert out["afterFit"] == pytest.approx(out["fit"])
    assert out["afterArrow"][0] > out["fit"][0]
    # a partition's name collapses it in place (its boxes hidden, its summary shown); the summary expands it
    assert out["collapsed"] == 1
    assert out["member"] == "none" and out["summary"] != "none"
    assert out["expandedOne"]
    # "collapse partitions" shows the overview, fitted; a partition's box there leads back to its nodes
    assert out["overviewShown"] and out["pboxVisible"] and out["detailShown"] and out["partitionCentred"]
    overview = _view(svg, "overview")
    ow, oh = float(overview.get("data-width")), float(overview.get("data-height"))
    assert min(out["overviewView"][2] / ow, out["overviewView"][3] / oh) == pytest.approx(1, rel=1e-3)
    assert out["afterExpandAll"] == pytest.approx(out["fit"])
    # a stub takes you to the other end of its edge
    assert out["afterStub"] == out["stubTarget"]
