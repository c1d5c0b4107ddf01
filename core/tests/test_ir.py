"""IR invariants, the text printer, JSON + .npy round trip and the reference executor's contract."""

from __future__ import annotations

import json
import threading
import zipfile

import numpy as np
import pytest

import accel
from accel.errors import GraphError, InputError, SerializationError, TypeInferenceError, UnsupportedOpError
from accel.executor import ReferenceExecutor
from accel.ir import Graph, Node, QuantParams, TensorType, Value, toposort
from accel.ops.registry import get_op
from accel.serialize import graph_from_json, graph_to_json, load_graph, save_graph


def small_graph() -> Graph:
    """x -> relu -> add(const) -> sigmoid, with a second output of the relu."""
    x = Value("x", TensorType((2, 3), "float32"))
    g = Graph([x], [], [])
    relu = g.new_node("nn.relu", [x])
    c = g.new_const(np.arange(3, dtype=np.float32), "bias")
    add = g.new_node("add", [relu.output, c])
    sig = g.new_node("sigmoid", [add.output])
    g.nodes = [relu, add, sig]
    g.outputs = [sig.output, relu.output]
    g.lint()
    return g


def test_type_equality_compares_shape_dtype_and_quant() -> None:
    t = TensorType((1, 4), "float32")
    assert t == TensorType((1, 4), "float32") and hash(t) == hash(TensorType((1, 4), "float32"))
    assert t != TensorType((4, 1), "float32") and t != TensorType((1, 4), "int32")
    q, r = QuantParams(0.5, 3), QuantParams(0.5, 4)
    assert TensorType((2,), "uint8", q) == TensorType((2,), "uint8", QuantParams(0.5, 3))
    assert TensorType((2,), "uint8", q) != TensorType((2,), "uint8", r) != TensorType((2,), "uint8")
    assert t != (1, 4) and t.__eq__((1, 4)) is NotImplemented
    assert {t: 1}[TensorType((1, 4), "float32")] == 1


def test_types_refuse_bad_shapes_and_quant():
    with pytest.raises(GraphError, match="negative dimension"):
        TensorType((1, -3), "float32")
    with pytest.raises(GraphError, match="2\\*\\*40"):
        TensorType((1 << 21, 1 << 21), "float32")
    with pytest.raises(GraphError, match="not supported"):
        TensorType((1,), "complex64")
    with pytest.raises(GraphError, match="scale"):
        QuantParams(0.0, 0)
    with pytest.raises(GraphError, match="per-tensor"):
        QuantParams([0.1, 0.2], 0)
    q = QuantParams([0.1, 0.2], [0, 1], axis=0)
    assert q.per_axis and q == QuantParams([0.1, 0.2], [0, 1], axis=0)
    assert q != QuantParams([0.1, 0.2], [0, 2], axis=0)
    assert TensorType((2,), "uint8", QuantParams(0.5, 3)) != TensorType((2,), "uint8", QuantParams(0.5, 4))


def test_users_and_printer():
    g = small_graph()
    relu = g.nodes[0]
    assert [n.op for n in g.users(relu.output)] == ["add"]
    assert g.is_output(relu.output)
    text = str(g)
    assert "nn.relu(%x)" in text and "@bias=" in text and "sigmoid" in text
    assert text.startswith("graph main(%x: float32[2,3])")


def test_values_and_nodes_are_keys_by_identity() -> None:
    """Graph code keys dicts and sets by values and nodes: two values alike are two keys."""
    for cls in (Value, Node):
        assert cls.__hash__ is object.__hash__ and cls.__eq__ is object.__eq__, cls
    t = TensorType((2,), "float32")
    a, b = Value("x", t), Value("x", t)
    assert a != b and len({a, b}) == 2 and {a: 1, b: 2}[a] == 1


