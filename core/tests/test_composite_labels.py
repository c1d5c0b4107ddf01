"""Composites reach the serializer with their pattern labels (``accel.pattern.composite_match``).

A serializer asks ``composite_match(call)`` for the Match of a composite call
node: labels → body nodes and values, whatever the ops are (two casts, three
multiplies), in the backend's layout, and the same after an artifact round trip.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import accel
from accel.artifact import artifact_from_bytes
from accel.backend import Backend, PatternEntry
from accel.builder import GraphBuilder
from accel.errors import GraphError
from accel.ir import CALL_OP, Graph, Node, TensorType
from accel.partition import partition_graph
from accel.pattern import LABELS_ATTR, composite_labels, composite_match, is_constant, is_op, wildcard


def cast_pool_cast():
    """f16 → cast f32 → avg_pool2d → cast f16: two nodes of one op in one composite."""
    widen = is_op("cast")(wildcard().named("x")).has_dtype("float32").named("widen")
    pool = is_op("nn.avg_pool2d")(widen).named("pool")
    return is_op("cast")(pool).has_dtype("float16").named("narrow")


def gelu():
    """x · (1 + erf(x · c)) · 0.5, the erf form of GELU: three multiplies in one composite."""
    x = wildcard().named("x")
    scale = is_op("multiply")(x, is_constant().named("inv_sqrt2")).named("scale")
    plus = is_op("add")(is_op("erf")(scale).named("erf"), is_constant()).named("plus")
    gate = is_op("multiply")(x, plus).named("gate")
    return is_op("multiply")(gate, is_constant()).named("half")


class Recorder(Backend):
    """Serializes each composite as what composite_match says about it (labels → op, node, outer value)."""

    name = "rec"
    distribution = "accel-rec"
    version = "0.0.1"

    def pattern_table(self):
        return [PatternEntry("cast_pool", cast_pool_cast()), PatternEntry("gelu", gelu())]

    def serialize(self, graph: Graph) -> bytes:
        doc = {}
        for node in graph.nodes:
            assert node.op == CALL_OP, f"{node.op} outside a composite"
            m = composite_match(node)
            labels = {}
            for label, got in sorted(m.bindings.items()):
                if isinstance(got, Node):
                    labels[label] = [got.op, got.name, got.attrs.get("dtype")]
                else:
                    labels[label] = ["value", m.outer(got).name, None]
            doc[node.attrs["composite"]] = {
                "labels": labels,
                "root": m.root.name,
                "ops": [n.op for n in m.nodes],
                "outputs": [m.outer(v).name for v in m.outputs],
                "constants": [c.type.size for c in m.constants],
            }
        return json.dumps(doc, sort_keys=True).encode()


def model() -> Graph:
    b = GraphBuilder(x=TensorType((1, 4, 8, 8), "float16"), y=(2, 6))
    w = b.op("cast", b.x["x"], dtype="float32")
    p = b.op("nn.avg_pool2d", w, pool_size=(2, 2), strides=(2, 2))
    pooled = b.op("cast", p, dtype="float16")
    y = b.x["y"]
    s = b.op("multiply", y, b.const(np.float32(1 / math.sqrt(2))))
    plus = b.op("add", b.op("erf", s), b.const(np.float32(1)))
    g = b.op("multiply", b.op("multiply", y, plus), b.const(np.float32(0.5)))
    return b.done(pooled, g)


def test_serializer_gets_every_label_of_both_composites():
    graph = model()
    n = {i: node.name for i, node in enumerate(graph.nodes)}
    doc = json.loads(accel.compile(graph, "rec", available={"rec": Recorder}).blobs["rec_0"])
    assert set(doc) == {"rec.cast_pool", "rec.gelu"}
    pool = doc["rec.cast_pool"]
    # the two casts told apart by label, not by op
    assert pool["labels"]["widen"] == ["cast", n[0], "float32"]
    assert pool["labels"]["narrow"] == ["cast", n[2], "float16"]
    assert pool["labels"]["pool"] == ["nn.avg_pool2d", n[1], None]
    assert pool["root"] == n[2] and pool["ops"] == ["cast", "nn.avg_pool2d", "cast"]
    assert pool["labels"]["x"] == ["value", "x", None]  # outer(): the call's argument, the region's input
    assert pool["outputs"] == [graph.nodes[2].outputs[0].name]
    gelu = doc["rec.gelu"]
    assert {k: v[:2] for k, v in gelu["labels"].items()} == {
        "scale": ["multiply", n[3]],
        "erf": ["erf", n[4]],
        "plus": ["add", n[5]],
        "gate": ["multiply", n[6]],
        "half": ["multiply", n[7]],
        "x": ["value", "y"],
        "inv_sqrt2": ["value", graph.nodes[3].inputs[1].name],
    }
    assert gelu["constants"] == [1, 1, 1]


def test_labels_survive_an_artifact_round_trip():
    graph = model()
    art = accel.compile(graph, "rec", available={"rec": Recorder})
    back = artifact_from_bytes(art.to_bytes(), backends={"rec": Recorder})
    (region,) = [nd for nd in back.graph.nodes if nd.op == CALL_OP]
    assert region.body is not None
    # the serializer reads the loaded body exactly as it read the fresh one
    assert Recorder().serialize(region.body) == art.blobs[region.name]
    for call in region.body.nodes:
        m = composite_match(call)
        assert set(m.bindings) >= {"x"} and all(isinstance(k, str) for k in m.bindings)
        assert call.attrs[LABELS_ATTR] == composite_labels(m)


def test_match_of_a_composite_equals_the_pattern_match_in_the_partitioned_body():
    graph = model()
    result = partition_graph(graph, [Recorder()])
    (region,) = result.regions
    assert region.body is not None
    for call in region.body.nodes:
        m = composite_match(call)
        pattern = {"rec.cast_pool": cast_pool_cast(), "rec.gelu": gelu()}[call.attrs["composite"]]
        again = pattern.match(m.root, call.body)  # the body is the composite: the pattern matches it whole
        assert again is not None
        assert [x.name for x in again.nodes] == [x.name for x in m.nodes]
        assert {k: v.name for k, v in again.bindings.items()} == {k: v.name for k, v in m.bindings.items()}
        assert m.call is call and m.outputs == list(call.body.outputs)
        assert [m.outer(v) for v in call.body.inputs] == list(call.inputs)


def test_value_labels_point_at_the_reading_node_and_input():
    graph = model()
    p = gelu()
    m = p.match(graph.nodes[-1], graph)
    assert m is not None
    labels = dict((item[0], item[1:]) for item in composite_labels(m))
    assert labels["x"] == (graph.nodes[3].name, 0)
    assert labels["inv_sqrt2"] == (graph.nodes[3].name, 1)
    assert labels["gate"] == (graph.nodes[6].name,)


def _composite(labels) -> Node:
    b = GraphBuilder(x=(2, 3))
    body = b.done(b.op("nn.relu", b.x["x"]))
    outer = GraphBuilder(x=(2, 3))
    attrs = {"composite": "b.relu", LABELS_ATTR: labels}
    return Node(CALL_OP, [outer.x["x"]], attrs, [body.outputs[0].type], name="c", output_names=["y"], body=body)


def test_a_composite_without_labels_has_an_empty_match():
    m = composite_match(_composite(()))
    assert m.bindings == {} and [n.op for n in m.nodes] == ["nn.relu"]
    with pytest.raises(KeyError, match="no pattern labelled 'act'"):
        m.node("act")


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ((("act", "nowhere"),), "names no node of its body"),
        ((("act",),), "names no node of its body"),
        (("act",), "names no node of its body"),
        ((("x", "PLACEHOLDER", 3),), "has no input 3"),
        ((("x", "PLACEHOLDER", True),), "has no input True"),
        ("act", "not a tuple of entries"),
        (3, "not a tuple of entries"),
    ],
)
def test_bad_labels_are_a_graph_error(labels, message):
    call = _composite(labels)
    assert call.body is not None
    relu = call.body.nodes[0].name
    if isinstance(labels, tuple):
        labels = tuple(
            tuple(relu if x == "PLACEHOLDER" else x for x in item) if isinstance(item, tuple) else item
            for item in labels
        )
    call = _composite(labels)
    with pytest.raises(GraphError, match=message):
        composite_match(call)


def test_only_composite_calls_have_a_match():
    b = GraphBuilder(x=(2, 3))
    g = b.done(b.op("nn.relu", b.x["x"]))
    with pytest.raises(GraphError, match="is not a composite call"):
        composite_match(g.nodes[0])
