"""Whole networks compiled for ncnn alone (``--backends ncnn``) and for ncnn before acl
(``--backends ncnn,acl``): an AlexNet with its LRNs, a ResNet-18 and a MobileNetV2, float32.
ncnn takes every node of them; the outputs match accel's reference executor."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from ncnn_nets import alexnet

import accel
from accel.compiler import compile as compile_model
from accel.executor import ReferenceExecutor
from accel.testing import modelgen

RESOLUTION = 64
NETWORKS = {
    "alexnet": lambda: alexnet(99, width=16, num_classes=100),
    "resnet18": lambda: modelgen.resnet18(RESOLUTION),
    "mobilenet_v2": lambda: modelgen.mobilenet_v2(RESOLUTION),
}
HAS_ACL = importlib.util.find_spec("accel_acl") is not None
BACKENDS = [
    pytest.param(("ncnn",), id="ncnn"),
    pytest.param(
        ("ncnn", "acl"), id="ncnn,acl", marks=pytest.mark.skipif(not HAS_ACL, reason="accel-acl not installed")
    ),
]


@pytest.mark.parametrize("backends", BACKENDS)
@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_network(name, backends):
    graph = accel.import_onnx(NETWORKS[name]().SerializeToString())
    artifact = compile_model(graph, target={"devices": [{"kind": b} for b in backends]})
    host = {n.op: n.reasons for n in artifact.report.host_nodes()}
    assert not host, host
    assert [backend for _, backend in artifact.partitions] == ["ncnn"]
    feed = {graph.inputs[0].name: np.random.default_rng(3).random(graph.inputs[0].type.shape, dtype=np.float32)}
    out = graph.outputs[0].name
    want = np.asarray(ReferenceExecutor(graph).run(feed)[out])
    for threads in (1, 2):
        got = np.asarray(artifact.executable(threads=threads).run(feed)[out])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(want))))
