"""A node's reason speaks of the node; a pattern's failure on what surrounds it is a detail (`-v`, JSON)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import accel
from accel.models import default_model_path
from accel.partition import partition_report
from accel.plugins import available_backends

pytestmark = pytest.mark.skipif("ethosn" not in available_backends(), reason="needs accel-ethosn installed")


def test_a_qdq_models_input_quantize_is_not_explained_by_another_ops_pattern():
    """ethosn quantizes only inside its qnn_sigmoid pattern: the model's input quantize is refused for what it
    is, and the pattern's failure (it wanted a sigmoid) stays as the detail."""
    from accel.plugins import get_backend

    graph = accel.import_onnx(default_model_path(quantized=True))
    report = partition_report(graph, [get_backend("ethosn")()])
    (quantize,) = [n for n in report.host_nodes() if n.op == "qnn.quantize"]
    assert quantize.reasons["ethosn"].startswith("qnn.quantize ") and "expected" not in quantize.reasons["ethosn"]
    assert quantize.details is not None and "expected sigmoid" in quantize.details["ethosn"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "accel", *args], capture_output=True, text=True, env=env, timeout=300)


def test_inspect_shows_the_detail_with_verbose_and_in_json():
    model = str(default_model_path(quantized=True))
    plain = _cli("inspect", model, "--backends", "ethosn")
    verbose = _cli("inspect", model, "--backends", "ethosn", "-v")
    assert plain.returncode == verbose.returncode == 0, plain.stderr + verbose.stderr
    assert "expected sigmoid" not in plain.stdout
    assert "expected sigmoid" in verbose.stdout
    doc = json.loads(_cli("inspect", model, "--backends", "ethosn", "--format", "json").stdout)
    (node,) = [n for n in doc["nodes"] if n["op"] == "qnn.quantize"]
    assert "expected sigmoid" in node["details"]["ethosn"]
    assert all("details" not in n for n in doc["nodes"] if n["op"] != "qnn.quantize")
