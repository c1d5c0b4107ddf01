"""Why the testbackend declined a node, as ``accel inspect`` (text and JSON) and ``accel compile`` print it.

An ONNX Conv whose weights are a graph input cannot match the testbackend's
``conv2d`` pattern (it wants constant weights); the reason names the pattern
and the failed condition instead of "nn.conv2d is not supported".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("accel_testbackend", reason="accel-testbackend is not installed")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

REASON = "testbackend.conv2d does not match: input 1 of this nn.conv2d is not a constant"


def conv_with_weights_as_input(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 4, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
    conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv")
    relu = helper.make_node("Relu", ["c"], ["y"], name="relu")
    graph = helper.make_graph([conv, relu], "g", [x, w], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def accel(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250"}
    cmd = [sys.executable, "-m", "accel", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_inspect_json_gives_the_pattern_reason(tmp_path):
    model = conv_with_weights_as_input(tmp_path / "m.onnx")
    done = accel("inspect", str(model), "--backends", "testbackend", "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    nodes = {n["op"]: n for n in json.loads(done.stdout)["nodes"]}
    assert nodes["nn.conv2d"]["backend"] == "host"
    assert nodes["nn.conv2d"]["reasons"] == {"testbackend": REASON}
    assert nodes["nn.relu"]["backend"] == "testbackend"


@pytest.mark.parametrize("command", ["inspect", "compile"])
def test_the_text_report_gives_the_pattern_reason(tmp_path, command):
    model = conv_with_weights_as_input(tmp_path / "m.onnx")
    done = accel(command, str(model), "--backends", "testbackend", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"testbackend: {REASON}" in done.stdout  # wide enough (COLUMNS) for one table line
    assert "is not supported by testbackend" not in done.stdout
