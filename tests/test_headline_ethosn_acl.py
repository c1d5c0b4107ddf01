"""The headline: `accel compile --backends ethosn,acl` on the embedded quantized digits model, then `accel run`.

The quantized backbone goes to ethosn; the input's quantize and the fp32 classifier head (dequantize, dense,
softmax) to acl, so nothing runs on the host but the layout transposes at ethosn's boundaries; the
artifact scores the held-out digits exactly as the reference executor does.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_cli import accel_cli

import accel
from accel.artifact import read_artifact
from accel.executor import ReferenceExecutor
from accel.models import default_model_path, load_digits_test

pytest.importorskip("accel_ethosn", reason="the headline needs accel-ethosn installed")
pytest.importorskip("accel_acl", reason="the headline needs accel-acl installed")


def _ops(graph) -> list[str]:
    out = []
    for n in graph.nodes:
        out.extend(_ops(n.body) if n.body is not None else [n.op])
    return out


def test_compile_for_ethosn_and_acl_then_run(tmp_path):
    artifact = tmp_path / "digits.accel"
    proc = accel_cli("compile", "--backends", "ethosn,acl", "-o", str(artifact))
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout
    assert "target ethosn, acl" in table
    assert re.search(r"│ ethosn\s+│\s+1 │", table), table
    assert re.search(r"│ acl\s+│\s+2 │", table), table
    assert "No ops left on the host." in table

    art = read_artifact(artifact)
    where = {}
    for node in art.graph.nodes:
        backend = node.attrs.get("compiler") if node.op == "call" else "host"
        for op in _ops(node.body) if node.body is not None else [node.op]:
            where.setdefault(op, set()).add(backend)
    assert where["qnn.conv2d"] == {"ethosn"} and where["nn.max_pool2d"] == {"ethosn"}
    assert where["nn.dense"] == {"acl"}
    assert where["nn.softmax"] == {"acl"} and where["qnn.dequantize"] == {"acl"}
    assert where["qnn.quantize"] == {"acl"}

    # the artifact's accuracy on the held-out digits is the reference executor's, image for image
    images, labels = load_digits_test()
    exe = accel.load(artifact)
    ref = ReferenceExecutor(accel.import_onnx(default_model_path().read_bytes()))
    got = np.array([np.argmax(exe.run({"image": im[None]})["probabilities"]) for im in images])
    want = np.array([np.argmax(ref.run({"image": im[None]})["probabilities"]) for im in images])
    np.testing.assert_array_equal(got, want)

    proc = accel_cli("run", str(artifact))
    assert proc.returncode == 0, proc.stderr
    rows = dict(re.findall(r"│ (this artifact|accel reference executor)\s+│\s+([\d.]+%)", proc.stdout))
    accuracy = f"{float(np.mean(want == labels)):.2%}"
    assert rows == {"this artifact": accuracy, "accel reference executor": accuracy}, proc.stdout
    assert f"predictions identical on {len(images)}/{len(images)} images" in proc.stdout
