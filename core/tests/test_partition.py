"""Partition semantics: assignment, composites, region merging, profitability, layout, report."""

from __future__ import annotations

import numpy as np
import pytest

from accel.backend import Backend, BackendOptions, CostHints, PatternEntry
from accel.builder import GraphBuilder
from accel.errors import PartitionError
from accel.executor import ReferenceExecutor
from accel.ir import CALL_OP, Graph, TensorType
from accel.partition import partition_graph, partition_report
from accel.passes import eliminate_dead_code
from accel.pattern import is_constant, is_op, wildcard
from accel.report import HOST


def _ok(node):
    return None


class Pools(Backend):
    """NCHW backend taking pools, reshapes and relu."""

    name = "pools"
    layout = "NCHW"

    def op_checks(self):
        return {"nn.max_pool2d": self.max_pool, "reshape": _ok, "nn.relu": _ok, "add": _ok}

    def max_pool(self, node):
        if tuple(node.attrs["dilation"]) != (1, 1):
            return f"dilation={list(node.attrs['dilation'])}, dilation must = [1, 1]"
        return None


class NhwcConv(Backend):
    """NHWC backend with a conv → bias? → relu? composite and single pools/adds."""

    name = "nhwc"
    layout = "NHWC"

    def pattern_table(self):
        conv = is_op("nn.conv2d")(wildcard(), is_constant()).has_attr({"groups": 1})
        conv = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
        conv = conv.optional(lambda x: is_op("nn.relu")(x))
        return [PatternEntry("conv2d", conv, self.check_conv)]

    def check_conv(self, match):
        conv = match.nodes[0]
        if conv.attrs["data_layout"] != "NHWC":
            return f"data format={conv.attrs['data_layout']}, data format must = NHWC"
        if tuple(conv.attrs["strides"]) not in ((1, 1), (2, 2)):
            return f"stride size={conv.attrs['strides'][0]}, stride size must = 2"
        return None

    def op_checks(self):
        return {"nn.max_pool2d": _ok, "add": _ok, "nn.relu": _ok}


class Second(NhwcConv):
    name = "second"


def _x(shape=(1, 4, 8, 8)):
    return GraphBuilder(x=shape)


def _pool(b, x, **kw):
    return b.op("nn.max_pool2d", x, pool_size=(2, 2), strides=(1, 1), **kw)


def _conv(b, x, cin, cout, seed=0, stride=1, bias=True, relu=True):
    rng = np.random.default_rng(seed)
    y = b.op("nn.conv2d", x, b.const(rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)),
             padding=(1, 1, 1, 1), strides=(stride, stride))  # fmt: skip
    if bias:
        y = b.op("nn.bias_add", y, b.const(rng.standard_normal(cout).astype(np.float32)))
    if relu:
        y = b.op("nn.relu", y)
    return y


def _same_results(graph: Graph, result) -> None:
    result.graph.lint()
    rng = np.random.default_rng(1)
    feeds = {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype) for v in graph.inputs}
    want = ReferenceExecutor(graph).run(feeds)
    got = ReferenceExecutor(result.graph).run(feeds)
    assert want.keys() == got.keys()
    # convolutions re-laid out to NHWC sum in another order; everything else is bit-exact
    exact = not any(n.op == "nn.conv2d" for n in graph.nodes)
    for k in want:
        if exact:
            np.testing.assert_array_equal(got[k], want[k])
        else:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


def _where(result) -> dict[str, str]:
    return {n.name: n.backend for n in result.report.nodes}


def _ops_on_host(result) -> list[str]:
    return [n.op for n in result.report.nodes if n.backend == HOST]


def test_op_claimed_by_two_backends_goes_to_the_first_listed():
    b = _x()
    y = _conv(b, b.x["x"], 4, 4)
    g = b.done(_pool(b, y))
    r1 = partition_graph(g, [NhwcConv(), Second()])
    assert {n.backend for n in r1.report.nodes} == {"nhwc"}
    r2 = partition_graph(g, [Second(), NhwcConv()])
    assert {n.backend for n in r2.report.nodes} == {"second"}
    _same_results(g, r1)