def test_fresh_names_avoid_the_name_sets_a_graph_shares() -> None:
    """A graph made from another avoids that one's names without copying them, and the names it
    gives stay its own."""
    g = small_graph()
    base = g.names_in_use()
    derived = Graph(g.inputs, g.outputs, g.nodes, name="view")
    derived.adopt_names(set(), *g.name_sets())
    given = [derived.fresh_name(n) for n in ("x", "bias", "relu", "new")]
    assert not set(given) & base and len(set(given)) == 4 and "new" in given
    assert g.names_in_use() == base  # nothing added to the graph it was made from
    assert set(given) <= derived.names_in_use() and base <= derived.names_in_use()
    assert g.fresh_name("new") == "new"  # (the derived graph's names are not the original's)


def test_lint_catches_broken_invariants():
    g = small_graph()
    relu, add, sig = g.nodes
    g.nodes = [add, relu, sig]
    with pytest.raises(GraphError, match="topological order"):
        g.lint()
    g = small_graph()
    g.nodes[1].outputs[0].name = "x"
    with pytest.raises(GraphError, match="duplicate value name 'x'"):
        g.lint()
    g = small_graph()
    g.nodes[2].name = g.nodes[0].name
    with pytest.raises(GraphError, match="duplicate node name"):
        g.lint()
    g = small_graph()
    g.outputs = [Value("ghost", TensorType((1,), "float32"), producer=g.nodes[0])]
    with pytest.raises(GraphError, match="not defined"):
        g.lint()


def test_toposort_sorts_and_detects_cycles():
    g = small_graph()
    shuffled = list(reversed(g.nodes))
    assert [n.op for n in toposort(shuffled)] == ["nn.relu", "add", "sigmoid"]
    # a -> b -> a
    x = Value("x", TensorType((1,), "float32"))
    a = Node("nn.relu", [x], {}, [x.type], name="a", output_names=["a"])
    b = Node("nn.relu", [a.outputs[0]], {}, [x.type], name="b", output_names=["b"])
    a.inputs = [b.outputs[0]]
    with pytest.raises(GraphError, match="cycle"):
        toposort([a, b])


def test_type_rules_are_enforced():
    x = Value("x", TensorType((2, 3), "float32"))
    g = Graph([x], [], [])
    with pytest.raises(TypeInferenceError, match="unknown attribute"):
        g.new_node("nn.relu", [x], {"alpha": 1.0})
    with pytest.raises(TypeInferenceError, match="takes 2 inputs"):
        g.new_node("add", [x])
    with pytest.raises(UnsupportedOpError, match=r"did you mean nn\.relu"):
        get_op("nn.rleu")
    g2 = small_graph()
    g2.nodes[2].outputs[0].type = TensorType((9,), "float32")
    with pytest.raises(GraphError, match="type rule gives"):
        g2.lint()


def test_remembered_type_rules_tell_values_of_other_types_apart():
    """A rule's result is remembered by op, input types and attributes: a bool is not the int it equals,
    a shape is not the tuple of floats it equals, and a refusal is not remembered (it names its node)."""
    from accel.ops.registry import infer_node_types

    x = TensorType((2, 3), "float32")
    assert infer_node_types("nn.softmax", [x], {"axis": 1})[1] == [x]
    with pytest.raises(TypeInferenceError, match="axis must be an integer"):
        infer_node_types("nn.softmax", [x], {"axis": True}, node="a")
    with pytest.raises(TypeInferenceError, match="'b'"):
        infer_node_types("nn.softmax", [x], {"axis": True}, node="b")
    assert infer_node_types("reshape", [x], {"newshape": (3, 2)})[1] == [TensorType((3, 2), "float32")]
    with pytest.raises(TypeInferenceError):
        infer_node_types("reshape", [x], {"newshape": (3.0, 2.0)})
    # the same op on other types is inferred for them
    y = TensorType((4, 5), "float32")
    assert infer_node_types("nn.softmax", [y], {"axis": 1})[1] == [y]


