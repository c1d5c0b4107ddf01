"""Why a composite did not match: the failure of the pattern that got furthest, in the partition report.

For every candidate root a backend did not claim, the report keeps the
``MatchFailure`` reason of the best attempt (``<backend>.<pattern> does not
match: ...``), unless the backend's check refused a match there (its reason
wins) or the backend has an op check for that op (it speaks about the op alone).
The reasons reach ``accel inspect --format json`` and ``accel compile``'s report.
"""

from __future__ import annotations

import numpy as np

import accel
from accel.backend import Backend, PatternEntry
from accel.builder import GraphBuilder
from accel.partition import partition_graph
from accel.pattern import MatchFailure, is_constant, is_op, wildcard
from accel.render import report_to_json
from accel.report import HOST


def qconv():
    conv = is_op("nn.conv2d")(wildcard(), is_constant()).has_dtype("uint8").named("conv")
    return conv.optional(lambda x: is_op("qnn.requantize")(x))


class Quantized(Backend):
    """Takes only uint8 convolutions (a pattern with a dtype constraint), plus relu by op check."""

    name = "q"
    distribution = "accel-q"

    def pattern_table(self):
        return [PatternEntry("qconv", qconv())]

    def op_checks(self):
        return {"nn.relu": lambda node: f"relu of {node.inputs[0].type.dtype} is not supported, only uint8"}


class TwoPatterns(Backend):
    """Two patterns rooted at relu: the second gets further on conv → relu."""

    name = "two"

    def pattern_table(self):
        dense = is_op("nn.relu")(is_op("nn.dense")(wildcard(), is_constant()))
        conv = is_op("nn.relu")(is_op("nn.conv2d")(wildcard(), is_constant()).has_attr(groups=2))
        return [PatternEntry("dense_relu", dense), PatternEntry("grouped_conv_relu", conv)]


class Checked(Backend):
    """The pattern matches; its check refuses."""

    name = "checked"

    def pattern_table(self):
        return [PatternEntry("conv", is_op("nn.conv2d")(wildcard(), is_constant()), lambda m: "kernels must be 1x1")]


def fp32_conv_relu():
    b = GraphBuilder(x=(1, 3, 8, 8))
    w = b.const(np.ones((4, 3, 3, 3), np.float32))
    return b.done(b.op("nn.relu", b.op("nn.conv2d", b.x["x"], w)))


def _reasons(report, backend):
    return {n.op: n.reasons[backend] for n in report.nodes}


def test_a_constraint_failure_is_the_reason_not_just_unsupported():
    g = fp32_conv_relu()
    r = partition_graph(g, [Quantized()])
    assert _reasons(r.report, "q") == {
        "nn.conv2d": "q.qconv does not match: this nn.conv2d has dtype float32, expected uint8",
        "nn.relu": "relu of float32 is not supported, only uint8",  # the op check speaks for relu
    }


def test_the_reason_reaches_inspect_json_and_the_compile_report():
    g = fp32_conv_relu()
    want = "q.qconv does not match: this nn.conv2d has dtype float32, expected uint8"
    doc = report_to_json(partition_graph(g, [Quantized()], materialize=False).report)  # what inspect prints
    assert doc["nodes"][0]["reasons"] == {"q": want}
    art = accel.compile(g, "q", available={"q": Quantized})
    assert art.report.nodes[0].reasons == {"q": want}
    assert art.report.nodes[0].backend == HOST


def test_the_attempt_that_got_furthest_explains_the_root():
    g = fp32_conv_relu()
    r = partition_graph(g, [TwoPatterns()])
    relu = next(n for n in r.report.nodes if n.op == "nn.relu")
    # dense_relu fails at the first input (conv is not dense); grouped_conv_relu reaches the conv itself.
    # That failure is about the conv, not the relu: the relu's reason says what concerns it, the
    # pattern's detail is kept beside it (accel inspect -v)
    assert relu.reasons["two"] == "nn.relu is not supported by two on its own, only inside two.grouped_conv_relu"
    assert relu.details == {
        "two": f"two.grouped_conv_relu does not match: nn.conv2d {g.nodes[0].name!r} has groups=1, expected 2"
    }
    conv = next(n for n in r.report.nodes if n.op == "nn.conv2d")
    assert conv.reasons["two"] == "nn.conv2d is not supported by two"  # no pattern is rooted at a conv


