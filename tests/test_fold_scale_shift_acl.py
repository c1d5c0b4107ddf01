"""Caffe2-style models on acl: the per-channel scales and shifts after convolutions fold, so none stays on the host.

Caffe2's exports (the ONNX model zoo's Inception v2 and DenseNet-121) write every
batch norm as ``Mul`` and ``Add`` of ``[C, 1, 1]`` constants. After
``fold_scale_shift`` those that follow a convolution are its weights and bias;
what stays are DenseNet's pre-activation batch norms, after a concatenation or
pooling, which acl runs as a per-channel multiply and add: both networks run on
acl whole, in one partition.
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


def _as_reports(graph):
    """Every node of graph as the report shows one (op, input names)."""

    class Row:
        def __init__(self, node):
            self.op, self.inputs = node.op, [v.name for v in node.inputs]

    return [Row(n) for n in graph.nodes]


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

    # without the pass, every one of them is a node of its own (which acl runs too, as a broadcast)
    monkeypatch.setattr(accel.passes, "fold_scale_shift", lambda g, **kw: g)
    before_graph, _ = _report(make)
    affine = ("multiply", "add")
    after_a_layer = [n for n in _after_a_layer(before_graph, _as_reports(before_graph)) if n.op in affine]
    assert after_a_layer
    assert sum(n.op in affine for n in graph.nodes) == sum(n.op in affine for n in before_graph.nodes) - len(
        after_a_layer
    )


def test_inception_v2_runs_on_acl_in_one_partition():
    _, report = _report(modelgen.inception_v2_caffe2)
    assert report.host_nodes() == []
    assert len(report.partitions) == 1


def test_densenet121_runs_on_acl_in_one_partition_its_pre_activation_batch_norms_included():
    graph, report = _report(modelgen.densenet121_caffe2)
    assert report.host_nodes() == []
    assert len(report.partitions) == 1
    # 58 dense layers, 3 transitions and the head each open with a batch norm after a concatenation or
    # pooling: they stay a multiply and an add (nothing to fold into), and acl runs them
    producer = {v: n.op for n in graph.nodes for v in n.outputs}
    kept = Counter(n.op for n in graph.nodes if n.op in ("multiply", "add") and n.inputs[0] in producer)
    assert kept == {"multiply": 62, "add": 62}
