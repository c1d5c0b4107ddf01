"""The support library where the IR cannot express the case, the target options, and partition topologies."""

from __future__ import annotations

import numpy as np
import pytest
from accel_ethosn import EthosnBackend, EthosnOptions, support
from ethosn_graphs import qt
from pydantic import ValidationError

import accel
from accel.builder import GraphBuilder
from accel.executor import ReferenceExecutor
from accel.ir import Node, QuantParams, TensorType, Value
from accel.partition import partition_graph
from accel.pattern import Match

# -- reasons the IR cannot reach (its type rules refuse such nodes first) -----------------------


def test_three_strides_are_refused():
    # the IR's conv2d always has two strides; the support library still answers for three
    attrs = {"data_layout": "NHWC", "kernel_layout": "OHWI", "strides": (1, 1, 1), "dilation": (1, 1), "groups": 1}
    reason = support.check_conv2d_attrs(attrs, qt((1, 8, 8, 4)), TensorType((4, 3, 3, 4), "int8"))
    assert reason == "stride size=3, stride size must = 2"


def test_nchw_is_refused():
    # the partitioner converts every graph to NHWC before the checks, so NCHW never reaches them
    attrs = {"data_layout": "NCHW", "kernel_layout": "OIHW", "strides": (1, 1), "dilation": (1, 1), "groups": 1}
    assert support.check_conv2d_attrs(attrs, qt((1, 4, 8, 8)), TensorType((4, 4, 3, 3), "int8")) == (
        "data format=NCHW, data format must = NHWC"
    )
    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    g = b.done(b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2)))
    assert support.check_max_pool2d(g.nodes[0]) == "data format=NCHW, data format must = NHWC"


def test_int16_conv_input_is_refused():
    # qnn.conv2d's type rule refuses int16 data; the tensor check gives the support library's reason
    assert support.check_activation(TensorType((1, 8, 8, 4), "int16")) == (
        "dtype='int16', dtype must be either uint8, int8 or int32"
    )


def test_weight_format_other_than_ohwi_is_refused():
    # the partitioner hands every convolution over with OHWI weights, whatever the model wrote
    attrs = {"data_layout": "NHWC", "kernel_layout": "HWIO", "strides": (1, 1), "dilation": (1, 1), "groups": 1}
    reason = support.check_conv2d_attrs(attrs, qt((1, 8, 8, 4)), TensorType((3, 3, 4, 4), "int8"))
    assert reason == "weight format=HWIO, weight format must = OHWI"


def test_weights_of_another_dtype_or_unquantized_are_refused():
    # qnn.conv2d's type rule refuses int16 weights and weights without quantization parameters
    w16 = Value.constant("w", np.zeros((4, 3, 3, 4), np.int16), QuantParams(0.02, 0))
    assert support.check_weights(w16) == "weights: dtype='int16', dtype must be either uint8 or int8"
    plain = Value.constant("w", np.zeros((4, 3, 3, 4), np.int8))
    assert support.check_weights(plain) == "weights are not quantized"


def _bias_add(bias: np.ndarray, axis: int = 3) -> Node:
    x = Value("acc", TensorType((1, 8, 8, 4), "int32", QuantParams(0.001, 0)))
    b = Value.constant("b", bias, QuantParams(0.001, 0))
    return Node("nn.bias_add", [x, b], {"axis": axis}, [x.type], name="bias_add", output_names=["y"])


def test_bias_of_another_dtype_or_size_is_refused():
    # nn.bias_add's type rule wants the data's dtype and one element per channel of its axis
    assert support.check_bias(_bias_add(np.zeros(4, np.int8)), 4) == "bias dtype='int8', bias dtype must = int32"
    reason = support.check_bias(_bias_add(np.zeros(3, np.int32)), 4)
    assert reason == "bias of 3 elements, must have one per output channel (4)"


