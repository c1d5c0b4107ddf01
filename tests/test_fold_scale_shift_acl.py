"""Caffe2-style models on acl: the per-channel scales and shifts after convolutions fold, so none stays on the host.

Caffe2's exports (the ONNX model zoo's Inception v2 and DenseNet-121) write every
batch norm as ``Mul`` and ``Add`` of ``[C, 1, 1]`` constants, which acl declines
("broadcasting is not supported"). After ``fold_scale_shift`` those that follow a
convolution are its weights and bias; what stays are DenseNet's pre-activation
batch norms, after a concatenation or pooling.
"""

from __future__ import annotations

from collections import Counter

import pytest

import accel
import accel.passes
from accel.partition import partition_report
from accel.testing import modelgen

pytest.importorskip("accel_acl", reason="needs accel-acl installed")
from accel_acl import AclBackend

LAYERS = ("nn.conv2d", "nn.dense")


def _report(make):
    graph = accel.import_onnx(make())
    return graph, partition_report(graph, [AclBackend()])


def _after_a_layer(graph, host_nodes):
    """Host multiplies and adds whose data comes from a layer (directly or through its nn.bias_add / a multiply)."""
    producer = {v.name: n for n in graph.nodes for v in n.outputs}
    found = []
    for node in host_nodes:
        if node.op not in ("multiply", "add"):
            continue
        p = producer.get(node.inputs[0]) or producer.get(node.inputs[-1])
        while p is not None and p.op in ("nn.bias_add", "multiply"):
            p = producer.get(p.inputs[0].name)
        if p is not None and p.op in LAYERS:
            found.append(node)
    return found


@pytest.mark.parametrize("make", [modelgen.inception_v2_caffe2, modelgen.densenet121_caffe2])
def test_no_scale_or_shift_after_a_conv_stays_on_the_host(make, monkeypatch):
    graph, report = _report(make)
    host = report.host_nodes()
    assert _after_a_layer(graph, host) == []

    # without the pass, every one of them is there, declined for broadcasting
    monkeypatch.setattr(accel.passes, "fold_scale_shift", lambda g, **kw: g)
    before_graph, before = _report(make)
    stuck = _after_a_layer(before_graph, before.host_nodes())
    assert stuck and all("not supported" in n.reasons["acl"] for n in stuck)
    assert len(before.host_nodes()) - len(host) == len(stuck)
    assert len(report.partitions) < len(before.partitions)


def test_inception_v2_runs_on_acl_in_one_partition():
    _, report = _report(modelgen.inception_v2_caffe2)
    assert report.host_nodes() == []
    assert len(report.partitions) == 1


def test_densenet121_leaves_only_its_pre_activation_batch_norms_on_the_host():
    graph, report = _report(modelgen.densenet121_caffe2)
    host = report.host_nodes()
    # 58 dense layers, 3 transitions and the head each open with a batch norm after a concatenation or pooling
    assert Counter(n.op for n in host) == {"multiply": 62, "add": 62}
    producer = {v.name: n.op for n in graph.nodes for v in n.outputs}
    assert {producer[n.inputs[0]] for n in host if n.op == "multiply"} == {
        "concatenate",
        "nn.max_pool2d",
        "nn.avg_pool2d",
    }
