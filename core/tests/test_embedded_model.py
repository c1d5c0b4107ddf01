"""The default model shipped inside accel-core (accel.models): present, small, correct.

The reference executor must classify the held-out digits as ONNX Runtime does
(within one image) for both the fp32 and the QDQ model, and the imported QDQ
graph must compute in qnn ops while keeping its classifier head in fp32.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import accel
from accel.executor import ReferenceExecutor
from accel.models import MODELS_DIR, default_model_path, load_digits_test

ort = pytest.importorskip("onnxruntime")

MAX_BYTES = 300_000
INPUT, OUTPUT = "image", "probabilities"


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    return load_digits_test()


def test_shipped_files_exist_and_are_small() -> None:
    for name in ("digits_fp32.onnx", "digits_qdq.onnx", "digits_test.npz"):
        path = MODELS_DIR / name
        assert path.is_file(), f"{path} is missing from the package"
        assert path.stat().st_size < MAX_BYTES, f"{name} is {path.stat().st_size} bytes"
    assert default_model_path() == MODELS_DIR / "digits_qdq.onnx"
    assert default_model_path(quantized=False) == MODELS_DIR / "digits_fp32.onnx"


@pytest.mark.parametrize("quantized", [False, True])
def test_models_load_and_check(quantized: bool) -> None:
    model = onnx.load(default_model_path(quantized))
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == [INPUT]
    assert [o.name for o in model.graph.output] == [OUTPUT]


def test_held_out_data(digits: tuple[np.ndarray, np.ndarray]) -> None:
    images, labels = digits
    assert images.dtype == np.float32 and images.ndim == 4 and images.shape[1:] == (1, 8, 8)
    assert labels.dtype == np.int64 and labels.shape == (images.shape[0],)
    assert images.min() >= 0.0 and images.max() <= 1.0
    assert set(np.unique(labels)) == set(range(10))


def ort_predictions(path, images: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.array([sess.run([OUTPUT], {INPUT: img[None]})[0].argmax() for img in images])


@pytest.mark.parametrize("quantized", [False, True])
def test_accuracy_matches_onnxruntime(quantized: bool, digits: tuple[np.ndarray, np.ndarray]) -> None:
    images, labels = digits
    path = default_model_path(quantized)
    graph = accel.import_onnx(path)
    ex = ReferenceExecutor(graph)
    probs = np.concatenate([ex.run({INPUT: img[None]})[OUTPUT] for img in images])
    assert probs.shape == (len(images), 10) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-4)  # the head ends in a softmax

    ref_correct = int((probs.argmax(axis=1) == labels).sum())
    ort_correct = int((ort_predictions(path, images) == labels).sum())
    assert abs(ref_correct - ort_correct) <= 1, f"reference {ref_correct}, onnxruntime {ort_correct} of {len(labels)}"
    assert ref_correct / len(labels) >= 0.95


def test_qdq_graph_is_quantized_with_fp32_head() -> None:
    graph = accel.import_onnx(default_model_path(quantized=True))
    ops = [n.op for n in graph.walk()]
    assert ops.count("qnn.conv2d") == 3, ops
    assert "qnn.dense" not in ops
    dense = [n for n in graph.walk() if n.op == "nn.dense"]
    assert len(dense) == 1, ops
    assert all(v.type.dtype == "float32" for v in dense[0].inputs + dense[0].outputs)
    assert dense[0].inputs[1].is_constant  # the fp32 weights, not a dequantized int8 tensor
    (out,) = graph.outputs
    assert out.name == OUTPUT and out.type.dtype == "float32"
    assert out.producer is not None and out.producer.op == "nn.softmax"