def test_average_not_taken_on_int32_is_refused():
    # a pool's output has its input's dtype, so a graph widened to int32 always averages int32
    q = QuantParams(0.05, 128)
    x = Value("x", TensorType((1, 8, 8, 4), "uint8", q))
    widen = Node("cast", [x], {"dtype": "int32"}, [TensorType((1, 8, 8, 4), "int32", q)], name="w", output_names=["a"])
    attrs = {"layout": "NHWC", "dilation": (1, 1)}
    pool = Node(
        "nn.avg_pool2d", widen.outputs, attrs, [TensorType((1, 4, 4, 4), "int16", q)], name="p", output_names=["b"]
    )
    narrow = Node(
        "cast", pool.outputs, {"dtype": "uint8"}, [TensorType((1, 4, 4, 4), "uint8", q)], name="n", output_names=["c"]
    )
    m = Match(narrow, [widen, pool, narrow], [x], [], {"widen": widen, "pool": pool, "narrow": narrow})
    assert support.check_avg_pool2d_match(m) == "the average must be taken on int32"


def test_clip_with_empty_bounds_is_refused():
    # clip's type rule refuses a_min > a_max
    x = Value("x", qt((1, 8, 8, 4)))
    node = Node("clip", [x], {"a_min": 200.0, "a_max": 100.0}, [x.type], name="clip", output_names=["y"])
    assert support.check_clip(node) == "clip bounds [200.0, 100.0] are empty"


def test_add_of_two_tensors_is_left_to_the_qnn_add_composite():
    # ethosn.qnn_add's pattern claims every qnn.add of two tensors, and its reason comes first in the report
    b = GraphBuilder(x=qt((1, 4, 8, 8)), y=qt((1, 4, 8, 8)))
    g = b.done(b.op("qnn.add", b.x["x"], b.x["y"], out_scale=0.1, out_zero_point=128))
    assert (
        support.check_const_binary(g.nodes[0])
        == "qnn.add of two non-constant tensors is ethosn.qnn_add's (same shapes)"
    )


@pytest.mark.parametrize(
    ("op", "form"),
    [
        ("sigmoid", "ethosn.qnn_sigmoid"),
        ("tanh", "ethosn.qnn_tanh"),
        ("nn.leaky_relu", "ethosn.qnn_leaky_relu"),
        ("image.resize2d", "ethosn.qnn_resize"),
    ],
)
def test_integer_forms_no_graph_reaches(op, form):
    # sigmoid, tanh and leaky relu take only floats; an integer resize meets ethosn.qnn_resize's check first
    x = Value("x", TensorType((1, 8, 8, 4), "uint8"))
    node = Node(op, [x], {}, [x.type], name="n", output_names=["y"])
    assert support.check_float_form(node) == f"ethosn runs {op} only as {form}"


def test_edge_conversion_reasons_no_graph_reaches():
    """The edge checks' refusals that a graph meets a device op's first (a per-axis or rank-5
    tensor at a partition's edge is one no ethosn op reads or writes either)."""

    def node(op, x: TensorType, y: TensorType, **attrs):
        return Node(op, [Value("x", x)], attrs, [y], name="n", output_names=["y"])

    per_axis = TensorType((1, 8, 8, 4), "uint8", QuantParams(np.full(4, 0.05, np.float32), np.full(4, 128), axis=3))
    f32, f64 = TensorType((1, 8, 8, 4), "float32"), TensorType((1, 8, 8, 4), "float64")
    assert support.check_edge_quantize(node("qnn.quantize", f32, per_axis)) == (
        "the quantize's output is quantized per axis (3); ethosn's runtime converts per-tensor data only"
    )
    assert support.check_edge_quantize(node("qnn.quantize", f64, qt((1, 8, 8, 4)))) == (
        "ethosn's runtime quantizes float32 data only, got float64"
    )
    rank5 = TensorType((1, 2, 2, 2, 2), "float32")
    assert support.check_edge_quantize(node("qnn.quantize", rank5, qt((1, 2, 2, 2, 2)))) == (
        "dimensions=5, dimensions must be <= 4;"
    )
    assert support.check_edge_dequantize(node("qnn.dequantize", per_axis, f32)) == (
        "the dequantize's input is quantized per axis (3); ethosn's runtime converts per-tensor data only"
    )
    assert support.check_edge_dequantize(node("qnn.dequantize", qt((1, 8, 8, 4), "int32"), f32)) == (
        "dtype='int32', dtype must be either uint8 or int8"
    )
    assert support.check_edge_transpose(
        node("transpose", TensorType((1, 8, 8, 4), "int32"), f32, axes=(0, 3, 1, 2))
    ) == ("ethosn's runtime transposes uint8, int8 or float32 data, got int32")
    assert support.check_edge_transpose(node("transpose", rank5, rank5, axes=(0, 1, 2, 4, 3))) == (
        "dimensions=5, dimensions must be <= 4;"
    )
    assert support.check_edge_transpose(node("transpose", f32, f32, axes=(0, 3, 1, 2))) is None


