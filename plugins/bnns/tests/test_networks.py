"""Whole networks compiled with ``--backends bnns``: ResNet-18, MobileNetV2 and a transformer encoder,
against the reference executor; and bnns listed before an NHWC backend, with no layout transposes between regions."""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace

import numpy as np
import pytest
from accel_bnns import BnnsBackend, support

import accel
from accel.backend import Backend
from accel.ir import Graph
from accel.partition import partition_graph
from accel.plugins import discover
from accel.testing import modelgen


@cache
def resnet18():
    return modelgen.resnet18(64)


@cache
def encoder():
    return modelgen.transformer_encoder(32, dim=64, heads=4, ffn=256, layers=2)


def check_compiled(model, backends: str) -> accel.Graph:
    feed = modelgen.random_inputs(model, seed=3)[0]
    graph = accel.import_onnx(model)
    want = accel.execute(graph, feed)[modelgen.OUTPUT_NAME]
    artifact = accel.compile(model, backends)
    exe = artifact.executable()
    got = exe.run(feed)[modelgen.OUTPUT_NAME]
    assert want.std() > 0.1
    rel = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
    assert rel <= 1e-5, f"relative error {rel:.2e}"
    return artifact


def test_resnet18_on_bnns_matches_the_reference():
    artifact = check_compiled(resnet18(), "bnns")
    report = artifact.report
    on = {n.op: n.backend for n in report.nodes if n.op in ("nn.conv2d", "nn.max_pool2d", "nn.global_avg_pool2d")}
    assert set(on.values()) == {"bnns"}
    assert {n.composite for n in report.nodes if n.op == "nn.conv2d"} == {"bnns.conv2d_bias_act", "bnns.conv2d_bias"}
    # the residual add → relu joins are bnns's too: one region to the flatten, which the host keeps, and the dense
    assert {n.composite for n in report.nodes if n.op == "add"} == {"bnns.add_relu"}
    assert sorted({n.op for n in report.nodes if n.backend == "host"}) == ["reshape"]
    assert len(report.partitions) == 2
    assert sum(p.transposes for p in report.partitions) == 0


def test_mobilenet_v2_on_bnns_is_one_region_to_the_flatten():
    """ReLU6 as the convolutions' clamp, the residual adds (no activation) as single ops."""
    artifact = check_compiled(modelgen.mobilenet_v2(resolution=64), "bnns")
    report = artifact.report
    assert {n.backend for n in report.nodes if n.op == "add"} == {"bnns"}
    assert {n.composite for n in report.nodes if n.op == "add"} == {None}
    assert sorted({n.op for n in report.nodes if n.backend == "host"}) == ["reshape"]
    assert len(report.partitions) == 2


def test_transformer_encoder_on_bnns_matches_the_reference():
    artifact = check_compiled(encoder(), "bnns")
    report = artifact.report
    composites = {n.composite for n in report.nodes if n.backend == "bnns"}
    assert composites == {"bnns.dense_bias", "bnns.dense_bias_gelu", None}
    assert {n.op for n in report.nodes if n.backend == "bnns" and n.composite is None} == {"nn.batch_matmul", "add"}
    host = {n.op for n in report.nodes if n.backend == "host"}
    assert {"nn.softmax", "mean", "sqrt"} <= host  # softmax and layer norm stay on the host
    assert not host & {"nn.dense", "nn.batch_matmul", "tanh", "power"}


class Nhwc(Backend):
    """An NHWC backend listed after bnns that takes what bnns does not: the residual add and relu."""

    name = "nhwcfake"
    layout = "NHWC"

    def op_checks(self):
        return {"add": lambda n: None, "nn.relu": lambda n: None, "nn.conv2d": lambda n: None}


def _transposes_between_bnns_regions(graph: Graph) -> int:
    return sum(1 for n in graph.nodes if n.op == "transpose")


class BnnsWithoutAdd(BnnsBackend):
    """bnns without its add: its regions on ResNet-18 have the residual add → relu between them."""

    support = SimpleNamespace(
        PATTERNS=[p for p in support.PATTERNS if p[0] != "add_relu"],
        OP_CHECKS={op: check for op, check in support.OP_CHECKS.items() if op != "add"},
    )


def test_bnns_before_an_nhwc_backend_leaves_no_transposes_on_resnet18():
    """Elementwise regions of an NHWC backend between planar bnns regions are built in NCHW."""
    graph = accel.import_onnx(resnet18())
    result = partition_graph(graph, [BnnsWithoutAdd(), Nhwc()])
    backends = [p.backend for p in result.report.partitions]
    assert backends.count("nhwcfake") == 8 and backends.count("bnns") == 10  # bnns first: every conv is bnns'
    assert {n.backend for n in result.report.nodes if n.op == "nn.conv2d"} == {"bnns"}
    assert _transposes_between_bnns_regions(result.graph) == 0
    for region in result.regions:
        if region.attrs["compiler"] == "nhwcfake":
            assert [n.op for n in region.body.nodes] == ["add", "nn.relu"]
            assert region.body.inputs[0].type.shape[1] in (64, 128, 256, 512)  # channels second: planar


@pytest.mark.skipif("acl" not in {s.name for s in discover() if s.state == "ok"}, reason="accel-acl is not installed")
def test_bnns_then_acl_on_resnet18():
    artifact = check_compiled(resnet18(), "bnns,acl")
    report = artifact.report
    assert {n.backend for n in report.nodes if n.op == "nn.conv2d"} == {"bnns"}
    assert sum(p.transposes for p in report.partitions) == 0


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_onnx_gelu_after_a_linear_layer_is_one_composite(approximate):
    """ONNX ``Gelu`` (opset 20) after MatMul + Add, as exporters write ``nn.Linear`` + ``nn.GELU``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    w = numpy_helper.from_array((rng.standard_normal((16, 24)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(24) * 0.3).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Gelu", ["hb"], [modelgen.OUTPUT_NAME], approximate=approximate),
    ]
    graph = helper.make_graph(
        nodes,
        "linear_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
        [helper.make_tensor_value_info(modelgen.OUTPUT_NAME, TensorProto.FLOAT, [2, 5, 24])],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    onnx.checker.check_model(model)
    artifact = check_compiled(model, "bnns")
    assert {n.composite for n in artifact.report.nodes} == {"bnns.dense_bias_gelu"}
