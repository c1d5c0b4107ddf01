"""ResNet-18-like and MobileNetV2-like networks from the core's generators, compiled for acl: every
convolution, dense layer and pool offloaded, the report says what stays on the host and why, and
the outputs match the reference executor (float32 closely, QDQ bit for bit)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from acl_helpers import compiled

import accel
from accel.executor import ReferenceExecutor
from accel.testing import modelgen

RESOLUTION = 64
GENERATORS = {"resnet18": modelgen.resnet18, "mobilenet_v2": modelgen.mobilenet_v2}
COMPUTE_OPS = ("conv2d", "dense", "pool2d")


def _model(name: str, quantized: bool):
    # on the emulated Arm machine the models come from the x86 workstation (arm64_headline.py), as
    # a deployment's do: ONNX Runtime, which quantizes them, is not installed there
    folder = os.environ.get("ACCEL_ARM64_HEADLINE")
    if folder:
        return onnx.load(Path(folder) / model_file(name, quantized))
    return make_model(name, quantized)


def model_file(name: str, quantized: bool) -> str:
    return f"{name}-{'qdq' if quantized else 'fp32'}-{RESOLUTION}.onnx"


def make_model(name: str, quantized: bool):
    """The generator's model at RESOLUTION, in its QDQ form (ONNX Runtime's quantizer) if quantized."""
    model = GENERATORS[name](RESOLUTION)
    if quantized:
        rng = np.random.default_rng(0)
        calib = [rng.random((1, 3, RESOLUTION, RESOLUTION), dtype=np.float32) for _ in range(2)]
        model = modelgen.quantize_qdq(model, calib)
    return model


@pytest.mark.parametrize("quantized", [False, True], ids=["fp32", "qdq"])
@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_network(name, quantized):
    model = _model(name, quantized)
    graph = accel.import_onnx(model.SerializeToString())
    artifact = compiled(graph)
    report = artifact.report
    host = {n.op: n.reasons for n in report.host_nodes()}
    # every convolution, dense layer and pool runs on acl; what stays (the QDQ model's input
    # quantize and output dequantize) is reported with acl's reason
    assert not [op for op in host if any(k in op for k in COMPUTE_OPS)], host
    assert set(host) <= {"qnn.quantize", "qnn.dequantize"}, host
    for op, reasons in host.items():
        assert reasons == {"acl": f"{op} is not supported by acl"}
    feed = {graph.inputs[0].name: np.random.default_rng(3).random(graph.inputs[0].type.shape, dtype=np.float32)}
    got = artifact.executable().run(feed)
    want = ReferenceExecutor(graph).run(feed)
    out = graph.outputs[0].name
    g, w = np.asarray(got[out]), np.asarray(want[out])
    if quantized:
        # the float output of the final dequantize: equal because its uint8 input is equal
        assert np.array_equal(g, w), f"{int(np.sum(g != w))} of {w.size} outputs differ"
    else:
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(w))))
