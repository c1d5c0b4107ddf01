"""convert_layout: NCHW ⇄ NHWC with transposes only at the boundaries, bit-identical results.

Float data and weights are small integers, so every sum is exact in float32
and the two layouts must agree bit for bit whatever order the kernels add in.
"""

from __future__ import annotations

import numpy as np
import pytest

import accel
from accel.builder import GraphBuilder
from accel.errors import GraphError
from accel.ir import Graph, QuantParams, TensorType, Value
from accel.passes import convert_layout, fold_batch_norm

RNG = np.random.default_rng(7)


class Builder(GraphBuilder):
    def intc(self, *shape: int, lo: int = -2, hi: int = 2) -> Value:
        """A float32 constant of small integers (exact arithmetic)."""
        return self.const(RNG.integers(lo, hi + 1, shape).astype(np.float32))


def int_feeds(g: Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for v in g.inputs:
        t = v.type
        if t.dtype in ("uint8", "int8"):
            lo, hi = (0, 255) if t.dtype == "uint8" else (-128, 127)
            out[v.name] = rng.integers(lo, hi + 1, t.shape).astype(t.dtype)
        else:
            out[v.name] = rng.integers(-3, 4, t.shape).astype(t.dtype)
    return out


def assert_bitwise(a: Graph, b: Graph) -> None:
    for seed in (0, 1):
        inputs = int_feeds(a, seed)
        ra, rb = accel.execute(a, inputs), accel.execute(b, inputs)
        assert list(ra) == list(rb)
        for name in ra:
            assert ra[name].dtype == rb[name].dtype and ra[name].shape == rb[name].shape, name
            np.testing.assert_array_equal(ra[name], rb[name], err_msg=name)


def count(g: Graph, op: str) -> int:
    return sum(n.op == op for n in g.nodes)


def conv(b: Builder, x: Value, cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1) -> Value:
    p = k // 2
    w = b.intc(cout, cin // groups, k, k, lo=-1, hi=1)
    return b.op("nn.conv2d", x, w, padding=(p, p, p, p), strides=(stride, stride), groups=groups)


def resnet_block_graph() -> Graph:
    """stem conv -> max pool -> basic residual block with a projection shortcut -> relu."""
    b = Builder(x=(1, 3, 16, 16))
    y = b.op("nn.relu", b.op("nn.bias_add", conv(b, b.x["x"], 3, 8, 3, stride=2), b.intc(8)))
    y = b.op("nn.max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    z = b.op("nn.relu", b.op("nn.bias_add", conv(b, y, 8, 16, 3, stride=2), b.intc(16)))
    z = b.op("nn.bias_add", conv(b, z, 16, 16, 3), b.intc(16))
    short = conv(b, y, 8, 16, 1, stride=2)
    out = b.op("nn.relu", b.op("add", z, short))
    return b.done(out)


def test_resnet_block_in_nhwc_has_one_transpose_in_and_one_out():
    g = resnet_block_graph()
    out = convert_layout(g, "NHWC")
    assert count(out, "transpose") == 2
    first, last = out.nodes[0], out.nodes[-1]
    assert first.op == "transpose" and first.inputs[0] is out.inputs[0] and tuple(first.attrs["axes"]) == (0, 2, 3, 1)
    assert last.op == "transpose" and last.outputs[0] is out.outputs[0] and tuple(last.attrs["axes"]) == (0, 3, 1, 2)
    for n in out.nodes:
        if n.op == "nn.conv2d":
            assert n.attrs["data_layout"] == "NHWC" and n.attrs["kernel_layout"] == "OHWI" and n.inputs[1].is_constant
        if n.op == "nn.bias_add":
            assert n.attrs["axis"] == 3
        if n.op == "nn.max_pool2d":
            assert n.attrs["layout"] == "NHWC"
    assert out.outputs[0].name == g.outputs[0].name
    assert_bitwise(g, out)
    # and back: converting the NHWC graph to NCHW cancels every transpose
    back = convert_layout(out, "NCHW")
    assert count(back, "transpose") == 0
    assert_bitwise(g, back)


def test_classifier_head_needs_no_transpose_at_the_output():
    b = Builder(x=(2, 4, 8, 8))
    y = b.op("nn.relu", conv(b, b.x["x"], 4, 6))
    y = b.op("nn.global_avg_pool2d", y)
    y = b.op("reshape", y, newshape=(2, 6))  # flatten: only size-1 axes move, no transpose needed
    y = b.op("nn.dense", y, b.intc(5, 6))
    g = b.done(b.op("nn.softmax", y))
    out = convert_layout(g)
    assert count(out, "transpose") == 1
    assert_bitwise(g, out)


def test_an_input_is_transposed_before_the_elementwise_ops_its_convolutions_read():
    """A QDQ model's input quantize (and what follows it up to a convolution) runs in NHWC: the graph
    input is transposed, not the quantized tensor; readers that disagree keep the op in NCHW."""
    b = Builder(x=(1, 3, 8, 8))
    q = b.op("qnn.quantize", b.x["x"], scale=0.5, zero_point=3, out_dtype="uint8")
    d = b.op("qnn.dequantize", q)
    w = b.const(RNG.integers(-1, 2, (4, 3, 3, 3)).astype(np.float32))
    y = b.op("nn.conv2d", d, w, padding=(1, 1, 1, 1))
    g = b.done(b.op("nn.max_pool2d", b.op("nn.relu", b.x["x"]), pool_size=(2, 2)), y)
    out = convert_layout(g)
    first = {n.op: n for n in out.nodes}
    assert first["qnn.quantize"].inputs[0].producer.op == "transpose"
    assert first["qnn.dequantize"].outputs[0].type.shape == (1, 8, 8, 3)
    assert first["nn.relu"].inputs[0].producer.op == "transpose"  # the pool wants NHWC too
    assert count(out, "transpose") == 3  # the input once, and the two outputs back
    assert_bitwise(g, out)

    # the quantized tensor is also a graph output: the quantize stays NCHW, its result is transposed
    b = Builder(x=(1, 3, 8, 8))
    q = b.op("qnn.quantize", b.x["x"], scale=0.5, zero_point=3, out_dtype="uint8")
    y = b.op("nn.conv2d", b.op("qnn.dequantize", q), w, padding=(1, 1, 1, 1))
    g = b.done(q, y)
    out = convert_layout(g)
    (qn,) = [n for n in out.nodes if n.op == "qnn.quantize"]
    assert qn.inputs[0] is out.inputs[0] and qn.outputs[0].type.shape == (1, 3, 8, 8)
    assert_bitwise(g, out)


def test_existing_transposes_are_absorbed_and_cancel():
    """A model written with explicit NHWC transposes around NCHW ops ends up with none inside."""
    b = Builder(x=(1, 8, 8, 4))  # NHWC input
    t = b.op("transpose", b.x["x"], axes=(0, 3, 1, 2))
    y = b.op("nn.relu", conv(b, t, 4, 4))
    y = b.op("transpose", y, axes=(0, 2, 3, 1))
    y = b.op("clip", y, a_min=-1.0, a_max=3.0)
    y = b.op("layout_transform", y, src_layout="NHWC", dst_layout="NCHW")
    y = conv(b, y, 4, 4)
    g = b.done(b.op("transpose", y, axes=(0, 2, 3, 1)))  # NHWC output
    out = convert_layout(g, "NHWC")
    assert count(out, "transpose") == 0 and count(out, "layout_transform") == 0
    assert_bitwise(g, out)


def test_elementwise_with_constants_and_two_outputs():
    b = Builder(x=(1, 3, 6, 6), s=(1, 3, 6, 6))
    y = conv(b, b.x["x"], 3, 4)
    y = b.op("multiply", y, b.intc(4, 1, 1))  # per-channel constant: permuted with the data
    y = b.op("add", y, b.const(np.float32(2.0)))  # scalar: unchanged
    y = b.op("maximum", y, b.intc(1, 4, 6, 6))
    y = b.op("nn.leaky_relu", b.op("sigmoid", b.op("cast", y, dtype="float64")), alpha=0.5)
    side = b.op("subtract", b.x["s"], b.x["s"])  # untouched NCHW branch
    g = b.done(y, b.op("tanh", y), side)
    out = convert_layout(g)
    # one transpose in; each 4-D output that was converted needs one out
    assert count(out, "transpose") == 3
    assert_bitwise(g, out)


def test_axis_ops_pad_concat_mean_split_and_spatial_ops():
    b = Builder(x=(1, 4, 6, 6))
    y = conv(b, b.x["x"], 4, 8)
    y = b.op("nn.pad", y, pad_width=((0, 0), (0, 0), (1, 2), (0, 1)), pad_value=1.0)
    y = b.op(
        "nn.batch_norm", y, b.intc(8, lo=1, hi=2), b.intc(8), b.intc(8), b.const(np.ones(8, np.float32)), epsilon=0.0
    )
    y = b.op("nn.avg_pool2d", y, pool_size=(2, 2), strides=(1, 1), count_include_pad=True, padding=(1, 1, 0, 0))
    a, c = b.op("split", y, indices_or_sections=2, axis=1)
    y = b.op("concatenate", c, a, b.intc(1, 4, 9, 7), axis=1)  # a constant joins, permuted
    y = b.op("nn.depth_to_space", y, block_size=2, mode="CRD")
    y = b.op("image.resize2d", y, size=(11, 13), method="nearest_neighbor")
    m1 = b.op("mean", y, axis=(2, 3), keepdims=False)
    m2 = b.op("mean", y, axis=(1,), keepdims=True)
    m3 = b.op("mean", y, axis=(1, 3), keepdims=False)
    gm = b.op("nn.global_max_pool2d", y)
    g = b.done(m1, m2, m3, gm)
    out = convert_layout(g)
    for node in out.nodes:
        assert node.attrs.get("layout", "NHWC") == "NHWC"
    assert count(out, "transpose") == 3  # input; m2 and gm outputs (4-D); m1 and m3 are already in order
    assert_bitwise(g, out)


def test_normalizations_follow_the_channel_axis():
    """Instance norm and softmax reduce in another order in NHWC: equal up to float rounding."""
    b = Builder(x=(2, 3, 5, 5))
    y = conv(b, b.x["x"], 3, 4)
    y = b.op("nn.instance_norm", y, b.intc(4, lo=1, hi=2), b.intc(4), epsilon=1e-3)
    y = b.op("nn.softmax", y, axis=1)
    g = b.done(b.op("nn.global_max_pool2d", y))
    out = convert_layout(g)
    norm = [n for n in out.nodes if n.op in ("nn.instance_norm", "nn.softmax")]
    assert [n.attrs["axis"] for n in norm] == [3, 3]
    assert count(out, "transpose") == 2
    inputs = int_feeds(g, 0)
    (name,) = [v.name for v in g.outputs]
    np.testing.assert_allclose(accel.execute(out, inputs)[name], accel.execute(g, inputs)[name], rtol=1e-6)


def test_quantized_convs_and_per_axis_quantization():
    xq = TensorType((1, 3, 8, 8), "uint8", QuantParams(0.05, 100))
    b = Builder(x=xq)
    w = b.const(
        RNG.integers(-127, 128, (6, 3, 3, 3)).astype(np.int8), QuantParams(RNG.uniform(0.01, 0.02, 6), 0, axis=0)
    )
    acc = b.op("qnn.conv2d", b.x["x"], w, padding=(1, 1, 1, 1))
    acc = b.op("nn.bias_add", acc, b.const(RNG.integers(-500, 500, 6).astype(np.int32)))
    acc = b.op("nn.relu", acc)
    y = b.op("qnn.requantize", acc, out_scale=0.1, out_zero_point=3, out_dtype="uint8")
    f = b.op("qnn.dequantize", y)
    pq = b.op(
        "qnn.quantize",
        f,
        scale=tuple(RNG.uniform(0.05, 0.2, 6).tolist()),
        zero_point=(1, 2, 3, 4, 5, 6),
        axis=1,
        out_dtype="uint8",
    )
    back = b.op("qnn.dequantize", pq)
    wt = b.const(RNG.integers(-127, 128, (6, 2, 3, 3)).astype(np.int8), QuantParams(0.01, 0))
    up = b.op("qnn.conv2d_transpose", y, wt, strides=(2, 2), padding=(1, 1, 0, 0), output_padding=(1, 1))
    g = b.done(back, acc, up)
    out = convert_layout(g)
    (pqn,) = [n for n in out.nodes if n.op == "qnn.quantize"]
    assert pqn.attrs["axis"] == 3 and pqn.outputs[0].type.quant.axis == 3
    (qc,) = [n for n in out.nodes if n.op == "qnn.conv2d"]
    assert qc.inputs[1].type.quant.axis == 0 and qc.outputs[0].type.quant.axis == 3
    (qt,) = [n for n in out.nodes if n.op == "qnn.conv2d_transpose"]
    assert qt.attrs["kernel_layout"] == "OHWI" and qt.attrs["data_layout"] == "NHWC"
    assert count(out, "transpose") == 4
    assert_bitwise(g, out)


def test_conv_transpose_grouped_and_nhwc_to_nchw():
    b = Builder(x=(1, 5, 5, 4))
    w = b.intc(2, 3, 3, 4)  # OHWI: [C_out/groups, kh, kw, C_in]
    y = b.op("nn.conv2d_transpose", b.x["x"], w, strides=(2, 2), data_layout="NHWC", kernel_layout="OHWI")
    w2 = b.intc(3, 3, 2, 4)  # HWIO (conv2d)
    y = b.op("nn.conv2d", y, w2, groups=1, data_layout="NHWC", kernel_layout="HWIO", padding=(1, 1, 1, 1))
    g4 = b.intc(4, 1, 2, 2)  # grouped transposed conv, IOHW
    z = b.op("nn.conv2d_transpose", b.op("transpose", y, axes=(0, 3, 1, 2)), g4, groups=2)
    g = b.done(y, z)
    out = convert_layout(g, "NCHW")
    kinds = {(n.op, n.attrs.get("kernel_layout")) for n in out.nodes if "conv" in n.op}
    assert kinds == {("nn.conv2d_transpose", "IOHW"), ("nn.conv2d", "OIHW")}
    assert_bitwise(g, out)
    again = convert_layout(out, "NHWC")
    assert_bitwise(g, again)


def test_any_graph_converts_and_unknown_layouts_are_refused():
    b = Builder(x=(2, 3, 4))
    y = b.op("nn.softmax", b.op("transpose", b.x["x"], axes=(2, 0, 1)), axis=0)
    g = b.done(b.op("reshape", y, newshape=(4, 6)))
    out = convert_layout(g)
    assert_bitwise(g, out)
    with pytest.raises(GraphError, match="layout 'NCWH'"):
        convert_layout(g, "NCWH")


def test_batch_norm_folded_resnet_block_converts():
    """The partitioner's order: simplify (BN folded), then convert a region."""
    b = Builder(x=(1, 4, 8, 8))
    y = conv(b, b.x["x"], 4, 4)
    y = b.op(
        "nn.batch_norm", y, b.intc(4, lo=1, hi=2), b.intc(4), b.intc(4), b.const(np.ones(4, np.float32)), epsilon=0.0
    )
    g = b.done(b.op("add", b.op("nn.relu", y), b.x["x"]))
    out = convert_layout(fold_batch_norm(g))
    assert count(out, "transpose") == 2 and count(out, "nn.batch_norm") == 0
    assert_bitwise(g, out)