def test_composites_are_never_split():
    b = _x()
    g = b.done(_conv(b, b.x["x"], 4, 8))
    # "pools" takes relu alone; "nhwc" takes conv+bias+relu as one composite. With pools first,
    # the relu goes to pools and nhwc still takes conv+bias as a shorter composite.
    r = partition_graph(g, [Pools(), NhwcConv()])
    where = _where(r)
    assert where["relu"] == "pools"
    assert where["conv2d"] == where["bias_add"] == "nhwc"
    comps = {n.composite for n in r.report.nodes if n.backend == "nhwc"}
    assert comps == {"nhwc.conv2d"}
    # the composite is one call node holding conv and bias_add
    region = next(n for n in r.regions if n.attrs["compiler"] == "nhwc")
    inner = [n for n in region.body.nodes if n.op == CALL_OP]
    assert len(inner) == 1 and [n.op for n in inner[0].body.nodes] == ["nn.conv2d", "nn.bias_add"]
    _same_results(g, r)


def test_composite_refused_by_its_check_keeps_the_reason_and_is_not_split():
    b = _x()
    g = b.done(_conv(b, b.x["x"], 4, 8, stride=3))
    r = partition_graph(g, [NhwcConv()])
    # conv and bias stay together on the host; the relu alone is an op nhwc takes
    assert _where(r) == {"conv2d": HOST, "bias_add": HOST, "relu": "nhwc"}
    for name in ("conv2d", "bias_add"):
        node = next(n for n in r.report.nodes if n.name == name)
        assert node.reasons == {"nhwc": "nhwc.conv2d: stride size=3, stride size must = 2"}


def test_max_pool_abs_max_pool_gives_two_partitions_and_one_host_op():
    b = _x()
    g = b.done(_pool(b, b.op("abs", _pool(b, b.x["x"]))))
    r = partition_graph(g, [Pools()])
    assert len(r.regions) == 2
    assert _ops_on_host(r) == ["abs"]
    assert [n.op for n in r.graph.nodes] == ["call", "abs", "call"]
    _same_results(g, r)


def test_reshape_sigmoid_reshape_gives_one_host_op_sequence():
    b = GraphBuilder(x=(1, 4, 4, 4))
    y = b.op("reshape", b.x["x"], newshape=(1, 64))
    y = b.op("sigmoid", y)
    g = b.done(b.op("reshape", y, newshape=(1, 4, 16)))
    r = partition_graph(g, [Pools()])
    # both reshapes would be lone data-movement regions: inlined to the host, so the
    # sigmoid and its reshapes form one run of host code and nothing is offloaded
    assert r.regions == []
    assert [n.op for n in r.graph.nodes] == ["reshape", "sigmoid", "reshape"]
    reasons = [n.reasons["pools"] for n in r.report.nodes]
    assert "no compute" in reasons[0] and "no compute" in reasons[2]
    assert reasons[1] == "sigmoid is not supported by pools"


def test_lone_reshape_region_is_inlined_to_the_host():
    b = GraphBuilder(x=(1, 4, 4, 4))
    g = b.done(b.op("sigmoid", b.op("reshape", b.x["x"], newshape=(1, 64))))
    r = partition_graph(g, [Pools()])
    assert r.regions == []
    assert _where(r)["reshape"] == HOST
    # a reshape next to compute joins the compute's region
    b = _x()
    y = b.op("reshape", _pool(b, b.x["x"]), newshape=(1, 196))
    g2 = b.done(b.op("sigmoid", y))
    r2 = partition_graph(g2, [Pools()])
    assert len(r2.regions) == 1 and _where(r2)["reshape"] == "pools"
    _same_results(g2, r2)


def test_diamond_never_merges_across_a_host_node():
    # a -> b(host) -> c and a -> c: merging a and c would make a cycle through b
    b = _x()
    a = _pool(b, b.x["x"])
    h = b.op("abs", a)
    c = b.op("add", a, h)
    g = b.done(c)
    r = partition_graph(g, [Pools()])
    where = _where(r)
    assert where["max_pool2d"] == where["add"] == "pools"
    parts = {n.name: n.partition for n in r.report.nodes}
    assert parts["max_pool2d"] != parts["add"]
    assert len(r.regions) == 2
    _same_results(g, r)


def test_independent_branches_of_one_backend_merge():
    b = _x()
    p1 = _pool(b, b.x["x"])
    p2 = b.op("nn.relu", b.x["x"])
    g = b.done(b.op("sigmoid", p1), b.op("abs", p2))
    r = partition_graph(g, [Pools()])
    assert len(r.regions) == 1
    _same_results(g, r)


