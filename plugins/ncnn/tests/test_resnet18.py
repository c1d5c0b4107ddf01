"""A ResNet-18 as PyTorch exports it (accel's model generator, 64×64 to stay quick): ncnn takes
the whole network, flatten and classifier included, and the compiled model matches accel's reference executor."""

from __future__ import annotations

import numpy as np
from accel_ncnn import NcnnBackend

import accel
from accel.compiler import compile as compile_model
from accel.executor import ReferenceExecutor
from accel.testing import modelgen

RESOLUTION = 64


def test_resnet18_offloads_every_convolution():
    graph = accel.import_onnx(modelgen.resnet18(RESOLUTION).SerializeToString())
    convs = sum(n.op == "nn.conv2d" for n in graph.nodes)
    artifact = compile_model(graph, target={"devices": [{"kind": "ncnn"}]}, available={"ncnn": NcnnBackend})
    host = {n.op for n in artifact.report.host_nodes()}
    assert not host, host
    partitions = [p.body for p in artifact.graph.nodes if p.op == "call"]
    offloaded = [n for body in partitions for n in body.nodes if n.attrs.get("composite") == "ncnn.conv2d"]
    assert len(offloaded) == convs == 20
    feed = {graph.inputs[0].name: np.random.default_rng(3).random(graph.inputs[0].type.shape, dtype=np.float32)}
    out = graph.outputs[0].name
    got = np.asarray(artifact.executable(threads=2).run(feed)[out])
    want = np.asarray(ReferenceExecutor(graph).run(feed)[out])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(want))))