def test_json_npy_round_trip(tmp_path):
    g = small_graph()
    q = QuantParams([0.5, 0.25, 0.125], [1, 2, 3], axis=1)
    w = g.new_const(np.ones((2, 3), np.float32), "w", quant=None)
    mul = g.new_node("multiply", [g.nodes[2].output, w])
    g.nodes = [*g.nodes, mul]
    g.outputs = [mul.output, g.nodes[0].output]
    path = tmp_path / "g.zip"
    save_graph(g, path)
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    assert "graph.json" in names and all(n.endswith(".npy") for n in names if n != "graph.json")
    back = load_graph(path)
    assert str(back) == str(g)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    a, b = accel.execute(g, {"x": x}), accel.execute(back, {"x": x})
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    # quant params survive the trip
    doc, arrays = graph_to_json(g)
    doc["inputs"][0]["type"] = {
        "shape": [2, 3],
        "dtype": "int8",
        "quant": {"scale": q.scale.tolist(), "zero_point": q.zero_point.tolist(), "axis": 1},
    }
    with pytest.raises(SerializationError):  # relu on int8 is fine, but add with a float32 const is not
        graph_from_json(doc, arrays)


def test_corrupt_graph_files_are_serialization_errors(tmp_path):
    g = small_graph()
    doc, arrays = graph_to_json(g)
    bad = json.loads(json.dumps(doc))
    bad["nodes"][1]["inputs"] = ["nowhere", "bias"]
    with pytest.raises(SerializationError, match="undefined value 'nowhere'"):
        graph_from_json(bad, arrays)
    with pytest.raises(SerializationError, match="missing data"):
        graph_from_json(doc, {})
    bad = json.loads(json.dumps(doc))
    bad["version"] = 99
    with pytest.raises(SerializationError, match="version 99"):
        graph_from_json(bad, arrays)
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(SerializationError, match="not a readable"):
        load_graph(junk)


def test_executor_validates_inputs():
    g = small_graph()
    ex = ReferenceExecutor(g)
    good = np.zeros((2, 3), np.float32)
    with pytest.raises(InputError, match="missing input 'x'"):
        ex.run({})
    with pytest.raises(InputError, match="unknown input"):
        ex.run({"x": good, "y": good})
    with pytest.raises(InputError, match=r"must be float32\[2,3\], got float32\[3,2\]"):
        ex.run({"x": good.T.copy()})
    with pytest.raises(InputError, match="got float64"):
        ex.run({"x": good.astype(np.float64)})


def test_executor_frees_dead_values_and_keeps_outputs():
    g = small_graph()
    ex = ReferenceExecutor(g)
    freed = {s for step in ex._steps for s in step.free}
    add_slot = ex._steps[1].outs[0]
    relu_slot = ex._steps[0].outs[0]
    assert add_slot in freed and relu_slot not in freed
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    out = ex.run({"x": x})
    np.testing.assert_allclose(out[g.outputs[0].name], 1 / (1 + np.exp(-(np.maximum(x, 0) + np.arange(3)))), rtol=1e-6)


def test_executor_is_thread_safe():
    g = small_graph()
    ex = ReferenceExecutor(g)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(8)]
    want = [ex.run({"x": x}) for x in xs]
    errors: list[str] = []

    def worker(i: int) -> None:
        for _ in range(100):
            got = ex.run({"x": xs[i]})
            if any(not np.array_equal(got[k], want[i][k]) for k in got):
                errors.append(f"thread {i}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_call_of_nested_graph_runs_its_body():
    inner = small_graph()
    x = Value("outer_x", TensorType((2, 3), "float32"))
    g = Graph([x], [], [], name="outer")
    call = g.new_node("call", [x], {"compiler": "test"}, body=inner)
    g.nodes = [call]
    g.outputs = [call.outputs[0]]
    g.lint()
    v = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(
        accel.execute(g, {"outer_x": v})[g.outputs[0].name], accel.execute(inner, {"x": v})[inner.outputs[0].name]
    )
    assert "call(%outer_x) {compiler='test'}" in str(g)