def test_refusal_reason_from_op_check():
    b = _x()
    g = b.done(b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2), dilation=(2, 2)))
    r = partition_graph(g, [Pools()])
    (node,) = r.report.nodes
    assert node.backend == HOST
    assert node.reasons == {"pools": "dilation=[2, 2], dilation must = [1, 1]"}


def test_reasons_list_only_higher_priority_backends():
    b = _x()
    g = b.done(b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2), dilation=(2, 2)))
    r = partition_graph(g, [Pools(), NhwcConv()])
    (node,) = r.report.nodes
    assert node.backend == "nhwc"
    assert list(node.reasons) == ["pools"]


def _conv_abs_conv() -> Graph:
    """Two convolutions split by a host op (abs)."""
    b = _x()
    y = _conv(b, b.x["x"], 4, 8)
    y = b.op("abs", y)
    return b.done(_conv(b, y, 8, 8, seed=1))


def test_nhwc_backend_two_boundary_transposes_per_region():
    g = _conv_abs_conv()
    r = partition_graph(g, [NhwcConv()])
    assert len(r.regions) == 2
    assert [p.transposes for p in r.report.partitions] == [2, 2]
    ops = [n.op for n in r.graph.nodes]
    assert ops == ["transpose", "call", "transpose", "abs", "transpose", "call", "transpose"]
    for region in r.regions:
        conv = region.body.nodes[0].body.nodes[0]
        assert conv.attrs["data_layout"] == "NHWC" and conv.attrs["kernel_layout"] == "OHWI"
    _same_results(g, r)


def test_no_transposes_between_adjacent_nhwc_regions():
    class OnlyPool(Backend):
        name = "onlypool"
        layout = "NHWC"

        def op_checks(self):
            return {"nn.max_pool2d": _ok}

    b = _x()
    y = _conv(b, b.x["x"], 4, 8)
    y = _pool(b, y)
    g = b.done(_conv(b, y, 8, 8, seed=2))
    # with nhwc asked first it claims max_pool2d too: OnlyPool gets nothing, one region in all
    r = partition_graph(g, [NhwcConv(), OnlyPool()], layout="NCHW")
    assert [p.backend for p in r.report.partitions] == ["nhwc"]
    assert [n.op for n in r.graph.nodes] == ["transpose", "call", "transpose"]
    assert set(_where(r).values()) == {"nhwc"}
    _same_results(g, r)
    # with OnlyPool first it takes the pool, between two nhwc regions, with no transposes between them
    r = partition_graph(g, [OnlyPool(), NhwcConv()])
    assert [p.backend for p in r.report.partitions] == ["nhwc", "onlypool", "nhwc"]
    ops = [n.op for n in r.graph.nodes]
    assert ops == ["transpose", "call", "call", "call", "transpose"]
    assert sum(p.transposes for p in r.report.partitions) == 2
    _same_results(g, r)


class Transposing(NhwcConv):
    """NHWC backend that also takes transposes (of float32), reshapes and sigmoid."""

    name = "transposing"

    def op_checks(self):
        def transpose(node):
            return None if node.inputs[0].type.dtype == "float32" else "float32 only"

        return {**super().op_checks(), "transpose": transpose, "reshape": _ok, "sigmoid": _ok}


def test_a_backend_that_transposes_takes_its_regions_input_transposes():
    g = _conv_abs_conv()
    r = partition_graph(g, [Transposing()])
    # each region's input is transposed in its body; what the host reads comes back on the host
    assert [n.op for n in r.graph.nodes] == ["call", "transpose", "abs", "call", "transpose"]
    assert [p.transposes for p in r.report.partitions] == [1, 1]
    for region, channels in zip(r.regions, (4, 8)):
        first = region.body.nodes[0]
        assert first.op == "transpose" and first.inputs[0] is region.body.inputs[0]
        assert tuple(first.attrs["axes"]) == (0, 2, 3, 1)
        assert region.body.inputs[0].type.shape == (1, channels, 8, 8)  # NCHW, as the host holds it
    assert r.regions[0].inputs[0] is r.graph.inputs[0]
    assert partition_report(g, [Transposing()]).partitions[0].transposes == 1  # the report without graphs agrees
    _same_results(g, r)

    # a flatten after another backend's NHWC region: transposed back to NCHW in the body that reads it
    b = _x()
    y = _conv(b, b.x["x"], 4, 8)
    g = b.done(b.op("sigmoid", b.op("reshape", y, newshape=(1, 512))))
    r = partition_graph(g, [NhwcConv(), Transposing()])
    assert [p.backend for p in r.report.partitions] == ["nhwc", "transposing"]
    assert [n.op for n in r.graph.nodes] == ["transpose", "call", "call"]
    second = r.regions[1].body
    assert [n.op for n in second.nodes] == ["transpose", "reshape", "sigmoid"]
    assert tuple(second.nodes[0].attrs["axes"]) == (0, 3, 1, 2) and second.inputs[0].type.shape == (1, 8, 8, 8)
    _same_results(g, r)


