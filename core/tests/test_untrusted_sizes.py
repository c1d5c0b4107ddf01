"""Sizes and nesting that come from files are checked before memory is taken or a recursion starts:
import-time folding stays within its budget, external data is compared with its tensor before a
byte is read, deeply nested models, graph documents and target files are typed errors."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import accel
import accel.frontend.onnx as frontend
from accel.builder import GraphBuilder
from accel.errors import AccelError, ExternalDataError, ModelError, SerializationError, TargetError
from accel.frontend import external_data
from accel.limits import MAX_FOLD_BYTES, MAX_JSON_DEPTH, MAX_SUBGRAPH_DEPTH, json_depth, load_json
from accel.passes.fold_constants import fold_constants
from accel.serialize import graph_from_json, graph_to_json, load_graph, save_graph
from accel.target import CompositeTarget

F = TensorProto.FLOAT


def _model(nodes, inits, out="y", x_shape=(1,)):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", F, list(x_shape))],
        [helper.make_tensor_value_info(out, F, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _constant_of_shape(dims: list[int], fill: float = 2.5) -> onnx.ModelProto:
    value = numpy_helper.from_array(np.array([fill], np.float32))
    nodes = [
        helper.make_node("ConstantOfShape", ["s"], ["c"], value=value),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    return _model(nodes, {"s": np.array(dims, np.int64)})


def _largest_constant(graph: accel.Graph) -> int:
    return max((v.type.nbytes for v in graph.constants()), default=0)


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert isinstance(exc.value, AccelError) and msg and "\n" not in msg, msg
    return msg


# -- import-time folding -------------------------------------------------------------------


def test_small_constant_of_shape_is_folded() -> None:
    g = accel.import_onnx(_constant_of_shape([2, 3]), optimize=False)
    assert [n.op for n in g.nodes] == ["add"]
    np.testing.assert_array_equal(accel.execute(g, {"x": np.ones(1, np.float32)})["y"], np.full((2, 3), 3.5))


def test_constant_of_shape_over_budget_stays_an_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frontend, "MAX_FOLD_BYTES", 1024)
    g = accel.import_onnx(_constant_of_shape([7, 300]), optimize=False)
    assert _largest_constant(g) <= 1024
    y = accel.execute(g, {"x": np.full(1, 0.5, np.float32)})["y"]
    np.testing.assert_array_equal(y, np.full((7, 300), 3.0, np.float32))


def test_64_gib_constant_of_shape_takes_no_memory_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """The case that ended in MemoryError: 2**34 float32 (64 GiB) asked for by a 1-element initializer."""
    monkeypatch.setattr(frontend, "MAX_FOLD_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        g = accel.import_onnx(_constant_of_shape([(1 << 34) - 1]), optimize=False)
        peak = tracemalloc.get_traced_memory()[1]
        assert _largest_constant(g) <= 1 << 20
        assert peak < 8 << 20, f"import took {peak} bytes"
        # nor does the folding pass materialize it: its own budget holds as well
        tracemalloc.reset_peak()
        folded = fold_constants(g, max_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert folded.outputs[0].type.shape == ((1 << 34) - 1,)
    assert _largest_constant(folded) <= 1 << 20
    assert peak < 8 << 20, f"folding took {peak} bytes"


def test_default_budget_is_what_the_docs_say() -> None:
    assert frontend.MAX_FOLD_BYTES == MAX_FOLD_BYTES == 64 << 20


def test_fold_only_op_over_budget_is_refused_before_computing() -> None:
    # Range of 2**34 int64 elements: Range has no run-time op, so it is refused
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=F)]
    inits = {"a": np.array(0, np.int64), "b": np.array(1 << 34, np.int64), "d": np.array(1, np.int64)}
    tracemalloc.start()
    try:
        with pytest.raises(ModelError) as exc:
            accel.import_onnx(_model(nodes, inits), optimize=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "limit for values computed at import" in one_line(exc)
    assert peak < 4 * MAX_FOLD_BYTES // 8, f"refusing took {peak} bytes"


@pytest.mark.parametrize(
    "nodes,inits,op",
    [
        # Where broadcasting [2**17, 1] against [1, 2**17]: 2**34 elements from two small operands
        (
            [
                helper.make_node("Where", ["c", "p", "q"], ["w"]),
                helper.make_node("Add", ["x", "w"], ["y"]),
            ],
            {
                "c": np.ones((1 << 17, 1), bool),
                "p": np.ones((1, 1 << 17), np.float32),
                "q": np.zeros((1, 1), np.float32),
            },
            "where",
        ),
        # Equal of two broadcast operands
        (
            [helper.make_node("Equal", ["p", "q"], ["e"]), helper.make_node("Cast", ["e"], ["y"], to=F)],
            {"p": np.ones((1 << 16, 1), np.int64), "q": np.ones((1, 1 << 16), np.int64)},
            "equal",
        ),
    ],
    ids=["Where", "Equal"],
)
def test_elementwise_fold_over_budget_stays_an_op(nodes, inits, op) -> None:  # type: ignore[no-untyped-def]
    """Where and comparisons are IR ops: on constants whose result exceeds the budget they stay ops."""
    tracemalloc.start()
    try:
        g = accel.import_onnx(_model(nodes, inits), optimize=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert op in [n.op for n in g.nodes]
    assert _largest_constant(g) <= MAX_FOLD_BYTES
    assert peak < 4 * MAX_FOLD_BYTES // 8, f"importing took {peak} bytes"


def test_expand_of_a_constant_over_budget_stays_an_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frontend, "MAX_FOLD_BYTES", 4096)
    nodes = [helper.make_node("Expand", ["c", "s"], ["e"]), helper.make_node("Add", ["x", "e"], ["y"])]
    inits = {"c": np.arange(4, dtype=np.float32).reshape(4, 1), "s": np.array([4, 2000], np.int64)}
    g = accel.import_onnx(_model(nodes, inits), optimize=False)
    assert _largest_constant(g) <= 4096
    y = accel.execute(g, {"x": np.zeros(1, np.float32)})["y"]
    np.testing.assert_array_equal(y, np.broadcast_to(inits["c"], (4, 2000)))


# -- external data -------------------------------------------------------------------------


def _external_model(folder: Path, n: int, *, length: int | None = None) -> Path:
    t = TensorProto(name="w", data_type=F, dims=[n])
    t.data_location = TensorProto.EXTERNAL
    for k, v in [("location", "w.bin")] + ([("length", str(length))] if length is not None else []):
        e = t.external_data.add()
        e.key, e.value = k, v
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "ext",
        [helper.make_tensor_value_info("x", F, [n])],
        [helper.make_tensor_value_info("y", F, [n])],
        initializer=[t],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = folder / "m.onnx"
    path.write_bytes(m.SerializeToString())
    return path


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes requested from external-data files, recorded by wrapping the reader."""
    seen: list[int] = []
    real = external_data._read

    def spy(ref):  # type: ignore[no-untyped-def]
        seen.append(ref.length)
        return real(ref)

    monkeypatch.setattr(external_data, "_read", spy)
    return seen