# -- options ------------------------------------------------------------------------------------


def test_options_defaults_and_refusals():
    opts = EthosnOptions()
    assert (opts.variant, opts.tops, opts.ple_ratio, opts.sram_bytes) == ("N78", 1, 2, 256 * 1024)
    assert EthosnOptions(tops=4, ple_ratio=4, sram_size=2048).sram_bytes == 2048 * 1024
    for bad in ({"variant": "N77"}, {"tops": 3}, {"ple_ratio": 8}, {"sram_size": 1000}, {"frequency": 1}):
        with pytest.raises(ValidationError):
            EthosnOptions(**bad)
    with pytest.raises(accel.AccelError, match="tops"):
        accel.compile(_pool_abs_pool(), target={"devices": [{"kind": "ethosn", "options": {"tops": 5}}]})


# -- topologies ---------------------------------------------------------------------------------


def _pool_abs_pool():
    b = GraphBuilder(x=TensorType((1, 4, 8, 8), "int8"))  # max pooling selects: plain int8 is fine
    y = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2), strides=(1, 1))
    y = b.op("abs", y)
    return b.done(b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(1, 1)))


def test_max_pool_abs_max_pool_gives_two_command_streams():
    g = _pool_abs_pool()
    art = accel.compile(g, "ethosn")
    assert [backend for _, backend in art.partitions] == ["ethosn", "ethosn"]
    host = [n.op for n in art.report.host_nodes()]
    assert host == ["abs"]
    x = np.random.default_rng(0).integers(-128, 127, (1, 4, 8, 8)).astype(np.int8)
    got = art.executable().run({"x": x})
    want = ReferenceExecutor(g).run({"x": x})
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_lone_reshape_is_not_offloaded():
    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    result = partition_graph(b.done(b.op("reshape", b.x["x"], newshape=(1, 256))), [EthosnBackend()])
    assert not result.regions
    (node,) = result.report.host_nodes()
    assert "only moves data" in node.reasons["ethosn"]


def test_lone_clip_is_inlined_back_to_the_host():
    b = GraphBuilder(x=qt((1, 4, 8, 8)))
    result = partition_graph(b.done(b.op("clip", b.x["x"], a_min=130.0, a_max=250.0)), [EthosnBackend()])
    assert not result.regions
    assert all("multiply-accumulate" in n.reasons["ethosn"] for n in result.report.host_nodes())


def test_broadcast_add_is_not_offloaded():
    b = GraphBuilder(x=qt((1, 8, 4, 4)), y=qt((1, 8, 1, 4)))
    p = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))
    q = b.op("nn.max_pool2d", b.x["y"], pool_size=(1, 1))
    add = b.op("qnn.add", p, q, out_scale=0.1, out_zero_point=128)
    result = partition_graph(b.done(add), [EthosnBackend()])
    (row,) = [n for n in result.report.host_nodes() if n.op == "qnn.add"]
    assert row.reasons["ethosn"].startswith("ethosn.qnn_add: inputs of shapes [1, 4, 4, 8] and [1, 1, 4, 8]")
