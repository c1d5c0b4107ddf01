"""Edge conversions (Backend.edge_ops): host nodes a backend's runtime converts itself, at its partitions' edges only."""

from __future__ import annotations

from test_partition import NhwcConv, _conv, _report_only_equals_the_build, _same_results, _x

from accel.backend import Backend
from accel.partition import partition_graph
from accel.report import HOST


def _float32_only(node):
    return None if node.inputs[0].type.dtype == "float32" else "float32 only"


class Edges(NhwcConv):
    """NHWC, the convolution composite and pools on its device; sigmoid and layout transposes
    (and tanh, which it refuses) as conversions its runtime does at a partition's edge."""

    name = "edges"

    def edge_ops(self):
        return {
            "sigmoid": lambda node: None,
            "tanh": lambda node: "tanh: this runtime has no such conversion",
            "transpose": _float32_only,
        }


class Sigmoids(Backend):
    """Takes sigmoid as an op of its own device."""

    name = "sigmoids"
    layout = "NCHW"

    def op_checks(self):
        return {"sigmoid": lambda node: None}


def _where(result) -> dict[str, tuple[str, str | None]]:
    return {n.op: (n.backend, n.reasons.get(n.backend)) for n in result.report.nodes}


def test_an_input_conversion_goes_into_the_partition_with_its_layout_transpose():
    b = _x()
    y = _conv(b, b.op("sigmoid", b.x["x"]), 4, 8)
    g = b.done(b.op("abs", y))
    r = partition_graph(g, [Edges()])
    backend, note = _where(r)["sigmoid"]
    assert backend == "edges"
    assert note == "an edge conversion: edges's runtime runs it on the CPU, at its partition's input"
    (region,) = r.regions
    # the graph input comes in NCHW: the region transposes it (a transpose edge), then the sigmoid
    assert [n.op for n in region.body.nodes][:2] == ["transpose", "sigmoid"]
    assert [n.op for n in r.graph.nodes] == ["call", "transpose", "abs"]
    _same_results(g, r)
    _report_only_equals_the_build(g, [Edges()])


def test_an_output_conversion_goes_into_the_partition():
    b = _x()
    g = b.done(b.op("sigmoid", _conv(b, b.x["x"], 4, 8)))
    r = partition_graph(g, [Edges()])
    assert _where(r)["sigmoid"] == (
        "edges",
        "an edge conversion: edges's runtime runs it on the CPU, at its partition's output",
    )
    assert [n.op for n in r.regions[0].body.nodes][-1] == "sigmoid"
    _same_results(g, r)


def test_a_conversion_between_two_device_ops_stays_on_the_host():
    b = _x()
    y = b.op("sigmoid", _conv(b, b.x["x"], 4, 8))
    g = b.done(_conv(b, y, 8, 8, seed=1))
    r = partition_graph(g, [Edges()])
    assert _where(r)["sigmoid"][0] == HOST
    assert len(r.regions) == 2
    _same_results(g, r)


def test_an_op_another_backend_takes_is_not_a_conversion():
    b = _x()
    g = b.done(_conv(b, b.op("sigmoid", b.x["x"]), 4, 8))
    r = partition_graph(g, [Edges(), Sigmoids()])
    assert _where(r)["sigmoid"][0] == "sigmoids"
    assert [p.backend for p in r.report.partitions] == ["sigmoids", "edges"]
    _same_results(g, r)


def test_a_refused_conversion_stays_on_the_host_with_the_reason():
    b = _x()
    g = b.done(_conv(b, b.op("tanh", b.x["x"]), 4, 8))
    r = partition_graph(g, [Edges()])
    (tanh,) = [n for n in r.report.nodes if n.op == "tanh"]
    assert tanh.backend == HOST and tanh.reasons["edges"] == "tanh: this runtime has no such conversion"
    _same_results(g, r)


def test_a_conversion_the_caller_also_reads_stays_on_the_host():
    b = _x()
    s = b.op("sigmoid", b.x["x"])
    g = b.done(_conv(b, s, 4, 8), s)  # the sigmoid's result is a graph output too
    r = partition_graph(g, [Edges()])
    assert _where(r)["sigmoid"][0] == HOST
    _same_results(g, r)


def test_a_chain_of_conversions_at_the_input_all_go_in():
    b = _x()
    g = b.done(_conv(b, b.op("sigmoid", b.op("sigmoid", b.x["x"])), 4, 8))
    r = partition_graph(g, [Edges()])
    assert [n.backend for n in r.report.nodes if n.op == "sigmoid"] == ["edges", "edges"]
    assert len(r.regions) == 1
    _same_results(g, r)
    _report_only_equals_the_build(g, [Edges()])