def test_nchw_and_nhwc_regions_exchange_through_transposes():
    b = _x()
    y = _pool(b, b.x["x"])
    g = b.done(_conv(b, y, 4, 4, relu=False))
    r = partition_graph(g, [Pools(), NhwcConv()])
    assert [p.backend for p in r.report.partitions] == ["pools", "nhwc"]
    assert [n.op for n in r.graph.nodes] == ["call", "transpose", "call", "transpose"]
    _same_results(g, r)


def test_profitability_copy_cost_from_options_and_hints():
    class Costly(Pools):
        name = "costly"
        cost = CostHints(min_work=1, copy_cost=100.0)

    b = _x()
    g = b.done(b.op("sigmoid", _pool(b, b.x["x"])))
    r = partition_graph(g, [Costly()])
    assert r.regions == []
    (pool, _) = r.report.nodes
    assert "boundary copies" in pool.reasons["costly"]
    # a target option overrides the backend's hint
    r2 = partition_graph(g, [Costly(BackendOptions(copy_cost=0.0))])
    assert len(r2.regions) == 1
    r3 = partition_graph(g, [Pools({"min_work": 10**9})])
    assert r3.regions == [] and "minimum" in r3.report.nodes[0].reasons["pools"]


def test_unprofitable_region_is_offered_to_the_next_backend():
    class Picky(Pools):
        name = "picky"
        cost = CostHints(min_work=10**9)

    b = _x()
    g = b.done(b.op("sigmoid", _pool(b, b.x["x"])))
    r = partition_graph(g, [Picky(), Pools()])
    pool = r.report.nodes[0]
    assert pool.backend == "pools"
    assert "minimum" in pool.reasons["picky"]


def test_escaping_intermediate_is_not_fused():
    b = _x()
    rng = np.random.default_rng(0)
    y = b.op("nn.conv2d", b.x["x"], b.const(rng.standard_normal((4, 4, 3, 3)).astype(np.float32)), padding=(1,) * 4)
    y = b.op("nn.bias_add", y, b.const(np.ones(4, np.float32)))
    z = b.op("nn.relu", y)
    g = b.done(z, b.op("sigmoid", y))  # the bias_add output is also read by sigmoid
    r = partition_graph(g, [NhwcConv()])
    where = _where(r)
    assert where["relu"] == "nhwc" and where["conv2d"] == "nhwc"
    comp = {n.name: n.composite for n in r.report.nodes}
    assert comp["relu"] is None  # relu alone, conv+bias the composite
    _same_results(g, r)


def _random_dag(rng: np.random.Generator, *, conv_seed: int | None = None) -> Graph:
    """3 to 24 random relu, abs, add, sigmoid and pool nodes (and conv → bias? → relu? blocks
    with ``conv_seed``) over one input; the last one or two values are the outputs, so
    others may be dead."""
    b = _x((1, 4, 6, 6))
    values = [b.x["x"]]
    for _ in range(int(rng.integers(3, 25))):
        kind = rng.integers(0, 5 if conv_seed is None else 6)
        a = values[int(rng.integers(0, len(values)))]
        if kind == 0:
            v = b.op("nn.relu", a)
        elif kind == 1:
            v = b.op("abs", a)
        elif kind == 2:
            v = b.op("add", a, values[int(rng.integers(0, len(values)))])
        elif kind == 3:
            v = b.op("sigmoid", a)
        elif kind == 4 and conv_seed is not None:
            v = _conv(b, a, 4, 4, seed=conv_seed, bias=bool(rng.integers(0, 2)), relu=bool(rng.integers(0, 2)))
        else:
            v = b.op("nn.max_pool2d", a, pool_size=(1, 1))
        values.append(v)
    return b.done(*values[-2:]) if len(values) > 2 and values[-2] is not b.x["x"] else b.done(values[-1])


