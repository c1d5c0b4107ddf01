"""The model-zoo networks with LRN (AlexNet, Inception v1, ZFNet-512) through accel.

The onnx wheel ships "light" copies of model-zoo networks under
``onnx/backend/test/data/light``: the real architecture and attributes, every
weight replaced by a ``ConstantOfShape`` of one value, and the output ONNX's
backend test expects for a fixed input (``arange(n) / n``). With constant
weights every class scores alike, so the stored output (0.001 everywhere)
checks import and shapes but hardly the arithmetic. The second test therefore
swaps each ``ConstantOfShape`` weight for seeded random values of the same
shape and compares the logits and both LRN outputs with onnxruntime.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import accel

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LRN_MODELS = ["light_bvlc_alexnet", "light_inception_v1", "light_zfnet512"]


def _load(name: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(LIGHT, name + ".onnx"))


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The input ONNX's backend runner uses for the light models: arange(n) / n as float32."""
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", LRN_MODELS)
def test_light_zoo_model_matches_stored_output(name: str) -> None:
    model = _load(name)
    assert any(n.op_type == "LRN" for n in model.graph.node)
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, name + "_output_0.pb")))
    graph = accel.import_onnx(model)
    assert any(n.op == "nn.lrn" for n in graph.nodes)
    (got,) = accel.execute(graph, _feeds(model)).values()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-7)


def _random_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """``model`` with every ConstantOfShape weight replaced by a seeded random initializer,
    the last Gemm's output (logits) and every LRN output added as graph outputs."""
    rng = np.random.default_rng(seed)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = []
    for node in m.graph.node:
        if node.op_type != "ConstantOfShape":
            nodes.append(node)
            continue
        shape = tuple(int(d) for d in inits[node.input[0]])
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        w = rng.standard_normal(shape).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        if len(shape) == 1:  # biases
            w = rng.uniform(-0.1, 0.1, shape).astype(np.float32)
        m.graph.initializer.append(numpy_helper.from_array(w, node.output[0]))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    extra = [o for n in nodes if n.op_type == "LRN" for o in n.output]
    extra.append([n for n in nodes if n.op_type == "Gemm"][-1].output[0])
    for name in extra:
        m.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return m


@pytest.mark.parametrize(
    "name",
    # AlexNet and ZFNet run 8 and 18 s on the reference executor: in the slow set
    [pytest.param(n, marks=pytest.mark.slow) if n != "light_inception_v1" else n for n in LRN_MODELS],
)
def test_zoo_lrn_models_with_random_weights_match_onnxruntime(name: str) -> None:
    model = _random_weights(_load(name), seed=1)
    feeds = _feeds(model)
    rng = np.random.default_rng(2)
    feeds = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in feeds.items()}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in model.graph.output], sess.run(None, feeds), strict=True))
    got = accel.execute(accel.import_onnx(model), feeds)
    assert set(got) == set(expected)
    lrn_outputs = [o for n in model.graph.node if n.op_type == "LRN" for o in n.output]
    assert len(lrn_outputs) == 2
    for out, want in expected.items():
        scale = float(np.abs(want).max())
        assert scale > 0, f"{out} is all zeros: the comparison would check nothing"
        np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-5 * scale, err_msg=out)
    logits = expected[model.graph.output[-1].name]
    assert np.std(logits) > 1e-3 * scale, "the random weights give (nearly) equal logits"


def test_lrn_runs_channels_last_after_the_layout_pass() -> None:
    """nn.lrn follows its channel axis when the layout pass holds Inception v1 in NHWC."""
    from accel.passes.layout import convert_layout

    model = _random_weights(_load("light_inception_v1"), seed=3)
    graph = accel.import_onnx(model)
    rng = np.random.default_rng(4)
    feeds = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in _feeds(model).items()}
    want = accel.execute(graph, feeds)
    nhwc = convert_layout(graph.copy(), "NHWC")
    assert [n.attrs["axis"] for n in nhwc.nodes if n.op == "nn.lrn"] == [3, 3]
    got = accel.execute(nhwc, feeds)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5 * float(np.abs(w).max()), err_msg=name)
