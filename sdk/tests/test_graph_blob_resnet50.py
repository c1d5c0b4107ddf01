"""Create-time cost of a ResNet-50 graph blob: write it, then parse and validate it in C++.

``pytest -m slow -s sdk/tests/test_graph_blob_resnet50.py`` prints the figures quoted
in docs/sdk.md ("Graph blob format").
"""

from __future__ import annotations

import time

import pytest
from accel_sdk.graph_blob import GraphBlobWriter, match_composites
from probe_build import probe
from test_graph_blob import conv_pattern

import accel
from accel.backend import Backend, PatternEntry
from accel.ir import CALL_OP
from accel.partition import partition_graph
from accel.testing.modelgen import resnet50

pytestmark = pytest.mark.slow


class WholeModel(Backend):
    name = "bench"
    layout = "NCHW"

    def pattern_table(self):
        return [PatternEntry("conv", conv_pattern())]

    def op_checks(self):
        ops = ("add", "nn.relu", "nn.max_pool2d", "nn.global_avg_pool2d", "reshape", "nn.dense", "nn.bias_add")
        return {op: (lambda n: None) for op in ops}


def test_resnet50_blob_parses_and_validates_in_milliseconds():
    graph = accel.import_onnx(resnet50())
    (region,) = partition_graph(graph, [WholeModel()]).regions
    body = region.body
    assert body is not None
    t0 = time.perf_counter()
    blob = GraphBlobWriter("bench").write(body, matches=match_composites(body, {"conv": conv_pattern()}))
    write_s = time.perf_counter() - t0
    m = probe()
    g = m.graph(blob, "bench")
    composites = sum(n.op == CALL_OP for n in body.nodes)
    assert len(g["nodes"]) == len(body.nodes) and composites == 53
    constant_bytes = sum(len(t["data"]) for t in g["tensors"] if "data" in t)
    assert constant_bytes > 90e6  # ResNet-50's 25.5M float32 parameters
    seconds = m.parse_seconds(blob, "bench", 30)
    print(
        f"\nResNet-50 graph blob: {len(blob) / 1e6:.1f} MB ({constant_bytes / 1e6:.1f} MB constants), "
        f"{len(g['nodes'])} nodes ({composites} composites), {len(g['tensors'])} tensors; "
        f"write {write_s * 1e3:.0f} ms, parse + validate {seconds * 1e3:.3f} ms (median of 30)"
    )
    assert seconds < 0.05  # create-time: tables only, constants are not copied
