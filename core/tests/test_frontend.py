"""The ONNX frontend: small models built with onnx.helper, imported, run on the
reference executor and compared with ONNX Runtime; plus the shape of the
graphs it builds (which IR ops, which constants, which names)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_helpers import ort_outputs

import accel
from accel.errors import ExternalDataError, ModelError, UnsupportedOpError
from accel.frontend.onnx import SUPPORTED_OPS, ConstantOperandRequired, import_model
from accel.testing import modelgen

RNG = np.random.default_rng(1234)


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, tuple[Sequence[int | str | None], int]],
    outputs: Sequence[str],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(k, t, s) for k, (s, t) in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    # type the outputs (ONNX Runtime wants them) from onnx's shape inference
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in model.graph.output:
        if out.name in types and types[out.name].type.HasField("tensor_type"):
            out.type.CopyFrom(types[out.name].type)
    return model


def check(
    model: onnx.ModelProto,
    feed: dict[str, np.ndarray],
    *,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    int_tol: int = 0,
    optimize: bool = False,
) -> accel.Graph:
    """Import, lint, run; compare every output with ONNX Runtime. Returns the graph."""
    graph = accel.import_onnx(model, optimize=optimize)
    graph.lint()
    got = accel.execute(graph, feed)
    want = ort_outputs(model, feed, optimize=False)
    assert list(got) == [o.name for o in model.graph.output]
    for (name, a), b in zip(got.items(), want, strict=False):
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, a.shape, b.dtype, b.shape)
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=name)
        else:
            diff = np.abs(a.astype(np.int64) - b.astype(np.int64))
            assert diff.max(initial=0) <= int_tol, (name, diff.max())
    return graph


def ops(graph: accel.Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


F = TensorProto.FLOAT


# -- a small CNN, end to end ----------------------------------------------------------


def test_cnn_with_symbolic_batch_matches_ort() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "g", "be", "mu", "var"], ["bn"], epsilon=1e-3),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], group=4, auto_pad="SAME_UPPER", strides=[2, 2]),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc", "fcb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"]),
    ]
    inits = {
        "w1": f32(8, 3, 3, 3),
        "b1": f32(8),
        "g": f32(8),
        "be": f32(8),
        "mu": f32(8),
        "var": np.abs(f32(8)) + 0.5,
        "w2": f32(8, 2, 3, 3),
        "lo": np.array(0, np.float32),
        "hi": np.array(6, np.float32),
        "fc": f32(10, 8),
        "fcb": f32(10),
    }
    model = make_model(nodes, {"x": (["N", 3, 16, 16], F)}, ["prob"], inits)
    graph = check(model, {"x": f32(1, 3, 16, 16)})
    assert graph.inputs[0].type.shape == (1, 3, 16, 16)  # symbolic batch defaults to 1
    assert ops(graph) == [
        "nn.conv2d",
        "nn.bias_add",
        "nn.batch_norm",
        "nn.relu",
        "nn.max_pool2d",
        "nn.conv2d",
        "clip",
        "nn.global_avg_pool2d",
        "reshape",
        "nn.dense",
        "nn.bias_add",
        "nn.softmax",
    ]
    clip = graph.nodes[6]
    assert clip.attrs["a_min"] == 0.0 and clip.attrs["a_max"] == 6.0
    # names are the ONNX names
    assert {"c1", "bn", "r1", "p1", "c2", "r2", "gap", "flat", "logits", "prob"} <= {v.name for v in graph.values()}
    assert graph.nodes[0].name == "conv1"
    # the simplification passes keep the result
    check(model, {"x": f32(1, 3, 16, 16)}, optimize=True)


def test_input_shapes_bind_symbolic_dims() -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (["N", "C", 4], F)}, ["y"])
    with pytest.raises(ModelError, match=r"input 'x' has an unknown dimension 'C' at axis 1: pass input_shapes"):
        import_model(model)
    graph = import_model(model, input_shapes={"x": (2, 3, 4)})
    assert graph.inputs[0].type.shape == (2, 3, 4)
    with pytest.raises(ModelError, match="disagrees"):
        import_model(model, input_shapes={"x": (2, 3, 5)})
    with pytest.raises(ModelError, match="rank"):
        import_model(model, input_shapes={"x": (2, 3)})
    with pytest.raises(ModelError, match="not an input"):
        import_model(model, input_shapes={"z": (1,)})


# -- dense / matmul ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "trans_a,trans_b,alpha,beta", [(0, 0, 1.0, 1.0), (1, 0, 0.5, 2.0), (0, 1, 2.0, 0.0), (1, 1, 1.0, 0.5)]
)
@pytest.mark.parametrize("const_b", [True, False])
def test_gemm(trans_a: int, trans_b: int, alpha: float, beta: float, const_b: bool) -> None:
    a = f32(5, 4) if trans_a else f32(4, 5)
    b = f32(3, 5) if trans_b else f32(5, 3)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    inputs = {"a": ([*a.shape], F)}
    inits = {"c": f32(3)}
    feed = {"a": a}
    if const_b:
        inits["b"] = b
    else:
        inputs["b"] = ([*b.shape], F)
        feed["b"] = b
    graph = check(make_model([node], inputs, ["y"], inits), feed)
    dense = next(n for n in graph.nodes if n.op == "nn.dense")
    if const_b:  # transposed (and scaled) at import: weight is a constant [N, K]
        assert dense.inputs[1].is_constant and dense.inputs[1].type.shape == (3, 5)
        assert "multiply" not in ops(graph)
        assert ops(graph)[-1] == ("nn.bias_add" if beta else "nn.dense")


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((4, 6), (6, 3)),
        ((2, 4, 6), (6, 3)),
        ((2, 4, 6), (2, 6, 3)),
        ((6,), (6, 3)),
        ((3, 1, 4, 6), (2, 6, 5)),
        ((2, 4, 6), (6,)),
        ((6,), (6,)),
    ],
)
def test_matmul(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = f32(*sa), f32(*sb)
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": (sa, F), "b": (sb, F)}, ["y"])
    graph = check(model, {"a": a, "b": b})
    assert "nn.batch_matmul" in ops(graph)
    # a constant 2-D B becomes nn.dense with weight = B.T
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": (sa, F)}, ["y"], {"b": b})
    graph = check(model, {"a": a})
    if len(sb) == 2:
        dense = next(n for n in graph.nodes if n.op == "nn.dense")
        np.testing.assert_array_equal(dense.inputs[1].const, b.T)
        assert "nn.batch_matmul" not in ops(graph)


# -- shape computations fold at import -------------------------------------------------


def test_shape_chain_folds_to_a_reshape() -> None:
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Slice", ["s", "two", "four"], ["hw"]),
        helper.make_node("ReduceProd", ["hw"], ["p"], keepdims=1),
        helper.make_node("Mul", ["p", "three"], ["k"]),
        helper.make_node("Concat", ["n1", "k"], ["shape"], axis=0),
        helper.make_node("Cast", ["shape"], ["shape_f"], to=F),
        helper.make_node("Cast", ["shape_f"], ["shape_i"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["x", "shape_i"], ["y"]),
        helper.make_node("ConstantOfShape", ["n1"], ["ones"], value=helper.make_tensor("v", F, [1], [2.0])),
        helper.make_node("Unsqueeze", ["ones", "ax1"], ["ones2"]),
        helper.make_node("Mul", ["y", "ones2"], ["z"]),
    ]
    inits = {"zero": np.array(0, np.int64), "ax": i64(0), "ax1": i64(1), "two": i64(2), "four": i64(4), "three": i64(3)}
    model = make_model(nodes, {"x": ([2, 3, 4, 5], F)}, ["z"], inits, opset=17)
    graph = check(model, {"x": f32(2, 3, 4, 5)})
    assert ops(graph) == ["reshape", "multiply"]
    assert graph.nodes[0].attrs["newshape"] == (2, 60)


def test_constant_graph_output_and_identity_names() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Identity", ["x"], ["same"]),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Identity", ["r"], ["r2"]),
    ]
    model = make_model(nodes, {"x": ([2, 3], F)}, ["s", "same", "r2", "r"])
    graph = check(model, {"x": f32(2, 3)})
    assert [v.name for v in graph.outputs] == ["s", "same", "r2", "r"]
    assert graph.outputs[0].is_constant


# -- quantized models --------------------------------------------------------------------


def _qparams(x: np.ndarray, dtype: str = "uint8") -> tuple[np.ndarray, np.ndarray]:
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    qmin, qmax = (0, 255) if dtype == "uint8" else (-128, 127)
    scale = np.float32((hi - lo) / (qmax - qmin))
    zp = np.array(round(qmin - lo / scale), dtype=dtype)
    return np.array(scale, np.float32), zp


def test_dequantize_of_constant_stays_a_node_with_quant_params() -> None:
    w = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    ws = (RNG.random(4) * 0.01 + 0.001).astype(np.float32)
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
        helper.make_node("Conv", ["x", "wf"], ["y"]),
    ]
    model = make_model(nodes, {"x": ([1, 3, 8, 8], F)}, ["y"], {"w": w, "ws": ws, "wz": np.zeros(4, np.int8)}, opset=13)
    graph = check(model, {"x": f32(1, 3, 8, 8)})
    dq = graph.nodes[0]
    assert dq.op == "qnn.dequantize"
    q = dq.inputs[0].type.quant
    assert dq.inputs[0].is_constant and q is not None and q.axis == 0
    np.testing.assert_array_equal(q.scale, ws)


def test_qdq_model_matches_ort() -> None:
    x = f32(1, 3, 8, 8)
    xs, xz = _qparams(x)
    w = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
        helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    inits = {"xs": xs, "xz": xz, "w": w, "ws": np.array(0.02, np.float32)}
    model = make_model(nodes, {"x": ([1, 3, 8, 8], F)}, ["y"], inits, opset=13)
    graph = check(model, {"x": x}, rtol=1e-4, atol=1e-4)
    assert ops(graph)[:3] == ["qnn.quantize", "qnn.dequantize", "qnn.dequantize"]
    check(model, {"x": x}, rtol=1e-4, atol=1e-4, optimize=True)


def test_qlinear_conv_and_matmul_match_ort_within_one() -> None:
    # |w| <= 63: ORT's x86 u8s8 kernels add pairs of products in int16, which saturates beyond that
    x = RNG.integers(0, 256, (1, 3, 9, 9)).astype(np.uint8)
    w = RNG.integers(-63, 64, (6, 3, 3, 3)).astype(np.int8)
    bias = RNG.integers(-500, 500, 6).astype(np.int32)
    b = RNG.integers(-63, 64, (6, 5)).astype(np.int8)
    inits = {
        "xs": np.array(0.02, np.float32),
        "xz": np.array(120, np.uint8),
        "w": w,
        "ws": (RNG.random(6) * 0.01 + 0.002).astype(np.float32),
        "wz": np.zeros(6, np.int8),
        "ys": np.array(0.05, np.float32),
        "yz": np.array(128, np.uint8),
        "bias": bias,
        "b": b,
        "bs": np.array(0.01, np.float32),
        "bz": np.array(0, np.int8),
        "zs": np.array(0.3, np.float32),
        "zz": np.array(100, np.uint8),
    }
    nodes = [
        helper.make_node(
            "QLinearConv",
            ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"],
            ["y"],
            pads=[1, 1, 1, 1],
            strides=[2, 2],
        ),
        helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 3, 1]),
        helper.make_node("QLinearMatMul", ["yt", "ys", "yz", "b", "bs", "bz", "zs", "zz"], ["z"]),
    ]
    model = make_model(nodes, {"x": ([1, 3, 9, 9], TensorProto.UINT8)}, ["y", "z"], inits, opset=13)
    graph = check(model, {"x": x}, int_tol=1)
    assert ops(graph) == ["qnn.conv2d", "nn.bias_add", "qnn.requantize", "transpose", "qnn.dense", "qnn.requantize"]


def test_a_graph_input_already_read_keeps_its_type_when_dequantized_later() -> None:
    """A uint8 graph input that DequantizeLinear reads first takes the quantization in its type; one
    that another node has read already keeps its plain type, and the dequantization is spelled out."""
    x = RNG.integers(0, 256, (2, 5)).astype(np.uint8)
    inits = {"s": np.array(0.1, np.float32), "z": np.array(7, np.uint8)}
    dq = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"])
    cast = helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT)
    add = helper.make_node("Add", ["c", "d"], ["y"])
    first = check(make_model([dq, cast, add], {"x": ([2, 5], TensorProto.UINT8)}, ["y"], inits, opset=13), {"x": x})
    assert first.inputs[0].type.quant is not None and ops(first)[0] == "qnn.dequantize"
    later = check(make_model([cast, dq, add], {"x": ([2, 5], TensorProto.UINT8)}, ["y"], inits, opset=13), {"x": x})
    assert later.inputs[0].type.quant is None
    assert "qnn.dequantize" not in ops(later) and {"subtract", "multiply"} <= set(ops(later))


# -- pooling, padding, resize, activations --------------------------------------------------


def test_lppool_p2_lowers_to_power_avgpool_multiply_sqrt() -> None:
    model = make_model(
        [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[1, 2], p=2, pads=[1, 0, 1, 0])],
        {"x": ([1, 2, 6, 6], F)},
        ["y"],
        opset=18,
    )
    graph = check(model, {"x": f32(1, 2, 6, 6)})
    assert ops(graph) == ["power", "nn.avg_pool2d", "multiply", "sqrt"]
    assert graph.nodes[1].attrs["count_include_pad"] is True


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_modes(mode: str) -> None:
    pads = np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)
    model = make_model(
        [helper.make_node("Pad", ["x", "pads", "v"], ["y"], mode=mode)],
        {"x": ([1, 2, 4, 5], F)},
        ["y"],
        {"pads": pads, "v": np.array(1.5, np.float32)},
        opset=13,
    )
    graph = check(model, {"x": f32(1, 2, 4, 5)})
    assert ops(graph) == ["nn.pad"]


@pytest.mark.parametrize(
    "mode,ctm,extra",
    [
        ("nearest", "asymmetric", {"nearest_mode": "floor"}),
        ("nearest", "half_pixel", {"nearest_mode": "round_prefer_ceil"}),
        ("linear", "half_pixel", {}),
        ("linear", "align_corners", {}),
        ("linear", "pytorch_half_pixel", {}),
    ],
)
def test_resize_sizes(mode: str, ctm: str, extra: dict) -> None:
    node = helper.make_node(
        "Resize", ["x", "", "", "sizes"], ["y"], mode=mode, coordinate_transformation_mode=ctm, **extra
    )
    model = make_model([node], {"x": ([1, 2, 5, 7], F)}, ["y"], {"sizes": np.array([1, 2, 9, 4], np.int64)}, opset=13)
    graph = check(model, {"x": f32(1, 2, 5, 7)})
    assert graph.nodes[0].attrs["size"] == (9, 4)


@pytest.mark.parametrize(
    "inputs,attrs,consts,shape",
    [
        # fractional scales: floor(5 * 0.6) = 3 outputs, coordinates from the scale itself
        (["x", "", "scales"], {"mode": "linear"}, {"scales": np.array([1, 1, 0.6, 0.7], np.float32)}, [1, 2, 5, 7]),
        (["x", "", "scales"], {"mode": "cubic"}, {"scales": np.array([1, 1, 2.0, 1.5], np.float32)}, [1, 2, 5, 7]),
        (
            ["x", "", "scales"],
            {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
            {"scales": np.array([1, 1, 0.8, 1.25], np.float32)},
            [2, 1, 5, 8],
        ),
        (
            ["x", "", "", "sizes"],
            {"mode": "linear", "antialias": 1},
            {"sizes": np.array([1, 2, 3, 4], np.int64)},
            [1, 2, 9, 10],
        ),
        (
            ["x", "", "", "sizes"],
            {"mode": "cubic", "antialias": 1, "coordinate_transformation_mode": "half_pixel_symmetric"},
            {"sizes": np.array([1, 2, 4, 3], np.int64)},
            [1, 2, 9, 10],
        ),
        (
            ["x", "roi", "", "sizes"],
            {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 3.0},
            {"roi": np.array([0, 0, -0.2, 0.3, 1, 1, 0.8, 1.4], np.float32), "sizes": np.array([1, 2, 6, 5], np.int64)},
            [1, 2, 5, 7],
        ),
        (
            ["x", "", "", "sizes"],
            {"mode": "nearest", "keep_aspect_ratio_policy": "not_larger", "axes": [2, 3]},
            {"sizes": np.array([7, 20], np.int64)},
            [1, 2, 5, 7],
        ),
        # a 3-D volume, and a 2-D matrix resized on both axes
        (
            ["x", "", "scales"],
            {"mode": "linear"},
            {"scales": np.array([1, 1, 1.5, 2, 0.5], np.float32)},
            [1, 2, 4, 3, 6],
        ),
        (["x", "", "scales"], {"mode": "cubic"}, {"scales": np.array([2, 0.5], np.float32)}, [4, 6]),
    ],
)
def test_resize_modes_beyond_resize2d_match_ort(inputs: list, attrs: dict, consts: dict, shape: list) -> None:
    """Cubic, antialias, exclude_outside, tf_crop_and_resize, half_pixel_symmetric, aspect-ratio policies,
    fractional scales and other ranks run as products with per-axis interpolation matrices."""
    model = make_model([helper.make_node("Resize", inputs, ["y"], **attrs)], {"x": (shape, F)}, ["y"], consts, opset=19)
    graph = check(model, {"x": f32(*shape)}, rtol=1e-4, atol=1e-5)
    assert "nn.dense" in ops(graph) and "image.resize2d" not in ops(graph)


def test_softmax_before_opset_13_flattens() -> None:
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": ([2, 3, 4], F)}, ["y"], opset=11)
    graph = check(model, {"x": f32(2, 3, 4)})
    assert ops(graph) == ["reshape", "nn.softmax", "reshape"]


def test_clip_before_opset_11_uses_attributes() -> None:
    model = make_model([helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25)], {"x": ([3, 4], F)}, ["y"], opset=9)
    graph = check(model, {"x": f32(3, 4)})
    assert ops(graph) == ["clip"]


def test_erf_gelu_stays_erf_and_gelu20_maps() -> None:
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
        helper.make_node("Gelu", ["x"], ["g"], approximate="tanh"),
    ]
    inits = {
        "sqrt2": np.array(np.sqrt(2), np.float32),
        "one": np.array(1, np.float32),
        "half": np.array(0.5, np.float32),
    }
    model = make_model(nodes, {"x": ([4, 5], F)}, ["y", "g"], inits, opset=20)
    graph = check(model, {"x": f32(4, 5)})
    assert ops(graph) == ["divide", "erf", "add", "multiply", "multiply", "nn.gelu"]


def test_decomposed_ops_match_ort() -> None:
    nodes = [
        helper.make_node("Conv", ["x1", "w1"], ["c1"], pads=[1, 1], strides=[2]),  # 1-D conv
        helper.make_node("ConvTranspose", ["x", "wt"], ["ct"], strides=[2, 2], output_padding=[1, 1]),
        helper.make_node("Split", ["x"], ["s0", "s1", "s2"], axis=1, num_outputs=3),
        helper.make_node("Slice", ["x", "st", "en", "axs", "stp"], ["sl"]),
        helper.make_node("Gather", ["x", "idx"], ["ga"], axis=3),
        helper.make_node("Expand", ["xe", "eshape"], ["ex"]),
        helper.make_node("Tile", ["s1", "reps"], ["ti"]),
        helper.make_node("PRelu", ["x", "slope"], ["pr"]),
        helper.make_node("HardSwish", ["x"], ["hs"]),
        helper.make_node("DepthToSpace", ["x4"], ["d2s"], blocksize=2, mode="CRD"),
        helper.make_node("SpaceToDepth", ["x"], ["s2d"], blocksize=2),
        helper.make_node("ReduceMean", ["x", "rax"], ["rm"], keepdims=0),
        helper.make_node("ReduceMax", ["x", "rax"], ["rmax"], keepdims=1),
        helper.make_node("ReduceSum", ["x", "rax"], ["rs"], keepdims=1),
        helper.make_node("LayerNormalization", ["x", "lg", "lb"], ["ln"], axis=-2),
        helper.make_node("InstanceNormalization", ["x", "ig", "ib"], ["inn"]),
        helper.make_node("Dropout", ["x"], ["dr", "mask"]),
        helper.make_node("Max", ["x", "xe6", "slope"], ["mx"]),
        helper.make_node("Mean", ["x", "xe6"], ["mean"]),
    ]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {
        "w1": f32(4, 2, 3),
        "wt": f32(6, 2, 3, 3),
        "st": i64(1, -1),
        "en": i64(6, 0),
        "axs": i64(2, 3),
        "stp": i64(2, -2),
        "idx": np.array([[3, 0], [1, 1]], np.int64),
        "eshape": i64(2, 1, 3, 4, 1),
        "reps": i64(1, 2, 1, 3),
        "slope": f32(6, 1, 1),
        "rax": i64(1, 3),
        "lg": f32(6, 6),
        "lb": f32(6, 6),
        "ig": f32(6),
        "ib": f32(6),
        "xe6": f32(6, 1),
    }
    inputs = {"x": ([2, 6, 6, 6], F), "x1": ([1, 2, 9], F), "x4": ([1, 8, 3, 3], F), "xe": ([3, 1, 5], F)}
    outs = [
        "c1",
        "ct",
        "s0",
        "s1",
        "s2",
        "sl",
        "ga",
        "ex",
        "ti",
        "pr",
        "hs",
        "d2s",
        "s2d",
        "rm",
        "rmax",
        "rs",
        "ln",
        "inn",
        "dr",
        "mask",
        "mx",
        "mean",
    ]
    model = make_model(nodes, inputs, outs, inits, opset=18)
    check(
        model,
        {"x": f32(2, 6, 6, 6), "x1": f32(1, 2, 9), "x4": f32(1, 8, 3, 3), "xe": f32(3, 1, 5)},
        rtol=1e-4,
        atol=1e-5,
    )


def test_unsorted_nodes_are_sorted() -> None:
    nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Neg", ["x"], ["a"])]
    model = make_model(nodes, {"x": ([3], F)}, ["y"])
    graph = import_model(model)
    assert ops(graph) == ["negative", "nn.relu"]


def test_constant_operand_required_names_the_tensor() -> None:
    model = make_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], {"x": ([2, 3], F), "s": ([2], TensorProto.INT64)}, ["y"]
    )
    with pytest.raises(ConstantOperandRequired) as info:
        import_model(model)
    assert info.value.tensor == "s" and isinstance(info.value, UnsupportedOpError)
    assert "Reshape" in str(info.value) and "\n" not in str(info.value)


def test_supported_ops_cover_the_brief() -> None:
    wanted = [
        "Conv",
        "ConvTranspose",
        "Gemm",
        "MatMul",
        "BatchNormalization",
        "InstanceNormalization",
        "Relu",
        "LeakyRelu",
        "Clip",
        "Sigmoid",
        "Tanh",
        "Gelu",
        "Softmax",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "LpPool",
        "Pad",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Max",
        "Min",
        "Pow",
        "Sqrt",
        "Erf",
        "Reshape",
        "Flatten",
        "Transpose",
        "Concat",
        "Split",
        "DepthToSpace",
        "Resize",
        "ReduceMean",
        "Cast",
        "Identity",
        "Dropout",
        "Constant",
        "Shape",
        "Gather",
        "Unsqueeze",
        "Squeeze",
        "Slice",
        "ConstantOfShape",
        "Range",
        "QuantizeLinear",
        "DequantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
    ]
    assert not set(wanted) - set(SUPPORTED_OPS)


# -- external data --------------------------------------------------------------------------


def _external_model(folder: str, location: str, data: np.ndarray, offset: int = 0) -> onnx.ModelProto:
    w = TensorProto(name="w", data_type=F, dims=data.shape)
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(data.nbytes))):
        entry = w.external_data.add()
        entry.key, entry.value = k, v
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "ext",
        [helper.make_tensor_value_info("x", F, list(data.shape))],
        [helper.make_tensor_value_info("y", F, list(data.shape))],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_external_data_is_loaded_from_the_model_folder(tmp_path: os.PathLike) -> None:
    data = f32(3, 4)
    sub = os.path.join(tmp_path, "weights")
    os.mkdir(sub)
    with open(os.path.join(sub, "w.bin"), "wb") as f:
        f.write(b"\0" * 16 + data.tobytes() + b"tail")
    model = _external_model(str(tmp_path), "weights/w.bin", data, offset=16)
    path = os.path.join(tmp_path, "m.onnx")
    onnx.save_model(model, path)
    x = f32(3, 4)
    graph = accel.import_onnx(path, optimize=False)
    np.testing.assert_array_equal(accel.execute(graph, {"x": x})["y"], x + data)
    # the same model as bytes needs base_dir
    with pytest.raises(ExternalDataError, match="base_dir"):
        import_model(model.SerializeToString())
    graph = import_model(model.SerializeToString(), base_dir=tmp_path)
    np.testing.assert_array_equal(accel.execute(graph, {"x": x})["y"], x + data)
    # the caller's ModelProto is not modified
    graph = import_model(model, base_dir=tmp_path)
    assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL


def test_onnx_saved_external_data_round_trips(tmp_path: os.PathLike) -> None:
    data = f32(64, 64)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": ([2, 64], F)}, ["y"], {"w": data})
    path = os.path.join(tmp_path, "big.onnx")
    onnx.save_model(
        model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="big.data", size_threshold=0
    )
    x = f32(2, 64)
    graph = accel.import_onnx(path, optimize=False)
    np.testing.assert_allclose(accel.execute(graph, {"x": x})["y"], x @ data, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_gqa_3d_matches_ort(causal: int) -> None:
    node = helper.make_node(
        "Attention", ["q", "k", "v", "mask"], ["y"], q_num_heads=4, kv_num_heads=2, is_causal=causal
    )
    mask = RNG.random((5, 7)) > 0.3
    mask[:, 0] = True
    model = make_model(
        [node],
        {"q": ([2, 5, 32], F), "k": ([2, 7, 16], F), "v": ([2, 7, 24], F), "mask": ([5, 7], TensorProto.BOOL)},
        ["y"],
        opset=23,
    )
    graph = check(
        model, {"q": f32(2, 5, 32), "k": f32(2, 7, 16), "v": f32(2, 7, 24), "mask": mask}, rtol=1e-4, atol=1e-5
    )
    assert ops(graph).count("nn.batch_matmul") == 2 and "nn.softmax" in ops(graph)


# -- LRN ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,size,alpha,beta,bias",
    [
        ((2, 96, 27, 27), 5, 1e-4, 0.75, 1.0),  # AlexNet's first LRN
        ((1, 7, 5, 6), 3, 2e-2, 0.5, 2.0),
        ((1, 4, 9, 1), 1, 1.0, 1.0, 0.5),  # a window of one channel
        ((1, 3, 2, 2), 7, 0.3, 0.9, 1.5),  # a window wider than the channel count
    ],
)
def test_lrn_matches_ort(shape: tuple[int, ...], size: int, alpha: float, beta: float, bias: float) -> None:
    model = make_model(
        [helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)],
        {"x": (list(shape), F)},
        ["y"],
        opset=13,
    )
    graph = check(model, {"x": 5 * f32(*shape)}, rtol=1e-5, atol=1e-6)
    assert ops(graph) == ["nn.lrn"]


def _lrn_by_the_spec(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX's LRN formula, one channel at a time (onnx.reference's LRN loops over the batch axis instead)."""
    c_dim = x.shape[1]
    y = np.empty_like(x, dtype=np.float64)
    for c in range(c_dim):
        lo, hi = max(0, c - (size - 1) // 2), min(c_dim - 1, c + -(-(size - 1) // 2))
        square_sum = np.sum(x[:, lo : hi + 1].astype(np.float64) ** 2, axis=1)
        y[:, c] = x[:, c] / (bias + alpha / size * square_sum) ** beta
    return y


@pytest.mark.parametrize("shape,size", [((1, 6, 3, 3), 4), ((2, 5, 7), 2), ((1, 4, 2, 3, 2), 3), ((1, 9, 2, 2), 6)])
def test_lrn_even_sizes_and_other_ranks_follow_the_spec(shape: tuple[int, ...], size: int) -> None:
    """onnxruntime takes 4-D data and odd sizes only; the window is [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    model = make_model(
        [helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.2, beta=0.75, bias=1.0)],
        {"x": (list(shape), F)},
        ["y"],
    )
    x = 3 * f32(*shape)
    got = accel.execute(accel.import_onnx(model), {"x": x})["y"]
    np.testing.assert_allclose(got, _lrn_by_the_spec(x, size, 0.2, 0.75, 1.0), rtol=1e-5, atol=1e-6)


def test_lrn_on_rank_2_is_refused() -> None:
    model = make_model([helper.make_node("LRN", ["x"], ["y"], size=3)], {"x": ([2, 3], F)}, ["y"])
    with pytest.raises(ModelError, match="LRN needs input of rank >= 3"):
        import_model(model)


# -- comparison, logic, Where, Mod, Floor/Ceil on run-time data ----------------------------


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_comparisons_run_at_run_time(op: str, dtype: type) -> None:
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = make_model([helper.make_node(op, ["a", "b"], ["y"])], {"a": ([2, 3, 4], t), "b": ([3, 1], t)}, ["y"])
    a = RNG.integers(-3, 3, (2, 3, 4)).astype(dtype)
    b = RNG.integers(-3, 3, (3, 1)).astype(dtype)
    graph = check(model, {"a": a, "b": b})
    assert len(graph.nodes) == 1 and graph.outputs[0].type.dtype == "bool"


def test_logic_and_where_run_at_run_time() -> None:
    B = TensorProto.BOOL
    model = make_model(
        [
            helper.make_node("Less", ["x", "zero"], ["neg"]),
            helper.make_node("Not", ["m"], ["nm"]),
            helper.make_node("Xor", ["neg", "nm"], ["c1"]),
            helper.make_node("Or", ["c1", "m"], ["c2"]),
            helper.make_node("And", ["c2", "neg"], ["c"]),
            helper.make_node("Where", ["c", "x", "y"], ["out"]),
        ],
        {"x": ([3, 4], F), "m": ([4], B), "y": ([1], F)},
        ["out", "c"],
        {"zero": np.array(0, np.float32)},
    )
    graph = check(model, {"x": f32(3, 4), "m": RNG.random(4) < 0.5, "y": f32(1)})
    assert sorted(ops(graph)) == sorted(["less", "logical_not", "logical_xor", "logical_or", "logical_and", "where"])


@pytest.mark.parametrize("fmod,dtype", [(0, np.int32), (1, np.int32), (0, np.int64), (1, np.float32), (0, np.float32)])
def test_mod_signs_match_onnx(fmod: int, dtype: type) -> None:
    """fmod=0: the divisor's sign (Python %); fmod=1: the dividend's sign (C fmod)."""
    from onnx.reference import ReferenceEvaluator

    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = make_model([helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)], {"a": ([8], t), "b": ([8], t)}, ["y"])
    a = np.array([7, -7, 7, -7, 5, -5, 0, 9], dtype)
    b = np.array([3, 3, -3, -3, 5, 2, 4, -4], dtype)
    got = accel.execute(accel.import_onnx(model), {"a": a, "b": b})["y"]
    (want,) = ReferenceEvaluator(model).run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(got, want)
    assert np.any(got < 0) and np.any(got > 0)  # both sign rules are exercised


def test_floor_and_ceil_run_at_run_time() -> None:
    model = make_model(
        [helper.make_node("Floor", ["x"], ["f"]), helper.make_node("Ceil", ["x"], ["c"])],
        {"x": ([5, 3], F)},
        ["f", "c"],
    )
    graph = check(model, {"x": 3 * f32(5, 3)})
    assert sorted(ops(graph)) == ["ceil", "floor"]


# -- shape operands given at run time: specialization ------------------------------------


def _reshape_by_input() -> onnx.ModelProto:
    return make_model(
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=0),
        ],
        {"x": ([2, 6], F), "shape": ([None], TensorProto.INT64), "axes": ([1], TensorProto.INT64)},
        ["y"],
        opset=18,
    )


def test_execute_on_a_model_specializes_on_run_time_shape_operands() -> None:
    from accel.frontend.specialize import SpecializedModel

    model = _reshape_by_input()
    x = f32(2, 6)
    for shape, axes in (([3, 4], [0]), ([4, 3], [1]), ([3, 4], [0])):
        feed = {"x": x, "shape": np.array(shape, np.int64), "axes": np.array(axes, np.int64)}
        got = accel.execute(model, feed)["y"]
        np.testing.assert_allclose(got, x.reshape(shape).sum(axis=tuple(axes)), rtol=1e-6)
    runner = SpecializedModel(model)
    for shape, axes in (([3, 4], [0]), ([4, 3], [1]), ([3, 4], [0]), ([4, 3], [1])):
        feed = {"x": x, "shape": np.array(shape, np.int64), "axes": np.array(axes, np.int64)}
        np.testing.assert_allclose(runner.run(feed)["y"], x.reshape(shape).sum(axis=tuple(axes)), rtol=1e-6)
    assert sorted(runner.bound_inputs) == ["axes", "shape"]
    # one import to learn which inputs to bind plus one per distinct value; repeats hit the cache
    assert runner.imports == 4
    graph, rest = runner.graph_for({"x": x, "shape": np.array([12], np.int64), "axes": np.array([0], np.int64)})
    assert [v.name for v in graph.inputs] == ["x"] and set(rest) == {"x"}


def test_specialization_follows_a_computed_operand_to_its_inputs() -> None:
    """Pads computed from a graph input (Concat of it with a constant) bind that input."""
    model = make_model(
        [
            helper.make_node("Concat", ["p", "zeros"], ["pads"], axis=0),
            helper.make_node("Pad", ["x", "pads"], ["y"]),
        ],
        {"x": ([2, 3], F), "p": ([2], TensorProto.INT64)},
        ["y"],
        {"zeros": np.zeros(2, np.int64)},
        opset=13,
    )
    x = f32(2, 3)
    got = accel.execute(model, {"x": x, "p": np.array([1, 2], np.int64)})["y"]
    np.testing.assert_array_equal(got, np.pad(x, ((1, 0), (2, 0))))


def test_specialization_takes_symbolic_dims_from_the_inputs() -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (["N", 3, "W"], F)}, ["y"])
    for shape in ((1, 3, 5), (4, 3, 2)):
        x = f32(*shape)
        np.testing.assert_array_equal(accel.execute(model, {"x": x})["y"], np.maximum(x, 0))


def test_specialization_errors_are_typed() -> None:
    from accel.errors import InputError

    model = _reshape_by_input()
    x = f32(2, 6)
    with pytest.raises(InputError, match=r"'shape'.*not given"):
        accel.execute(model, {"x": x, "axes": np.array([0], np.int64)})
    with pytest.raises(InputError, match="unknown input"):
        accel.execute(model, {"x": x, "nope": x})
    with pytest.raises(InputError, match="must be int64"):
        accel.execute(model, {"x": x, "shape": np.array([3, 4], np.int32), "axes": np.array([0], np.int64)})
    with pytest.raises(InputError, match=r"values given for 'shape'.* do not fit the model.*20 elements"):
        accel.execute(model, {"x": x, "shape": np.array([5, 4], np.int64), "axes": np.array([0], np.int64)})


# -- 3-D pooling, wrap padding, LpPool p ----------------------------------------------------


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2, 2]},
        {"kernel_shape": [3, 2, 3], "strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0]},
        {"kernel_shape": [2, 3, 2], "dilations": [2, 1, 2], "ceil_mode": 1, "strides": [2, 2, 2]},
        {"kernel_shape": [3, 3, 3], "pads": [1, 1, 1, 1, 1, 1], "count_include_pad": 1},
        {"kernel_shape": [3, 3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2, 2]},
    ],
)
def test_pool_3d_matches_ort(op: str, attrs: dict) -> None:
    if op == "MaxPool":
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": ([2, 3, 7, 6, 9], F)}, ["y"], opset=19)
    graph = check(model, {"x": f32(2, 3, 7, 6, 9)}, rtol=1e-5, atol=1e-6)
    assert [o for o in ops(graph) if o.endswith("pool2d")] == [
        "nn.max_pool2d" if op == "MaxPool" else "nn.avg_pool2d"
    ] * 2


@pytest.mark.parametrize("pads", [[0, 1, 2, 0, 2, 1], [1, 0, 0, 1, 0, 0], [0, 0, 7, 0, 0, 5], [0, -1, 1, 0, 2, -2]])
def test_pad_wrap_matches_numpy(pads: list[int]) -> None:
    """Wrap padding, pads wider than the axis and negative (cropping) pads included."""
    model = make_model(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")],
        {"x": ([2, 3, 4], F)},
        ["y"],
        {"pads": np.array(pads, np.int64)},
        opset=19,
    )
    x = f32(2, 3, 4)
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(pads[:3], pads[3:])))
    want = np.pad(x[crop], [(max(b, 0), max(e, 0)) for b, e in zip(pads[:3], pads[3:])], mode="wrap")
    got = accel.execute(accel.import_onnx(model), {"x": x})["y"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lppool_matches_ort(p: int) -> None:
    model = make_model(
        [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 2], p=p, pads=[1, 0, 1, 1])],
        {"x": ([1, 2, 5, 6], F)},
        ["y"],
        opset=18,
    )
    check(model, {"x": f32(1, 2, 5, 6)}, rtol=1e-5, atol=1e-5)


def test_gather_with_run_time_indices_is_a_take() -> None:
    """An embedding lookup: constant table, indices given at run time (negative ones count from the end)."""
    table = f32(10, 4)
    model = make_model(
        [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)],
        {"ids": ([2, 3], TensorProto.INT64)},
        ["y"],
        {"table": table},
    )
    ids = np.array([[0, 9, -1], [3, 3, -10]], np.int64)
    graph = check(model, {"ids": ids})
    assert ops(graph) == ["take"]
    from accel.errors import InputError

    with pytest.raises(InputError, match="index 10 is out of range for axis 0 of size 10"):
        accel.execute(graph, {"ids": np.array([[0, 10, 1], [1, 1, 1]], np.int64)})


def test_reduce_prod_runs_at_run_time() -> None:
    model = make_model(
        [helper.make_node("ReduceProd", ["x", "axes"], ["y"], keepdims=0)],
        {"x": ([3, 4, 2], F)},
        ["y"],
        {"axes": np.array([0, -1], np.int64)},
        opset=18,
    )
    graph = check(model, {"x": f32(3, 4, 2)})
    assert ops(graph) == ["prod"]


def test_specialized_model_refuses_a_missing_bound_input_and_a_wrong_rank() -> None:
    from accel.errors import InputError
    from accel.frontend.specialize import SpecializedModel

    runner = SpecializedModel(_reshape_by_input())
    x = f32(2, 6)
    runner.run({"x": x, "shape": np.array([3, 4], np.int64), "axes": np.array([0], np.int64)})
    with pytest.raises(InputError, match=r"missing input\(s\) 'shape'"):
        runner.run({"x": x, "axes": np.array([0], np.int64)})
    relu = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (["N", 3], F)}, ["y"])
    with pytest.raises(InputError, match=r"input 'x' has rank 2 in the model, got an array of shape \[2,3,1\]"):
        accel.execute(relu, {"x": f32(2, 3, 1)})


def test_resize_matrix_size_is_bounded() -> None:
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic")
    model = make_model(
        [node], {"x": ([1, 1, 8, 5000], F)}, ["y"], {"sizes": np.array([1, 1, 8, 5000], np.int64)}, opset=19
    )
    import_model(model)  # an axis left as it is builds nothing
    model = make_model(
        [node], {"x": ([1, 1, 8, 5000], F)}, ["y"], {"sizes": np.array([1, 1, 8, 4000], np.int64)}, opset=19
    )
    with pytest.raises(UnsupportedOpError, match="5000x4000 interpolation matrix, beyond the limit"):
        import_model(model)


def test_attributes_decode_as_onnx_helper_does() -> None:
    """Attributes read straight from their field give what onnx.helper.get_attribute_value gives
    (strings decoded); a mistyped or function-referencing attribute is still refused."""
    from accel.frontend.onnx import _Attrs

    node = helper.make_node(
        "Foo",
        ["x"],
        ["y"],
        i=-3,
        ints=[1, -2, 2**40],
        f=0.1,
        floats=[1.5, -2.0],
        s="SAME_UPPER",
        strings=["a", "b\u00e9"],
        t=numpy_helper.from_array(np.arange(3, dtype=np.float32)),
    )
    node.attribute.append(helper.make_attribute("empty_ints", [], attr_type=onnx.AttributeProto.INTS))
    a = _Attrs(node, "n")
    for attr in node.attribute:
        want = helper.get_attribute_value(attr)
        if isinstance(want, bytes):
            want = want.decode()
        elif isinstance(want, list) and want and isinstance(want[0], bytes):
            want = [w.decode() for w in want]
        got = a.get(attr.name)
        assert type(got) is type(want) and got == want, attr.name
    assert a.int("i") == -3 and type(a.int("i")) is int
    assert a.ints("ints") == [1, -2, 2**40] and a.ints("empty_ints", (7,)) == []
    assert a.ints("missing") is None and a.ints("missing", (4,)) == [4]
    assert a.float("f") == pytest.approx(0.1) and a.str("s") == "SAME_UPPER"
    with pytest.raises(ModelError, match="must be a list of integers"):
        a.ints("floats")
    with pytest.raises(ModelError, match="must be an integer"):
        a.int("ints")
    ref = helper.make_node("Foo", ["x"], ["y"])
    ref.attribute.append(onnx.AttributeProto(name="k", type=onnx.AttributeProto.INT, ref_attr_name="outer"))
    with pytest.raises(UnsupportedOpError, match="refers to a function attribute"):
        _Attrs(ref, "r").int("k")
    with pytest.raises(ModelError, match="given twice"):
        _Attrs(_twice(), "d")


def _twice() -> onnx.NodeProto:
    node = helper.make_node("Foo", ["x"], ["y"], k=1)
    node.attribute.append(helper.make_attribute("k", 2))
    return node


@pytest.mark.parametrize(
    "model",
    [
        lambda: modelgen.resnet18(32, num_classes=10),
        lambda: modelgen.mobilenet_v2(32, num_classes=10),
        lambda: modelgen.transformer_encoder(16, dim=32, ffn=64),
        lambda: modelgen.chain(40),
    ],
    ids=["resnet18", "mobilenet_v2", "encoder", "chain"],
)
def test_the_names_an_imported_graph_avoids_cover_every_name_it_uses(model) -> None:  # type: ignore[no-untyped-def]
    """The importer hands its graph the names it gave (so that fresh names need no walk of the
    graph): they must include every value and node name, after simplification too, and fresh
    names must stay fresh."""
    from accel.passes import simplify

    raw = import_model(model())
    for g in (raw, simplify(raw)):
        used = g.names_in_use()
        walked = {v.name for v in g.values()} | {n.name for n in g.nodes}
        assert walked <= used, sorted(walked - used)[:5]
        fresh = [g.fresh_name(n.name) for n in g.nodes[:20]]
        assert not set(fresh) & walked and len(set(fresh)) == len(fresh)


def test_repeated_pools_share_their_converted_attributes_and_refusals_are_not_remembered() -> None:
    """Pools of one shape and the same attributes (as the file writes them) share one frozen attribute
    mapping; other attributes, another shape or a 1-D pool get their own; every pool still matches ONNX
    Runtime, and an invalid pool is refused however many valid ones of its shape came before."""
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    nodes = [
        helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["a"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1),
        helper.make_node("AveragePool", ["c"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["d"], ["e"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("MaxPool", ["e"], ["f"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("MaxPool", ["f"], ["g"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    model = make_model(nodes, {"x": ([1, 3, 6, 6], TensorProto.FLOAT)}, ["g"])
    graph = check(model, {"x": x})
    pools = {n.outputs[0].name: n for n in graph.nodes}
    assert pools["a"].attrs is pools["b"].attrs  # (one conversion, one type rule)
    assert len({id(pools[k].attrs) for k in "abcdefg"}) == 6  # g: the same attributes on a 3x3 input
    assert pools["e"].attrs["count_include_pad"] and not pools["d"].attrs["count_include_pad"]
    assert pools["c"].attrs["ceil_mode"] and not pools["a"].attrs["ceil_mode"]
    # a pad as large as the window, after valid pools of the same shape: refused by its own attributes
    bad = [*nodes[:2], helper.make_node("MaxPool", ["b"], ["c"], kernel_shape=[3, 3], pads=[3, 3, 3, 3])]
    with pytest.raises(accel.AccelError, match="padding"):
        accel.import_onnx(make_model(bad, {"x": ([1, 3, 6, 6], TensorProto.FLOAT)}, ["c"]))
    bad_1d = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2], strides=[0])]
    for _ in range(2):
        with pytest.raises(accel.AccelError, match="strides"):
            accel.import_onnx(make_model(bad_1d, {"x": ([1, 3, 8], TensorProto.FLOAT)}, ["y"]))
    one_d = [
        helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2]),
        helper.make_node("MaxPool", ["y"], ["z"], kernel_shape=[2]),
    ]
    check(make_model(one_d, {"x": ([1, 3, 8], TensorProto.FLOAT)}, ["z"]), {"x": x.reshape(1, 3, 36)[:, :, :8].copy()})