@pytest.mark.parametrize("length", [None, 3 << 30])
def test_small_tensor_pointing_at_a_3_gb_file_reads_nothing(tmp_path: Path, reads: list[int], length) -> None:  # type: ignore[no-untyped-def]
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(3 << 30)  # sparse: no disk space taken
    path = _external_model(tmp_path, 4, length=length)
    with pytest.raises(ExternalDataError) as exc:
        accel.import_onnx(path)
    assert "need 16 bytes" in one_line(exc) and str(3 << 30) in str(exc.value)
    assert reads == []


def test_external_data_of_exactly_the_right_length_loads(tmp_path: Path, reads: list[int]) -> None:
    (tmp_path / "w.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    g = accel.import_onnx(_external_model(tmp_path, 6))
    np.testing.assert_array_equal(accel.execute(g, {"x": np.zeros(6, np.float32)})["y"], np.arange(6))
    assert reads == [24]


def test_external_data_shorter_than_the_tensor(tmp_path: Path, reads: list[int]) -> None:
    (tmp_path / "w.bin").write_bytes(np.arange(3, dtype=np.float32).tobytes())
    with pytest.raises(ExternalDataError, match="need 24 bytes"):
        accel.import_onnx(_external_model(tmp_path, 6))
    assert reads == []


def test_expected_nbytes_per_type() -> None:
    def t(dt: int, dims: list[int]) -> TensorProto:
        return TensorProto(name="t", data_type=dt, dims=dims)

    assert external_data.expected_nbytes(t(F, [3, 5])) == 60
    assert external_data.expected_nbytes(t(TensorProto.INT64, [2])) == 16
    assert external_data.expected_nbytes(t(TensorProto.BOOL, [7])) == 7
    assert external_data.expected_nbytes(t(TensorProto.FLOAT16, [])) == 2
    assert external_data.expected_nbytes(t(TensorProto.INT4, [5])) == 3
    with pytest.raises(ExternalDataError, match="string"):
        external_data.expected_nbytes(t(TensorProto.STRING, [1]))


class _Swap:
    """Replaces the data file between the reference check and the read (the race the recheck closes)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, action) -> None:  # type: ignore[no-untyped-def]
        real = external_data.check_tensor

        def check_then_swap(tensor, base_dir):  # type: ignore[no-untyped-def]
            ref = real(tensor, base_dir)
            action(ref.path)
            return ref

        monkeypatch.setattr(external_data, "check_tensor", check_then_swap)


def _replace_with_other_file(path: Path) -> None:
    other = path.with_name("other.bin")
    other.write_bytes(np.full(4, 7, np.float32).tobytes())
    os.replace(other, path)  # a new inode under the checked name


def _replace_with_symlink(path: Path) -> None:
    secret = path.parent.parent / "secret.bin"
    secret.write_bytes(np.full(4, 9, np.float32).tobytes())
    path.unlink()
    os.symlink(secret, path)


def _truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(8)


def _hard_link(path: Path) -> None:
    os.link(path, path.with_name("second-name.bin"))


def _replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)  # opening it for reading would block until a writer comes


@pytest.mark.parametrize(
    "action,text",
    [
        (_replace_with_other_file, "changed while it was being loaded"),
        (_replace_with_symlink, "cannot open"),
        (_truncate, "shrank while it was being loaded"),
        (_hard_link, "changed while it was being loaded"),
        (_replace_with_fifo, "changed while it was being loaded"),
    ],
    ids=["replaced", "symlinked", "truncated", "hard-linked", "fifo"],
)
def test_file_changed_between_check_and_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, action, text) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    path = _external_model(folder, 4)
    _Swap(monkeypatch, action)
    with pytest.raises(ExternalDataError) as exc:
        accel.import_onnx(path)
    assert text in one_line(exc)


# -- nesting -------------------------------------------------------------------------------


def _nested_if(depth: int) -> onnx.ModelProto:
    """If nodes nested ``depth`` deep, built in place (helper.make_node would copy, and fail, at depth)."""
    m = helper.make_model(
        helper.make_graph(
            [],
            "main",
            [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("y", F, [1])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    m.ir_version = 8
    g = m.graph
    for i in range(depth):
        node = g.node.add()
        node.op_type, node.name = "If", f"if{i}"
        node.input.append("c")
        node.output.append("y")
        attr = node.attribute.add()
        attr.name, attr.type = "then_branch", AttributeProto.GRAPH
        g = attr.g
        g.name = f"g{i}"
        g.output.add().CopyFrom(helper.make_tensor_value_info("y", F, [1]))
    return m


@pytest.mark.parametrize("depth", [MAX_SUBGRAPH_DEPTH + 1, 1000])
def test_deeply_nested_model_proto_is_a_model_error(depth: int) -> None:
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(_nested_if(depth))
    assert f"more than {MAX_SUBGRAPH_DEPTH} levels" in one_line(exc)


def test_nesting_within_the_limit_reaches_the_op_check() -> None:
    with pytest.raises(AccelError) as exc:
        accel.import_onnx(_nested_if(MAX_SUBGRAPH_DEPTH))
    assert "levels" not in one_line(exc)


def test_deeply_nested_model_file_is_a_model_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.onnx"
    path.write_bytes(_nested_if(90).SerializeToString())
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(path)
    one_line(exc)


def test_external_tensors_are_found_at_any_depth_without_recursion() -> None:
    m = _nested_if(3000)
    assert external_data.subgraph_depth(m.graph) == 3000
    assert external_data.external_tensors(m) == []


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_deeply_nested_target_file(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "target.json"
    path.write_text('{"devices": [{"kind": "x", "options": {"a": ' + "[" * depth + "]" * depth + "}}]}")
    with pytest.raises(TargetError) as exc:
        CompositeTarget.from_file(path)
    assert "nested" in one_line(exc)


def test_target_file_that_is_not_utf8_or_a_folder(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(TargetError, match="UTF-8"):
        CompositeTarget.from_file(tmp_path / "t.json")
    with pytest.raises(TargetError, match="folder"):
        CompositeTarget.from_file(tmp_path)


def _small_graph() -> accel.Graph:
    b = GraphBuilder(x=(1, 4))
    return b.done(b.op("nn.relu", b.op("add", b.x["x"], b.const(np.ones((1, 4), np.float32)))))


def test_graph_document_with_bodies_nested_too_deep() -> None:
    doc, arrays = graph_to_json(_small_graph())
    leaf = json.dumps({k: v for k, v in doc.items() if k != "format"})
    inner = doc
    for _ in range(MAX_SUBGRAPH_DEPTH + 1):
        inner["nodes"][0]["body"] = json.loads(leaf)
        inner = inner["nodes"][0]["body"]
    with pytest.raises(SerializationError, match="nests subgraphs"):
        graph_from_json(doc, arrays)


def test_saved_graph_with_a_deep_json_member(tmp_path: Path) -> None:
    import zipfile

    good, bad = tmp_path / "good.zip", tmp_path / "bad.zip"
    save_graph(_small_graph(), good)
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, "[" * 100_000 + "]" * 100_000 if name == "graph.json" else src.read(name))
    path = bad
    with pytest.raises(SerializationError) as exc:
        load_graph(path)
    one_line(exc)


def test_json_helpers() -> None:
    assert json_depth(1) == 0 and json_depth([]) == 1 and json_depth({"a": [{"b": []}]}) == 4
    with pytest.raises(TargetError, match="nested more than 3"):
        load_json("[[[[1]]]]", "doc", TargetError, max_depth=3)
    with pytest.raises(TargetError, match="not valid JSON"):
        load_json("{", "doc", TargetError)
    assert load_json(b'{"a": [1]}', "doc", TargetError) == {"a": [1]}


def test_json_depth_counts_every_branch() -> None:
    """The level-by-level walk: the deepest branch counts wherever it is (first, last, in a dict)."""
    assert json_depth({"a": 1, "b": [1, [2, [3]]], "c": {}}) == 4
    assert json_depth([[[[]]], 1, {}]) == 4 and json_depth([{}, [[[[]]]]]) == 5
    assert json_depth({"x": {"y": {"z": [1]}}, "w": []}) == 4
    deep: list = []
    inner = deep
    for _ in range(50_000):  # no recursion
        inner.append([])
        inner = inner[0]
    assert json_depth(deep) == 50_001


@pytest.mark.parametrize("depth", [3, 4, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1])
def test_graph_document_attributes_deeper_than_the_limit(depth: int) -> None:
    """Attributes that nest up to three deep (a composite's labels) are read without a walk;
    deeper ones are measured, and over the limit refused (one line)."""
    doc, arrays = graph_to_json(_small_graph())
    value: object = "leaf"
    for _ in range(depth - 1):  # the attribute mapping is one level, the lists the rest
        value = [value]
    doc["nodes"][0]["attrs"] = {"extra": value}
    if depth > MAX_JSON_DEPTH:
        with pytest.raises(SerializationError, match="attributes nested more than") as exc:
            graph_from_json(doc, arrays)
        one_line(exc)
    else:  # within the limit: read on to the op's own check of its attributes
        with pytest.raises(SerializationError, match="extra"):
            graph_from_json(doc, arrays)


def test_graph_document_types_are_shared_and_still_checked() -> None:
    """Equal unquantized types of a document are one object; a bad one is still refused."""
    doc, arrays = graph_to_json(_small_graph())
    g = graph_from_json(doc, arrays)
    relu, add = g.nodes[1], g.nodes[0]
    assert relu.output.type is add.output.type and g.inputs[0].type is add.output.type
    # (a document's values of one type share that type's list: each edit sets a new one)
    out = doc["nodes"][0]["outputs"][0]
    out["type"] = [[1, -4], "float32"]
    with pytest.raises(SerializationError, match="negative dimension"):
        graph_from_json(doc, arrays)
    for bad in ([[1, [4]], "float32"], [[1, 4]], [[1, 4], "float32", None], "float32[1,4]", [4, "float32"]):
        out["type"] = bad
        with pytest.raises(SerializationError, match="invalid") as exc:
            graph_from_json(doc, arrays)
        one_line(exc)
    # a version 1 document (types as mappings, every key present) reads as well
    out["type"] = {"shape": [1, 4], "dtype": "float32", "quant": None}
    assert str(graph_from_json({**doc, "version": 1}, arrays)) == str(g)


def test_sparse_initializer_expanding_past_the_budget_is_refused() -> None:
    values = numpy_helper.from_array(np.ones(1, np.float32), "w")
    indices = numpy_helper.from_array(np.zeros(1, np.int64), "w_idx")
    sparse = helper.make_sparse_tensor(values, indices, [1 << 34])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "m",
        [helper.make_tensor_value_info("x", F, [1 << 34])],
        [helper.make_tensor_value_info("y", F, None)],
    )
    graph.sparse_initializer.append(sparse)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(m)
    assert "dense tensor" in one_line(exc)


def test_random_inputs_have_a_budget() -> None:
    from accel.cli import random_inputs
    from accel.errors import InputError

    b = GraphBuilder(x=(1 << 20, 1 << 10))  # 4 GiB of float32
    g = b.done(b.op("nn.relu", b.x["x"]))
    with pytest.raises(InputError, match="--input"):
        random_inputs(g)


@pytest.mark.parametrize(
    "op,kwargs",
    [("EyeLike", {}), ("Trilu", {}), ("Dropout", {})],
)
def test_constants_sized_by_a_declared_input_shape_are_bounded(op: str, kwargs: dict) -> None:
    """A huge declared input shape must not make import build a huge constant (eye, band mask, mask)."""
    outputs = ["y", "mask"] if op == "Dropout" else ["y"]
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], outputs, **kwargs)],
        "m",
        [helper.make_tensor_value_info("x", F, [1 << 19, 1 << 19])],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    tracemalloc.start()
    try:
        with pytest.raises(ModelError) as exc:
            accel.import_onnx(m, optimize=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "limit for values computed at import" in one_line(exc)
    assert peak < MAX_FOLD_BYTES // 4


def test_tile_of_a_constant_over_budget_stays_an_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frontend, "MAX_FOLD_BYTES", 4096)
    nodes = [helper.make_node("Tile", ["c", "r"], ["t"]), helper.make_node("Add", ["x", "t"], ["y"])]
    inits = {"c": np.arange(6, dtype=np.float32).reshape(2, 3), "r": np.array([3, 400], np.int64)}
    g = accel.import_onnx(_model(nodes, inits), optimize=False)
    assert _largest_constant(g) <= 4096
    y = accel.execute(g, {"x": np.zeros(1, np.float32)})["y"]
    np.testing.assert_array_equal(y, np.tile(inits["c"], (3, 400)))