def test_alternatives_failing_at_one_place_list_every_op_they_wanted():
    conv = is_op("nn.conv2d")(wildcard(), is_constant())
    conv = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
    pattern = conv.optional(lambda x: is_op("nn.relu")(x))
    b = GraphBuilder(x=(1, 4), y=(1, 4))
    g = b.done(b.op("nn.relu", b.op("add", b.x["x"], b.x["y"])))
    failure = pattern.try_match(g.nodes[-1], g)
    assert isinstance(failure, MatchFailure)
    add = g.nodes[0]
    assert (
        failure.reason == f"%{add.outputs[0].name} is produced by add {add.name!r}, expected nn.bias_add or nn.conv2d"
    )
    assert failure.progress == 1.0  # relu matched, then its input failed


def test_a_refusing_check_keeps_its_own_reason():
    g = fp32_conv_relu()
    r = partition_graph(g, [Checked()])
    assert _reasons(r.report, "checked")["nn.conv2d"] == "checked.conv: kernels must be 1x1"


class NhwcConvRelu(Backend):
    name = "nhwc"
    layout = "NHWC"

    def pattern_table(self):
        return [PatternEntry("conv_relu", is_op("nn.relu")(is_op("nn.conv2d")(wildcard(), is_constant())))]


def test_the_root_and_its_inputs_are_named_relative_to_the_node_so_equal_failures_read_alike():
    b = GraphBuilder(x=(1, 4), y=(1, 4))
    s = b.op("add", b.x["x"], b.x["y"])
    g = b.done(b.op("nn.relu", s), b.op("nn.relu", b.op("add", s, b.x["y"])))
    r = partition_graph(g, [TwoPatterns()])
    relus = [n for n in r.report.nodes if n.op == "nn.relu"]
    assert [n.reasons["two"] for n in relus] == [
        "nn.relu is not supported by two on its own, only inside two.dense_relu"
    ] * 2
    assert [n.details["two"] for n in relus] == [
        "two.dense_relu does not match: input 0 of this nn.relu is produced by add, expected nn.dense"
    ] * 2


def test_values_the_layout_conversion_made_are_named_as_in_the_model():
    b = GraphBuilder(x=(1, 4, 8, 8), w=(4, 4, 3, 3))
    g = b.done(b.op("nn.relu", b.op("nn.conv2d", b.x["x"], b.x["w"])))
    r = partition_graph(g, [NhwcConvRelu()])
    relu = r.report.nodes[1]
    assert relu.reasons == {"nhwc": "nhwc.conv_relu does not match: %w (transposed for NHWC) is not a constant"}


class Declining(Backend):
    """Takes no relu alone, and says why; says nothing of add."""

    name = "declining"
    layout = "NCHW"

    def pattern_table(self):
        return [PatternEntry("dense_relu", is_op("nn.relu")(is_op("nn.dense")(wildcard(), is_constant())))]

    def declines(self):
        return {"nn.relu": lambda node: "declining runs a relu only fused after its dense layer"}


def test_a_backend_says_why_it_declines_an_op_it_never_takes_alone():
    b = GraphBuilder(x=(1, 4), y=(1, 4))
    g = b.done(b.op("nn.relu", b.op("add", b.x["x"], b.x["y"])))
    reasons = _reasons(partition_graph(g, [Declining()]).report, "declining")
    assert reasons == {
        "nn.relu": "declining runs a relu only fused after its dense layer",  # its own words, not the pattern's
        "add": "add is not supported by declining",
    }
