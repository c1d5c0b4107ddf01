"""Refusals as a user meets them: an ONNX model quantized by ONNX Runtime, `accel inspect --backends ethosn --format json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")


def _conv_model(batch: int, dilations: list[int]) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", dilations=dilations, pads=[1, 1, 1, 1])
    relu = helper.make_node("Relu", ["c"], ["y"], name="relu")
    graph = helper.make_graph(
        [conv, relu],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("batch", "dilations", "reason"),
    [
        (2, [1, 1], "ethosn.qnn_conv2d: batch size=2, batch size must = 1"),
        (1, [2, 1], "ethosn.qnn_conv2d: dilation=[2, 1], dilation must = [1, 1]"),
    ],
)
def test_inspect_json_gives_the_reason(tmp_path, batch, dilations, reason):
    from accel.testing import modelgen

    path = tmp_path / "m.onnx"
    onnx.save_model(modelgen.quantize_qdq(_conv_model(batch, dilations), 2, preprocess=False), path)
    env = {**os.environ, "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "accel", "inspect", str(path), "--backends", "ethosn", "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    convs = [n for n in doc["nodes"] if n["op"] == "qnn.conv2d"]
    assert convs and all(n["backend"] != "ethosn" for n in convs)
    assert {n["reasons"]["ethosn"] for n in convs} == {reason}
