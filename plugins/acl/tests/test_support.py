"""acl's support decisions, each with the reason `accel inspect` shows."""

from __future__ import annotations

import acl_cases as cases
from accel_acl import AclBackend
from acl_helpers import host_ops

from accel.builder import GraphBuilder
from accel.partition import partition_graph


def regions(graph, **options):
    """Each region's composites and ops (without the transposes of its inputs it runs first)."""
    result = partition_graph(graph, [AclBackend(options or None)])
    return [
        [n.attrs.get("composite", n.op) for n in r.body.nodes if not _input_transpose(n, r.body)]
        for r in result.regions
    ]


def _input_transpose(node, body) -> bool:
    return node.op == "transpose" and node.inputs[0] in body.inputs


def test_the_input_transpose_runs_in_the_partition():
    """The NCHW model's input comes in as it is; acl transposes it to NHWC first, not the host."""
    result = partition_graph(cases.conv_fp32(), [AclBackend()])
    assert [n.op for n in result.graph.nodes] == ["call", "transpose"]  # the NCHW output, back on the host
    (region,) = result.regions
    first = region.body.nodes[0]
    assert _input_transpose(first, region.body) and tuple(first.attrs["axes"]) == (0, 2, 3, 1)
    assert region.inputs[0] is result.graph.inputs[0]


def test_depthwise_3x3_stride_1_and_2_offloaded():
    for strides in ((1, 1), (2, 2)):
        g = cases.conv_fp32((1, 8, 10, 10), 8, groups=8, strides=strides)
        assert regions(g) == [["acl.conv2d"]]
        assert host_ops(g) == {}


def test_depthwise_7x7_refused():
    g = cases.conv_fp32((1, 8, 12, 12), 8, (7, 7), padding=(3, 3, 3, 3), groups=8, bias=False, act=None)
    assert host_ops(g)["nn.conv2d"]["acl"] == (
        "acl.conv2d: depthwise kernel size=[7, 7], kernel size must be [3, 3] or [5, 5]"
    )


def test_depthwise_stride_3_refused():
    g = cases.conv_fp32((1, 8, 12, 12), 8, strides=(3, 3), groups=8, bias=False, act=None)
    assert host_ops(g)["nn.conv2d"]["acl"] == "acl.conv2d: depthwise strides=[3, 3], strides must be [1, 1] or [2, 2]"


def test_groups_2_refused():
    g = cases.conv_fp32((1, 8, 12, 12), 8, groups=2, bias=False, act=None)
    assert host_ops(g)["nn.conv2d"]["acl"].startswith("acl.conv2d: groups=2, groups must = 1 or the channel count 8")


def test_any_batch_is_taken():
    """ACL's functions have a batch dimension: a batch of 2 is offloaded (TVM's integration refused it)."""
    g = cases.conv_fp32((2, 8, 12, 12), 8, bias=False, act=None)
    assert "nn.conv2d" not in host_ops(g)
    b = GraphBuilder(x=(2, 4, 8, 8))
    g = b.done(b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2)))
    assert "nn.max_pool2d" not in host_ops(g)


def test_dilated_pools_stay_on_the_host():
    for op, dtype in (("nn.max_pool2d", "uint8"), ("nn.avg_pool2d", "float32")):
        shape = (1, 4, 12, 12)
        b = GraphBuilder(x=cases.qtype(shape, dtype, 0.1, 3) if dtype != "float32" else shape)
        g = b.done(b.op(op, b.x["x"], pool_size=(2, 2), dilation=(3, 2)))
        assert host_ops(g)[op]["acl"] == "dilation=[3, 2], dilation must = [1, 1]"


def test_reshape_then_reshape_is_one_subgraph():
    b = GraphBuilder(x=(1, 16))
    y = b.op("reshape", b.op("reshape", b.x["x"], newshape=(1, 4, 4)), newshape=(1, 16))
    y = b.op("nn.dense", y, b.const(cases.weights(8, 16)))
    assert regions(b.done(y)) == [["reshape", "reshape", "acl.dense"]]
    # alone they only move data: the profitability rule keeps them on the host
    b = GraphBuilder(x=(1, 16))
    g = b.done(b.op("reshape", b.op("reshape", b.x["x"], newshape=(1, 4, 4)), newshape=(1, 16)))
    assert regions(g) == []


def test_non_constant_weights_refused():
    b = GraphBuilder(x=(1, 4, 8, 8), w=(4, 4, 3, 3))
    g = b.done(b.op("nn.conv2d", b.x["x"], b.x["w"], padding=(1, 1, 1, 1)))
    assert host_ops(g)["nn.conv2d"]["acl"] == (
        "acl.conv2d: the weights (input 1) of nn.conv2d are not a constant; acl packs constant weights only"
    )


def test_relu6_and_bounded_relu_fused():
    for act in ("relu6", "bounded"):
        assert regions(cases.conv_fp32(act=act)) == [["acl.conv2d"]]
    b = GraphBuilder(x=(1, 4, 8, 8))
    y = b.op("nn.conv2d", b.x["x"], b.const(cases.weights(4, 4, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("clip", y, a_min=-1.0, a_max=6.0)  # not a bounded ReLU: the conv alone is the composite
    g = b.done(y)
    assert regions(g) == [["acl.conv2d"]]
    assert host_ops(g)["clip"]["acl"] == "clip(-1.0, 6.0): only clip(0, a) with a > 0 (bounded ReLU) is supported"


def test_zero_pad_absorbed_other_pads_not():
    assert regions(cases.conv_fp32(pad=(1, 2, 0, 1))) == [["acl.conv2d"]]
    b = GraphBuilder(x=(1, 4, 8, 8))
    x = b.op("nn.pad", b.x["x"], pad_width=((0, 0), (0, 0), (1, 1), (1, 1)), pad_value=1.0)
    g = b.done(b.op("nn.conv2d", x, b.const(cases.weights(4, 4, 3, 3))))
    assert "nn.pad" in host_ops(g)


def test_l2_pool_and_quantized_average_pool_composites():
    assert regions(cases.l2_pool()) == [["acl.conv2d", "acl.l2_pool2d"]]
    names = [n for r in regions(cases.qnn_network("uint8", conv=False)) for n in r]
    assert "acl.avg_pool2d" in names and "qnn.add" in names and "concatenate" in names


def test_every_refusal_names_acl_in_the_report():
    b = GraphBuilder(x=(1, 4, 8, 8))
    g = b.done(b.op("sigmoid", b.x["x"]))
    assert host_ops(g)["sigmoid"] == {"acl": "sigmoid is not supported by acl"}


def test_per_channel_qnn_dense_and_qnn_add_offloaded():
    assert regions(cases.qnn_dense("uint8", per_channel=True)) == [["acl.qnn_dense"]]
    assert regions(cases.qnn_dense("int8", per_channel=True)) == [["acl.qnn_dense"]]
    names = [n for r in regions(cases.qnn_network("int8")) for n in r]
    assert "qnn.add" in names and "acl.qnn_conv2d" in names


def test_per_channel_qnn_conv_offloaded():
    g = cases.qnn_conv(per_channel=True, relu=True)
    assert regions(g) == [["acl.qnn_conv2d"]]
    assert host_ops(g) == {}


def test_the_runtime_names_its_kernel_library():
    """Arm Compute Library on aarch64, oneDNN elsewhere: what `accel backends` shows."""
    import platform

    library = AclBackend().kernel_library()
    if platform.machine() == "aarch64":
        assert library.startswith("Arm Compute Library v"), library
    else:
        assert library.startswith("oneDNN 3."), library