def test_random_dags_partition_to_valid_equivalent_graphs():
    rng = np.random.default_rng(7)
    for trial in range(30):
        g = _random_dag(rng)
        backends = [[Pools()], [NhwcConv()], [Pools(), NhwcConv()], [NhwcConv(), Pools()]][trial % 4]
        r = partition_graph(g, backends)
        _same_results(g, r)
        # every node is reported once, host nodes have a reason from every backend
        assert sorted(n.name for n in r.report.nodes) == sorted(n.name for n in g.nodes)
        for n in r.report.nodes:
            if n.backend == HOST:
                assert set(n.reasons) == {bk.name for bk in backends}


def _report_only_equals_the_build(graph: Graph, backends) -> None:
    built = partition_graph(graph, backends, materialize=False).report
    alone = partition_report(graph, backends)
    assert alone.timings.keys() == {"partition"}
    built.timings.clear()
    alone.timings.clear()
    assert alone == built


def test_report_without_the_build_equals_the_built_one_on_random_dags():
    """partition_report works the boundaries out without building graphs: the same report,
    transposes included, with dead nodes (whose transposes the build drops) and without."""
    rng = np.random.default_rng(11)
    transposes = 0
    for trial in range(40):
        g = _random_dag(rng, conv_seed=trial)
        backends = [[Pools()], [NhwcConv()], [Pools(), NhwcConv()], [NhwcConv(), Pools()], [PlanarConv(), NhwcConv()]][
            trial % 5
        ]
        for graph in (g, eliminate_dead_code(g)):
            _report_only_equals_the_build(graph, backends)
        transposes += sum(p.transposes for p in partition_report(g, backends).partitions)
    assert transposes > 50  # the boundaries were there to count


def test_report_without_the_build_counts_what_the_build_keeps_of_a_dead_region():
    """A dead NHWC region (its output read by nothing) loses its boundary transposes in the build."""
    b = _x()
    live = b.op("sigmoid", _conv(b, b.x["x"], 4, 4, seed=1))
    _conv(b, b.op("abs", b.x["x"]), 4, 4, seed=2)  # dead: nothing reads it
    g = b.done(live)
    _report_only_equals_the_build(g, [NhwcConv()])
    assert [p.transposes for p in partition_report(g, [NhwcConv()]).partitions] == [2, 0]


def test_duplicate_backend_is_refused():
    b = _x()
    g = b.done(_pool(b, b.x["x"]))
    with pytest.raises(PartitionError, match="listed twice"):
        partition_graph(g, [Pools(), Pools()])


def test_raising_check_is_a_partition_error_naming_the_backend():
    class Buggy(Pools):
        name = "buggy"

        def op_checks(self):
            return {"nn.max_pool2d": lambda node: 1 / 0}

    b = _x()
    g = b.done(_pool(b, b.x["x"]))
    with pytest.raises(PartitionError, match=r"buggy.*ZeroDivisionError"):
        partition_graph(g, [Buggy()])


def test_input_graph_is_not_modified():
    b = _x()
    y = _conv(b, b.x["x"], 4, 8)
    g = b.done(b.op("abs", y))
    before = str(g)
    partition_graph(g, [NhwcConv(), Pools()])
    assert str(g) == before


def test_quantized_graph_layout_keeps_per_channel_axis():
    from accel.ir import QuantParams

    class QConv(Backend):
        name = "qconv"
        layout = "NHWC"

        def pattern_table(self):
            p = is_op("qnn.conv2d")(wildcard(), is_constant())
            p = p.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
            return [PatternEntry("conv", is_op("qnn.requantize")(p))]

    rng = np.random.default_rng(0)
    b = GraphBuilder(x=TensorType((1, 3, 6, 6), "uint8", QuantParams(0.05, 128)))
    w = b.const(rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), QuantParams(rng.uniform(0.01, 0.02, 4), 0, 0))
    acc = b.op("qnn.conv2d", b.x["x"], w, padding=(1, 1, 1, 1))
    acc = b.op("nn.bias_add", acc, b.const(rng.integers(-100, 100, 4).astype(np.int32)))
    y = b.op("qnn.requantize", acc, out_scale=0.1, out_zero_point=120, out_dtype="uint8")
    g = b.done(y)
    r = partition_graph(g, [QConv()])
    assert len(r.regions) == 1
    inner = r.regions[0].body.nodes[0].body.nodes[0]
    assert inner.inputs[1].type.quant.axis == 0 and inner.attrs["kernel_layout"] == "OHWI"
    feeds = {"x": rng.integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)}
    (want,) = ReferenceExecutor(g).run(feeds).values()
    (got,) = ReferenceExecutor(r.graph).run(feeds).values()
    np.testing.assert_array_equal(got, want)


