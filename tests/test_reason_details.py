"""A node's reason speaks of the node; a pattern's failure on what surrounds it is a detail (`-v`, JSON)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

import accel
from accel.builder import GraphBuilder
from accel.models import default_model_path
from accel.partition import partition_report
from accel.plugins import available_backends
from accel.render import print_report, report_to_json


def _bias_on_an_input():
    b = GraphBuilder(x=(1, 4, 8, 8))
    return b.done(b.op("nn.relu", b.op("nn.bias_add", b.x["x"], b.const(np.ones(4, "float32")))))


@pytest.mark.skipif("testbackend" not in available_backends(), reason="needs accel-testbackend installed")
def test_the_pattern_detail_is_kept_beside_the_reason_in_json_and_verbose_text():
    from accel_testbackend import TestBackend

    report = partition_report(_bias_on_an_input(), [TestBackend()])
    (bias,) = [n for n in report.nodes if n.op == "nn.bias_add"]
    assert bias.reasons == {
        "testbackend": "nn.bias_add is not supported by testbackend on its own, only inside testbackend.conv2d"
    }
    detail = "testbackend.conv2d does not match: input 0 of this nn.bias_add is not an op output, expected nn.conv2d"
    assert bias.details == {"testbackend": detail}
    nodes = {n["op"]: n for n in report_to_json(report)["nodes"]}
    assert nodes["nn.bias_add"]["details"] == {"testbackend": detail}
    assert "details" not in nodes["nn.relu"]

    def text(verbose: bool) -> str:
        buf = io.StringIO()
        print_report(report, Console(file=buf, width=400), verbose=verbose)
        return buf.getvalue()

    assert detail not in text(False)
    assert detail in text(True)


@pytest.mark.skipif("ethosn" not in available_backends(), reason="needs accel-ethosn installed")
def test_a_qdq_models_input_quantize_is_explained_in_ethosns_words():
    """ethosn quantizes only inside its activation patterns: the model's input quantize is an edge conversion
    of its runtime (Backend.edge_ops) when an ethosn partition reads it, and declined for what it is
    (Backend.declines) when none does; never explained by the sigmoid pattern it is not part of."""
    from accel.plugins import get_backend

    graph = accel.import_onnx(default_model_path(quantized=True))
    report = partition_report(graph, [get_backend("ethosn")()])
    (quantize,) = [n for n in report.nodes if n.op == "qnn.quantize"]
    assert quantize.backend == "ethosn"
    assert quantize.reasons["ethosn"].startswith("an edge conversion: ethosn's runtime runs it on the CPU")

    b = GraphBuilder(x=(1, 1, 8, 8))
    y = b.op("qnn.quantize", b.x["x"], scale=0.05, zero_point=3, out_dtype="uint8")
    report = partition_report(b.done(y), [get_backend("ethosn")()])
    (quantize,) = [n for n in report.host_nodes() if n.op == "qnn.quantize"]
    assert quantize.reasons["ethosn"].startswith("ethosn takes quantized tensors in")
    assert "expected sigmoid" not in quantize.reasons["ethosn"]
