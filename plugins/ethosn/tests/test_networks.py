"""Whole QDQ networks through ethosn: one partition holding every quantized conv / pool / add, bit-exact end to end."""

from __future__ import annotations

import numpy as np
import pytest
from accel_ethosn.compiler import compile_partition

import accel
from accel.executor import ReferenceExecutor
from accel.models import default_model_path, load_digits_test
from accel.testing import modelgen

QUANTIZED_WORK = {"qnn.conv2d", "qnn.add", "nn.max_pool2d", "nn.global_avg_pool2d", "qnn.dense"}
EDGES = {"qnn.quantize", "qnn.dequantize", "transpose"}


def _ops(graph) -> list[str]:
    out = []
    for n in graph.nodes:
        out.extend(_ops(n.body) if n.body is not None else [n.op])
    return out


def _check(model_bytes: bytes, feeds: list[dict[str, np.ndarray]], tmp_path) -> None:
    graph = accel.import_onnx(model_bytes)
    art = accel.compile(graph, "ethosn")
    assert [b for _, b in art.partitions] == ["ethosn"], art.partitions
    host = [n.op for n in art.report.host_nodes()]
    assert not QUANTIZED_WORK & set(host), host
    # the float input's quantize and layout, and the result's dequantize: ethosn's runtime's, at the edges
    edges = {n.op: n.reasons["ethosn"] for n in art.report.nodes if n.op in EDGES}
    assert edges and all(
        why.startswith("an edge conversion: ethosn's runtime runs it on the CPU") for why in edges.values()
    )
    assert not EDGES & set(host), host
    (region,) = [n for n in art.graph.nodes if n.op == "call"]
    inside = _ops(region.body)
    want_work = [op for op in _ops(graph) if op in QUANTIZED_WORK]
    assert sorted(op for op in inside if op in QUANTIZED_WORK) == sorted(want_work)
    stream = compile_partition(region.body)
    assert stream.arena_size > 0
    path = tmp_path / "model.accel"
    path.write_bytes(art.to_bytes())
    exe = accel.load(path)
    ref = ReferenceExecutor(graph)
    for feed in feeds:
        got, want = exe.run(feed), ref.run(feed)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("make", [modelgen.resnet18, modelgen.mobilenet_v2], ids=["resnet18", "mobilenet_v2"])
def test_qdq_network_is_bit_exact(make, tmp_path):
    model = make(resolution=64, num_classes=100)
    q = modelgen.quantize_qdq(model, 2)
    _check(q.SerializeToString(), modelgen.random_inputs(model, 2, seed=5), tmp_path)


def test_digits_backbone_is_bit_exact():
    images, _ = load_digits_test()
    data = default_model_path().read_bytes()
    graph = accel.import_onnx(data)
    art = accel.compile(graph, "ethosn")
    assert [b for _, b in art.partitions] == ["ethosn"]
    exe, ref = art.executable(), ReferenceExecutor(graph)
    for img in images[:20]:
        feed = {"image": img[None]}
        np.testing.assert_array_equal(exe.run(feed)["probabilities"], ref.run(feed)["probabilities"])
