"""The three views of a partition report: JSON, terminal tables, HTML drawing."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from itertools import pairwise

import pytest
from rich.console import Console

from accel import render
from accel.render import backend_colors, print_report, report_to_html, report_to_json
from accel.report import HOST, NodeReport, PartitionReport, Report

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
    return Report(["ethosn", "acl"], nodes, partitions, ["x"], ["y", "z"], {"partition": 0.0123, "serialize": 0.004})


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
    assert list(doc) == ["target", "nodes", "partitions", "summary", "timings", "graph_inputs", "graph_outputs"]
    assert list(doc["nodes"][0]) == ["name", "op", "backend", "partition", "composite", "reasons", "inputs", "outputs"]
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


def _groups(svg: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in svg.iter(f"{SVG}g") if cls in g.get("class", "").split()]


def _node_boxes(svg: ET.Element) -> dict[str, ET.Element]:
    """Node name (first line of its tooltip) -> its <rect>."""
    return {g.find(f"{SVG}title").text.split("\n")[0]: g.find(f"{SVG}rect") for g in _groups(svg, "node")}


def test_html_is_self_contained_and_balanced():
    page = report_to_html(sample(), "demo")
    _balanced(page)
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert re.findall(r"https?://[^\"']+", page) == ["http://www.w3.org/2000/svg"]
    assert set(re.findall(r"url\([^)]*\)", page)) == {"url(#arrow)"}


def test_html_escapes_every_string_from_the_model():
    report = sample()
    page = report_to_html(report, "model <v2> & co")
    assert EVIL not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<title>model &lt;v2&gt; &amp; co</title>" in page
    assert "float32 [not] supported" in page
    assert EVIL in _node_boxes(_svg(page))


def test_html_one_tooltip_per_node_with_backend_partition_composite_and_reasons():
    report = sample()
    svg = _svg(report_to_html(report, "demo"))
    groups = _groups(svg, "node")
    assert len(groups) == len(report.nodes)
    tips = {}
    for g in groups:
        titles = g.findall(f"{SVG}title")
        assert len(titles) == 1
        tips[titles[0].text.split("\n")[0]] = titles[0].text
    assert set(tips) == {n.name for n in report.nodes}
    for n in report.nodes:
        tip = tips[n.name]
        assert f"op: {n.op}" in tip and f"backend: {n.backend}" in tip
        assert f"partition: {n.partition or '-'}" in tip
        if n.composite:
            assert f"composite: {n.composite}" in tip
        for backend, reason in n.reasons.items():
            assert f"{backend}: {reason}" in tip
    assert "composite: ethosn.qnn_conv2d" in tips["req1"]


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
    assert len([p for p in svg.iter(f"{SVG}path") if p.get("class") == "edge"]) == len(SAMPLE_EDGES)
    tops = {name: float(r.get("y")) for name, r in _node_boxes(svg).items()}
    for g in _groups(svg, "io"):
        e = g.find(f"{SVG}ellipse")
        tops[g.find(f"{SVG}title").text.split(": ", 1)[1]] = float(e.get("cy")) - float(e.get("ry"))
    assert {g.find(f"{SVG}title").text for g in _groups(svg, "io")} == {
        "graph input: x",
        "graph output: y",
        "graph output: z",
    }
    for src, dst in SAMPLE_EDGES:
        assert tops[src] < tops[dst], (src, dst)


def test_html_partitions_outline_their_nodes():
    report = sample()
    svg = _svg(report_to_html(report, "demo"))
    boxes = _node_boxes(svg)
    outlines = _groups(svg, "partition")
    assert [g.find(f"{SVG}text").text for g in outlines] == [p.name for p in report.partitions]
    for p, g in zip(report.partitions, outlines):
        o = {k: float(g.find(f"{SVG}rect").get(k)) for k in ("x", "y", "width", "height")}
        assert g.find(f"{SVG}rect").get("stroke") == backend_colors(report)[p.backend]
        for name in p.nodes:
            r = {k: float(boxes[name].get(k)) for k in ("x", "y", "width", "height")}
            assert o["x"] <= r["x"] and r["x"] + r["width"] <= o["x"] + o["width"]
            assert o["y"] <= r["y"] and r["y"] + r["height"] <= o["y"] + o["height"]


def test_html_boxes_of_a_layer_do_not_overlap():
    fan = [_node(f"b{i}", "nn.conv2d", "acl" if i % 2 else HOST, ["x"], [f"v{i}"]) for i in range(12)]
    fan.append(_node("cat", "concatenate", HOST, [f"v{i}" for i in range(12)], ["y"]))
    svg = _svg(report_to_html(Report(["acl"], fan, [], ["x"], ["y"]), "fan"))
    layer = [r for name, r in _node_boxes(svg).items() if name.startswith("b")]
    assert len({r.get("y") for r in layer}) == 1  # the twelve branches share a layer
    rects = sorted((float(r.get("x")), float(r.get("width"))) for r in layer)
    for (x0, w0), (x1, _) in pairwise(rects):
        assert x0 + w0 < x1


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
    assert "<svg" not in page
    assert "The graph is empty" in page and "No partitions" in page and "No ops left on the host" in page


def test_html_of_a_3000_node_chain():
    report = chain(3000)
    page = report_to_html(report, "chain")
    _balanced(page)
    svg = _svg(page)
    assert len(_groups(svg, "node")) == 3000
    assert len([p for p in svg.iter(f"{SVG}path") if p.get("class") == "edge"]) == 3001
    assert len(re.findall(r"<td>nn\.relu</td>", page)) == 3000


def test_html_large_graphs_lose_edges_then_the_drawing(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(render, "EDGE_LIMIT", 10)
    page = report_to_html(chain(20), "chain")
    svg = _svg(page)
    assert len(_groups(svg, "node")) == 20
    assert not [p for p in svg.iter(f"{SVG}path") if p.get("class") == "edge"]
    assert "Edges are omitted: 20 nodes" in page
    monkeypatch.setattr(render, "DRAW_LIMIT", 15)
    page = report_to_html(chain(20), "chain")
    assert "<svg" not in page and "The drawing is omitted: 20 nodes" in page
    assert len(re.findall(r"<td>nn\.relu</td>", page)) == 20


def test_html_tolerates_a_malformed_report():
    # A cycle, a dangling input and a partition naming an unknown node still give a drawing.
    nodes = [_node("a", "add", HOST, ["b_out", "ghost"], ["a_out"]), _node("b", "add", HOST, ["a_out"], ["b_out"])]
    report = Report([], nodes, [PartitionReport("p", "acl", ["nope"], [], [], 0, 0)])
    svg = _svg(report_to_html(report, "odd"))
    assert set(_node_boxes(svg)) == {"a", "b"}
