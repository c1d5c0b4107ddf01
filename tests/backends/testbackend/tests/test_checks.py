"""The testbackend's refusals carry reasons a user can act on (seen in the partition report)."""

from __future__ import annotations

import numpy as np
import pytest

from accel.builder import GraphBuilder
from accel.ir import TensorType

pytest.importorskip("accel_testbackend", reason="accel-testbackend is not installed")
from accel_testbackend import TestBackend

from accel.partition import partition_graph


def reasons(graph) -> dict[str, str]:
    report = partition_graph(graph, [TestBackend()]).report
    return {n.op: n.reasons.get("testbackend", "") for n in report.nodes if n.backend == "host"}


def test_dilated_max_pool_is_refused():
    b = GraphBuilder(x=(1, 4, 9, 9))
    g = b.done(b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2), dilation=(2, 2)))
    assert reasons(g) == {"nn.max_pool2d": "dilation=[2, 2], dilation must = [1, 1]"}


def test_non_float32_pool_is_refused():
    b = GraphBuilder(x=TensorType((1, 4, 6, 6), "float64"))
    g = b.done(b.op("nn.avg_pool2d", b.x["x"], pool_size=(2, 2)))
    assert reasons(g) == {"nn.avg_pool2d": "dtype='float64', dtype must be float32"}


def test_broadcasting_add_is_refused():
    b = GraphBuilder(x=(3, 4), y=(4,))
    g = b.done(b.op("add", b.x["x"], b.x["y"]))
    assert reasons(g) == {"add": "add of shapes [3, 4] and [4]: broadcasting is not supported, shapes must be equal"}


def test_grouped_conv_is_refused():
    b = GraphBuilder(x=(1, 4, 6, 6))
    w = b.const(np.ones((4, 2, 3, 3), np.float32))
    g = b.done(b.op("nn.conv2d", b.x["x"], w, groups=2))
    assert reasons(g) == {"nn.conv2d": "testbackend.conv2d: groups=2, groups must = 1"}


def test_conv_with_bias_and_relu_is_one_composite():
    b = GraphBuilder(x=(1, 3, 6, 6))
    y = b.op("nn.conv2d", b.x["x"], b.const(np.ones((4, 3, 3, 3), np.float32)))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(np.ones(4, np.float32))))
    report = partition_graph(b.done(y), [TestBackend()]).report
    assert {n.op: n.composite for n in report.nodes} == dict.fromkeys(
        ["nn.conv2d", "nn.bias_add", "nn.relu"], "testbackend.conv2d"
    )