class PlanarConv(Backend):
    """NCHW backend taking conv → bias composites only (no elementwise ops of its own)."""

    name = "planar"
    layout = "NCHW"

    def pattern_table(self):
        conv = is_op("nn.conv2d")(wildcard(), is_constant())
        return [PatternEntry("conv2d", conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant())))]


def _residual_blocks(blocks: int = 2):
    b = _x()
    x = b.x["x"]
    for k in range(blocks):
        y = _conv(b, x, 4, 4, seed=2 * k, relu=False)
        y = _conv(b, y, 4, 4, seed=2 * k + 1, relu=False)
        x = b.op("nn.relu", b.op("add", y, x))
    return b.done(x)


def test_elementwise_region_between_planar_regions_takes_their_layout():
    # the residual add → relu goes to the NHWC backend; its inputs arrive in NCHW, so it runs in NCHW
    g = _residual_blocks()
    r = partition_graph(g, [PlanarConv(), NhwcConv()])
    assert [p.backend for p in r.report.partitions] == ["planar", "nhwc", "planar", "nhwc"]
    assert "transpose" not in [n.op for n in r.graph.nodes]
    assert sum(p.transposes for p in r.report.partitions) == 0
    for region in r.regions:
        if region.attrs["compiler"] == "nhwc":
            assert [n.op for n in region.body.nodes] == ["add", "nn.relu"]
            assert region.body.inputs[0].type.shape == (1, 4, 8, 8)
    _same_results(g, r)


def test_elementwise_region_fed_by_its_own_layout_keeps_it():
    # a relu after an NHWC conv region stays NHWC: one transpose in, one out
    b = _x()
    y = _conv(b, b.x["x"], 4, 4, relu=False)
    y = b.op("abs", y)
    g = b.done(b.op("nn.relu", y))
    r = partition_graph(g, [NhwcConv()])
    assert [p.backend for p in r.report.partitions] == ["nhwc", "nhwc"]
    assert [n.op for n in r.graph.nodes] == ["transpose", "call", "transpose", "abs", "call"]
    _same_results(g, r)


def test_elementwise_region_stays_in_its_backend_layout_when_its_check_refuses_the_planar_nodes():
    class NhwcOnlyRelu(NhwcConv):
        name = "nhwcrelu"

        def op_checks(self):
            return {"add": self.nhwc_add, "nn.relu": _ok}

        def nhwc_add(self, node):
            return None if node.inputs[0].type.shape[-1] == 4 else "add: channels must be last"

    g = _residual_blocks(1)
    r = partition_graph(g, [PlanarConv(), NhwcOnlyRelu()])
    assert [p.backend for p in r.report.partitions] == ["planar", "nhwcrelu"]
    assert [n.op for n in r.graph.nodes].count("transpose") == 3
    _same_results(g, r)


def test_names_the_partitioner_makes_are_new_in_the_input_graph():
    """Partition calls and boundary transposes get names no node or value of the model has,
    though the host graph is built node by node (a model may use ``nhwc_0`` itself)."""
    b = _x()
    s = b.op("sigmoid", b.x["x"])
    y = _conv(b, s, 4, 4)
    g = b.done(b.op("sigmoid", y))
    first, last = g.nodes[0], g.nodes[-1]
    first.name, first.outputs[0].name = "nhwc_0", "nhwc_0_layout"
    last.name, last.outputs[0].name = "nhwc_0_layout_0", "out"
    g.lint()
    r = partition_graph(g, [NhwcConv()])
    assert [p.name for p in r.report.partitions] == ["nhwc_0"]
    names = [n.name for n in r.graph.nodes]
    assert len(set(names)) == len(names) and "nhwc_0" in names  # the model's node keeps its name
    assert sum(n.op == "transpose" for n in r.graph.nodes) == 2
    _same_results(g, r)  # lints: value names unique too
