"""qdq_to_qnn: QDQ groups become qnn ops that agree with the float QDQ graph (and ONNX Runtime) within ±1.

Hand-built IR graphs check each group kind and each refusal; models quantized
by ONNX Runtime's ``quantize_static`` check the whole path (import, simplify)
against ONNX Runtime.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_helpers import ort_session

import accel
from accel.builder import GraphBuilder
from accel.ir import Graph, QuantParams, TensorType, Value
from accel.ops.registry import OpContext, get_op
from accel.passes import fold_constants, qdq_to_qnn, simplify

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(99)
U8 = "uint8"


class Builder(GraphBuilder):
    def dq(self, v: Value) -> Value:
        return self.op("qnn.dequantize", v)

    def q(self, v: Value, scale: float, zp: int, dtype: str = U8) -> Value:
        return self.op("qnn.quantize", v, scale=scale, zero_point=zp, out_dtype=dtype)

    def weight(self, *shape: int, per_channel: bool = True, dtype: str = "int8") -> Value:
        lo, hi = (-127, 127) if dtype == "int8" else (0, 255)
        data = RNG.integers(lo, hi + 1, shape).astype(dtype)
        if per_channel:
            quant = QuantParams(
                RNG.uniform(0.004, 0.01, shape[0]).astype(np.float32), 0 if dtype == "int8" else 128, axis=0
            )
        else:
            quant = QuantParams(0.007, 0 if dtype == "int8" else 128)
        return self.const(data, quant)


def qt(shape: tuple[int, ...], scale: float = 0.05, zp: int = 128, dtype: str = U8) -> TensorType:
    return TensorType(shape, dtype, QuantParams(scale, zp))


def q_feeds(g: Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for v in g.inputs:
        if v.type.dtype in (U8, "int8"):
            lo, hi = (0, 255) if v.type.dtype == U8 else (-128, 127)
            out[v.name] = rng.integers(lo, hi + 1, v.type.shape).astype(v.type.dtype)
        else:
            out[v.name] = rng.standard_normal(v.type.shape).astype(v.type.dtype)
    return out


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def assert_within_one(a: Graph, b: Graph, seeds: tuple[int, ...] = (0, 1, 2)) -> None:
    """Same output names and types; quantized outputs differ by at most 1."""
    for seed in seeds:
        inputs = q_feeds(a, seed)
        ra, rb = accel.execute(a, inputs), accel.execute(b, inputs)
        assert list(ra) == list(rb)
        for name in ra:
            assert ra[name].dtype == rb[name].dtype and ra[name].shape == rb[name].shape, name
            diff = np.abs(ra[name].astype(np.int64) - rb[name].astype(np.int64))
            assert diff.max() <= 1, f"{name}: off by {diff.max()}"


# --------------------------------------------------------------------------------------
# convolution / dense groups


@pytest.mark.parametrize("per_channel", [True, False])
def test_conv_group_with_int32_bias_and_relu(per_channel):
    b = Builder(x=qt((1, 4, 9, 9)))
    w = b.weight(8, 4, 3, 3, per_channel=per_channel)
    acc_scale = (np.float32(0.05) * w.type.quant.scale).astype(np.float32)
    bias = b.const(
        RNG.integers(-3000, 3000, 8).astype(np.int32),
        QuantParams(acc_scale, 0, axis=0 if per_channel else None),
    )
    y = b.op("nn.conv2d", b.dq(b.x["x"]), b.dq(w), padding=(1, 1, 1, 1), strides=(2, 2))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.dq(bias)))
    g = b.done(b.q(y, 0.04, 10))
    out = qdq_to_qnn(g)
    assert ops(out) == ["qnn.conv2d", "nn.bias_add", "nn.relu", "qnn.requantize"]
    conv, bias_add = out.nodes[0], out.nodes[1]
    assert conv.inputs[1].const is w.const  # the int8 weight itself, not a copy
    np.testing.assert_array_equal(bias_add.inputs[1].const, bias.const)  # already in the accumulator scale
    assert out.outputs[0].name == g.outputs[0].name
    assert_within_one(g, out)


def test_conv_group_float_bias_relu6_and_uint8_weights():
    b = Builder(x=qt((2, 3, 7, 7), 0.03, 100))
    w = b.weight(6, 3, 3, 3, per_channel=False, dtype=U8)
    y = b.op("nn.conv2d", b.dq(b.x["x"]), b.dq(w))
    fbias = RNG.normal(0, 2.0, (6, 1, 1)).astype(np.float32)
    y = b.op("add", y, b.const(fbias))  # float bias, as a broadcast add
    y = b.op("clip", y, a_min=0.0, a_max=6.0)
    g = b.done(b.q(y, 6.0 / 255, 0))  # the output range is exactly [0, 6]: clip is a relu
    out = qdq_to_qnn(g)
    assert ops(out) == ["qnn.conv2d", "nn.bias_add", "nn.relu", "qnn.requantize"]
    acc_scale = np.float64(np.float32(0.03) * np.float32(0.007))
    np.testing.assert_array_equal(out.nodes[1].inputs[1].const, np.rint(fbias.reshape(6) / acc_scale).astype(np.int32))
    assert_within_one(g, out)


def test_activation_absorbed_by_the_output_range():
    """A clip whose bounds quantize to the ends of the output range needs no op at all."""
    b = Builder(x=qt((1, 2, 5, 5)))
    y = b.op("nn.conv2d", b.dq(b.x["x"]), b.dq(b.weight(2, 2, 1, 1)))
    g = b.done(b.q(b.op("clip", y, a_min=-100.0, a_max=100.0), 0.05, 128))
    out = qdq_to_qnn(g)
    assert ops(out) == ["qnn.conv2d", "qnn.requantize"]
    assert_within_one(g, out)


def test_clip_the_quantize_cannot_express_keeps_the_group():
    b = Builder(x=qt((1, 2, 5, 5)))
    y = b.op("nn.conv2d", b.dq(b.x["x"]), b.dq(b.weight(2, 2, 1, 1)))
    g = b.done(b.q(b.op("clip", y, a_min=0.0, a_max=2.0), 6.0 / 255, 0))  # range [0, 6], clip at 2
    out = qdq_to_qnn(g)
    assert "qnn.conv2d" not in ops(out) and "clip" in ops(out)
    assert_within_one(g, out, seeds=(0,))


def test_dense_group_through_a_transposed_weight_with_a_rescaled_bias():
    """MatMul-style dense(x, transpose(DQ(w[K, N]))) and an int32 bias in a slightly different scale."""
    b = Builder(x=qt((3, 16), 0.02, 120))
    wkn = b.const(
        RNG.integers(-127, 128, (16, 10)).astype(np.int8), QuantParams(RNG.uniform(0.005, 0.01, 10), 0, axis=1)
    )
    w = b.op("transpose", b.dq(wkn), axes=(1, 0))
    y = b.op("nn.dense", b.dq(b.x["x"]), w)
    bias = b.const(RNG.integers(-500, 500, 10).astype(np.int32), QuantParams(0.0002, 0))
    y = b.op("add", y, b.dq(bias))
    g = b.done(b.q(y, 0.03, 128))
    out = qdq_to_qnn(g)
    assert ops(out) == ["qnn.dense", "nn.bias_add", "qnn.requantize"]
    dense = out.nodes[0]
    assert dense.inputs[1].type.shape == (10, 16) and dense.inputs[1].type.quant.axis == 0
    acc_scale = (np.float32(0.02) * wkn.type.quant.scale).astype(np.float64)
    expected = np.rint(bias.const * np.float64(np.float32(0.0002)) / acc_scale).astype(np.int32)
    np.testing.assert_array_equal(out.nodes[1].inputs[1].const, expected)
    assert_within_one(g, out)


def test_transposed_conv_group():
    b = Builder(x=qt((1, 4, 5, 5)))
    w = b.const(
        RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), QuantParams(RNG.uniform(0.004, 0.01, 3), 0, axis=1)
    )
    y = b.op(
        "nn.conv2d_transpose", b.dq(b.x["x"]), b.dq(w), strides=(2, 2), padding=(1, 1, 1, 1), output_padding=(1, 1)
    )
    y = b.op("nn.bias_add", y, b.const(np.float32([0.1, -0.2, 0.3])))
    g = b.done(b.q(y, 0.05, 128))
    out = qdq_to_qnn(g)
    assert ops(out) == ["qnn.conv2d_transpose", "nn.bias_add", "qnn.requantize"]
    assert_within_one(g, out)


def test_float_op_read_twice_is_left_in_float():
    b = Builder(x=qt((1, 2, 5, 5)))
    y = b.op("nn.conv2d", b.dq(b.x["x"]), b.dq(b.weight(2, 2, 1, 1)))
    g = b.done(b.q(y, 0.05, 128), y)  # the float conv output is also a graph output
    out = qdq_to_qnn(g)
    assert ops(out) == ops(g)
    assert_within_one(g, out, seeds=(0,))


# --------------------------------------------------------------------------------------
# elementwise, concatenate, data movement, averages


def test_add_mul_concat_groups():
    b = Builder(a=qt((1, 4, 3, 3), 0.05, 128), c=qt((1, 4, 3, 3), 0.08, 100))
    s = b.q(b.op("add", b.dq(b.x["a"]), b.dq(b.x["c"])), 0.1, 120)
    k = b.const(RNG.integers(0, 256, (1, 4, 1, 1)).astype(np.uint8), QuantParams(0.02, 128))
    m = b.q(b.op("multiply", b.dq(s), b.dq(k)), 0.02, 128)
    r = b.q(b.op("nn.relu", b.op("add", b.dq(m), b.dq(b.x["a"]))), 0.05, 0)  # relu: zero point is the minimum
    cat = b.q(b.op("concatenate", b.dq(r), b.dq(b.x["c"]), axis=1), 0.07, 110)
    g = b.done(cat)
    out = qdq_to_qnn(g)
    assert ops(out) == ["qnn.add", "qnn.mul", "qnn.add", "qnn.concatenate"]
    assert out.nodes[1].inputs[1].const is k.const  # the quantized constant is used as is
    assert_within_one(g, out)


def test_data_movement_runs_on_the_stored_integers():
    b = Builder(x=qt((1, 4, 6, 6), 0.05, 128))
    x = b.x["x"]
    p = b.q(b.op("nn.max_pool2d", b.dq(x), pool_size=(2, 2), strides=(2, 2)), 0.05, 128)  # same parameters
    r = b.q(b.op("reshape", b.dq(p), newshape=(1, 36)), 0.04, 130)  # new parameters: requantize
    t = b.q(b.op("transpose", b.dq(x), axes=(0, 2, 3, 1)), 0.05, 128)
    relu = b.q(b.op("nn.relu", b.dq(x)), 0.05, 128)
    clip = b.q(b.op("clip", b.dq(x), a_min=-1.0, a_max=2.0), 0.05, 128)
    same = b.q(b.dq(x), 0.05, 128)  # DQ -> Q with equal parameters: nothing left
    other = b.q(b.dq(x), 0.1, 3, "int8")  # DQ -> Q with other parameters: requantize
    g = b.done(r, t, relu, clip, same, other)
    out = qdq_to_qnn(g)
    expected = ["nn.max_pool2d", "reshape", "qnn.requantize", "transpose", "nn.relu", "clip", "qnn.requantize"]
    # `same` became the graph input itself: an output keeps its name through a copy (identity reshape)
    assert sorted(ops(out)) == sorted([*expected, "reshape"])
    assert "qnn.dequantize" not in ops(out) and "qnn.quantize" not in ops(out)
    assert [v.name for v in out.outputs] == [v.name for v in g.outputs]
    for seed in (0, 1):  # value movement on equal parameters is exact; requantize within 1
        inputs = q_feeds(g, seed)
        ra, rb = accel.execute(g, inputs), accel.execute(out, inputs)
        for name, exact in zip(ra, (False, True, True, True, True, False), strict=True):
            diff = np.abs(ra[name].astype(int) - rb[name].astype(int)).max()
            assert diff == 0 if exact else diff <= 1, name


def test_averages_accumulate_in_int32():
    b = Builder(x=qt((1, 3, 6, 6), 0.05, 128))
    x = b.x["x"]
    a = b.q(b.op("nn.avg_pool2d", b.dq(x), pool_size=(3, 3), padding=(1, 1, 1, 1)), 0.05, 128)
    gp = b.q(b.op("nn.global_avg_pool2d", b.dq(x)), 0.01, 128)
    m = b.q(b.op("mean", b.dq(x), axis=(1,), keepdims=True), 0.05, 128)
    g = b.done(a, gp, m)
    out = qdq_to_qnn(g)
    pools = [n for n in out.nodes if n.op in ("nn.avg_pool2d", "nn.global_avg_pool2d", "mean")]
    assert len(pools) == 3 and all(n.inputs[0].type.dtype == "int32" for n in pools)
    # averaged in the input's units (cast) unless the output is finer (an exact int32 requantize)
    assert [n.inputs[0].producer.op for n in pools] == ["cast", "qnn.requantize", "cast"]
    assert "qnn.dequantize" not in ops(out)
    assert_within_one(g, out)


def test_averages_keep_precision_for_finer_outputs_and_counted_padding():
    """Output finer than the input, or padding that counts: an exact int32 requantize (zero point 0) first."""
    b = Builder(x=qt((1, 3, 6, 6), 0.05, 128))
    x = b.x["x"]
    fine = b.q(b.op("nn.global_avg_pool2d", b.dq(x)), 0.006, 128)  # s_in / s_out = 8.3: 4 more bits
    padded = b.q(
        b.op("nn.avg_pool2d", b.dq(x), pool_size=(3, 3), padding=(1, 1, 1, 1), count_include_pad=True), 0.05, 128
    )
    g = b.done(fine, padded)
    out = qdq_to_qnn(g)
    widen = [n for n in out.nodes if n.op == "qnn.requantize" and n.outputs[0].type.dtype == "int32"]
    assert len(widen) == 2 and "qnn.dequantize" not in ops(out)
    # 4 bits to reach the finer output scale, then 12 more so the mean rounds once, at the requantize
    assert sorted(float(n.attrs["out_scale"]) for n in widen) == pytest.approx([0.05 / 2**16, 0.05 / 2**12])
    assert_within_one(g, out)


def test_fold_constants_before_qdq_to_qnn_changes_nothing():
    b = Builder(x=qt((1, 4, 6, 6)))
    w = b.op("reshape", b.dq(b.weight(8, 36)), newshape=(8, 4, 3, 3))  # a reshaped quantized weight
    y = b.op("nn.conv2d", b.dq(b.x["x"]), w)
    head = b.op("nn.dense", b.op("reshape", b.dq(b.q(y, 0.05, 128)), newshape=(1, 128)), b.dq(b.weight(3, 128)))
    g = b.done(head)
    direct = qdq_to_qnn(g)
    folded_first = qdq_to_qnn(fold_constants(g))
    assert ops(direct)[:2] == ["qnn.conv2d", "qnn.requantize"]
    assert ops(folded_first)[:2] == ["qnn.conv2d", "qnn.requantize"]
    inputs = q_feeds(g, 0)
    (name,) = accel.execute(g, inputs)
    np.testing.assert_array_equal(accel.execute(direct, inputs)[name], accel.execute(folded_first, inputs)[name])


# --------------------------------------------------------------------------------------
# models quantized by ONNX Runtime


def _init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr.astype(np.float32), name)


def _small_net() -> onnx.ModelProto:
    """Conv+Relu, MaxPool, Conv, residual Add, Relu, GlobalAveragePool, Flatten, Gemm."""
    rng = np.random.default_rng(5)
    inits = [
        _init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _init("b1", rng.normal(0, 0.1, 8)),
        _init("w2", rng.normal(0, 0.2, (8, 8, 3, 3))),
        _init("b2", rng.normal(0, 0.1, 8)),
        _init("wf", rng.normal(0, 0.3, (4, 8))),
        _init("bf", rng.normal(0, 0.1, 4)),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        n("Add", ["c2", "p1"], ["a"]),
        n("Relu", ["a"], ["r2"]),
        n("GlobalAveragePool", ["r2"], ["gp"]),
        n("Flatten", ["gp"], ["f"]),
        n("Gemm", ["f", "wf", "bf"], ["output"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 12, 12])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _conv_only() -> onnx.ModelProto:
    rng = np.random.default_rng(6)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["input", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["output"]),
        ],
        "conv",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 12, 12])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8, 12, 12])],
        [_init("w", rng.normal(0, 0.3, (8, 3, 3, 3))), _init("b", rng.normal(0, 0.1, 8))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _quantize(model: onnx.ModelProto, *, reduce_range: bool) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)
    feeds = [{"input": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(8)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "m.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(model, src)
        quantize_static(
            src,
            dst,
            Reader(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=reduce_range,
        )
        return onnx.load(dst)


def _no_float_groups(g: Graph) -> None:
    """No dequantize -> float conv/dense -> quantize group is left."""
    assert not {"nn.conv2d", "nn.dense", "nn.conv2d_transpose", "add"} & set(ops(g))
    # the only dequantize left produces the model's float output
    dq = [n for n in g.nodes if n.op == "qnn.dequantize"]
    assert all(n.output in g.outputs for n in dq)


def _output_scale(g: Graph) -> float:
    (dq,) = [n for n in g.nodes if n.op == "qnn.dequantize"]
    return float(dq.inputs[0].type.quant.scale)


def test_ort_quantized_conv_matches_onnxruntime_within_one():
    """Against ONNX Runtime's integer kernels. ``reduce_range`` keeps ORT's u8·s8 kernel clear of
    its int16 pair-sum saturation on x86 (with full-range weights ORT itself is off by tens of steps)."""
    q = _quantize(_conv_only(), reduce_range=True)
    g = simplify(accel.import_onnx(q, optimize=False))
    assert ops(g) == ["qnn.quantize", "qnn.conv2d", "nn.bias_add", "qnn.requantize", "qnn.dequantize"]
    sess = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    scale = _output_scale(g)
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = {"input": rng.standard_normal((1, 3, 12, 12)).astype(np.float32) * 1.5}
        ref = sess.run(None, x)[0]
        got = accel.execute(g, x)["output"]
        assert np.abs(got - ref).max() / scale <= 1.0 + 1e-3


def _ort_quantized_values(model: onnx.ModelProto, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every QuantizeLinear output of a QDQ model, as ONNX Runtime computes it (QDQ reference semantics)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    names = [n.output[0] for n in m.graph.node if n.op_type == "QuantizeLinear"]
    m.graph.output.extend(helper.make_tensor_value_info(name, TensorProto.UINT8, None) for name in names)
    outs = ort_session(m, optimize=False).run(names, x)
    return dict(zip(names, outs, strict=True))


def _teacher_forced(g: Graph, x: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> dict[str, int]:
    """Run each node of ``g`` on the reference values of its inputs (matched by name and type);
    return, per quantized output that has a reference, the largest difference."""
    own: dict[str, np.ndarray] = dict(x)
    diffs: dict[str, int] = {}
    for node in g.nodes:
        args = []
        for v in node.inputs:
            r = ref.get(v.name)
            if v.const is not None:
                args.append(v.const)
            elif r is not None and r.dtype.name == v.type.dtype and r.shape == v.type.shape:
                args.append(r)
            else:
                args.append(own[v.name])
        (y,) = (get_op(node.op).bind(OpContext.of(node))(*args),)
        out = node.outputs[0]
        own[out.name] = y
        r = ref.get(out.name)
        if r is not None and r.dtype == y.dtype and r.shape == y.shape:
            diffs[out.name] = int(np.abs(r.astype(np.int64) - y.astype(np.int64)).max())
    return diffs


@pytest.mark.parametrize("model", ["small", "resnet18"])
def test_ort_quantized_network_layer_by_layer_within_one(model):
    """Each rewritten group, fed ONNX Runtime's quantized inputs, gives ONNX Runtime's quantized output ±1."""
    if model == "small":
        q = _quantize(_small_net(), reduce_range=False)
        x = {"input": np.random.default_rng(2).standard_normal((1, 3, 12, 12)).astype(np.float32)}
    else:
        from accel.testing import modelgen

        fp = modelgen.resnet18(32, num_classes=10)
        q = modelgen.quantize_qdq(fp, 2)
        x = modelgen.random_inputs(fp, 1, seed=4)[0]
    g = simplify(accel.import_onnx(q, optimize=False))
    _no_float_groups(g)
    if model == "resnet18":
        counts = {
            op: ops(g).count(op)
            for op in ("qnn.conv2d", "qnn.add", "qnn.dense", "nn.max_pool2d", "nn.global_avg_pool2d")
        }
        assert counts == {"qnn.conv2d": 20, "qnn.add": 8, "qnn.dense": 1, "nn.max_pool2d": 1, "nn.global_avg_pool2d": 1}
    ref = _ort_quantized_values(q, x)
    diffs = _teacher_forced(g, x, ref)
    requantized = [
        n.outputs[0].name
        for n in g.nodes
        if n.op in ("qnn.requantize", "qnn.add", "nn.max_pool2d") and n.outputs[0].type.dtype == "uint8"
    ]
    assert requantized and all(name in diffs for name in requantized)  # every group was compared
    assert max(diffs.values()) <= 1, {k: v for k, v in diffs.items() if v > 1}
    if model == "small":
        # end to end, the ±1 of each layer may add up, but stays a few steps on a shallow network
        sess = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
        ours = accel.execute(g, x)
        (name,) = ours
        assert np.abs(ours[name] - sess.run(None, x)[0]).max() / _output_scale(g) <= 3.0 + 1e-3
