"""Bad input gets a typed accel error with one clear line, never a traceback
from deep inside: broken files, unknown ops, broken graphs, wrong run-time
inputs, absurd shapes, and external-data references that try to leave the
model's folder (the cases of CVE-2022-25882 and CVE-2024-27318)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_builders import model_of
from onnx import TensorProto, helper

import accel
from accel.errors import AccelError, ExternalDataError, GraphError, InputError, ModelError, UnsupportedOpError
from accel.frontend import external_data
from accel.frontend.onnx import import_model

F = TensorProto.FLOAT


def good_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    w = np.ones((2, 3, 3, 3), np.float32)
    return model_of(nodes, {"x": ([1, 3, 8, 8], F)}, ["y"], {"w": w})


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert msg and "\n" not in msg, f"not a one-line message: {msg!r}"
    assert isinstance(exc.value, AccelError)
    return msg


# -- files that are not ONNX models ---------------------------------------------------


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(p)
    assert "empty" in one_line(exc)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(tmp_path / "nope.onnx")
    assert "does not exist" in one_line(exc)
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(tmp_path)
    assert "folder" in one_line(exc)


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5, 0.7, 0.9, 0.99])
def test_truncated_file(tmp_path: Path, fraction: float) -> None:
    data = good_model().SerializeToString()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(p)
    one_line(exc)


def test_every_truncation_is_a_typed_error() -> None:
    data = good_model().SerializeToString()
    for cut in range(0, len(data), 7):
        with pytest.raises(AccelError):
            import_model(data[:cut])


@pytest.mark.parametrize("seed", range(5))
def test_garbage_bytes(seed: int) -> None:
    garbage = np.random.default_rng(seed).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    with pytest.raises(ModelError) as exc:
        import_model(garbage)
    one_line(exc)


def test_text_file(tmp_path: Path) -> None:
    p = tmp_path / "model.onnx"
    p.write_text("this is not a model\n" * 20)
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(p)
    one_line(exc)


def test_model_without_graph() -> None:
    m = onnx.ModelProto(ir_version=8)
    m.opset_import.add().version = 17
    with pytest.raises(ModelError) as exc:
        import_model(m.SerializeToString())
    assert "no graph" in one_line(exc)


def test_wrong_python_type() -> None:
    with pytest.raises(ModelError) as exc:
        import_model(12345)  # type: ignore[arg-type]
    one_line(exc)


@pytest.mark.parametrize("opset,error,text", [(1, ModelError, "opset 1"), (99, UnsupportedOpError, "opset 99")])
def test_opset_out_of_range(opset: int, error: type, text: str) -> None:
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], {"x": ([2], F)}, ["y"], opset=opset)
    with pytest.raises(error) as exc:
        import_model(m)
    assert text in one_line(exc)


# -- ops and graphs ----------------------------------------------------------------------


def test_unknown_op_names_op_domain_opset_and_node() -> None:
    m = model_of(
        [helper.make_node("Relu", ["x"], ["a"], name="n1"), helper.make_node("Foo", ["a"], ["y"], name="n3")],
        {"x": ([2], F)},
        ["y"],
    )
    with pytest.raises(UnsupportedOpError) as exc:
        import_model(m)
    msg = one_line(exc)
    assert msg.startswith("unsupported op 'Foo' (domain 'ai.onnx', opset 17) at node 'n3'; ")
    assert "accel ops" in msg and len(msg) < 200


def test_custom_domain_op() -> None:
    m = model_of(
        [helper.make_node("FusedConv", ["x"], ["y"], domain="com.microsoft", name="fc")], {"x": ([2], F)}, ["y"]
    )
    m.opset_import.add(domain="com.microsoft", version=1)
    with pytest.raises(UnsupportedOpError) as exc:
        import_model(m)
    assert "'FusedConv' (domain 'com.microsoft', opset 1) at node 'fc'" in one_line(exc)


def test_cycle() -> None:
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
    ]
    m = model_of(nodes, {"x": ([2], F)}, ["b"])
    with pytest.raises(GraphError) as exc:
        import_model(m)
    assert "cycle" in one_line(exc)


def test_self_loop() -> None:
    m = model_of([helper.make_node("Add", ["x", "y"], ["y"], name="loop")], {"x": ([2], F)}, ["y"])
    with pytest.raises(GraphError) as exc:
        import_model(m)
    assert "cycle" in one_line(exc)


def test_duplicate_output_names() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")]
    with pytest.raises(GraphError) as exc:
        import_model(model_of(nodes, {"x": ([2], F)}, ["y"]))
    assert "'y' is produced twice" in one_line(exc)


def test_duplicate_inputs_and_initializers() -> None:
    m = model_of([helper.make_node("Add", ["x", "x"], ["y"])], {"x": ([2], F)}, ["y"])
    m.graph.input.append(m.graph.input[0])
    with pytest.raises(GraphError) as exc:
        import_model(m)
    assert "appears twice" in one_line(exc)
    m = model_of([helper.make_node("Add", ["x", "w"], ["y"])], {"x": ([2], F)}, ["y"], {"w": np.ones(2, np.float32)})
    m.graph.initializer.append(m.graph.initializer[0])
    with pytest.raises(GraphError) as exc:
        import_model(m)
    one_line(exc)


def test_node_overwriting_an_input() -> None:
    m = model_of([helper.make_node("Relu", ["x"], ["x"])], {"x": ([2], F)}, ["x"])
    with pytest.raises(GraphError) as exc:
        import_model(m)
    one_line(exc)


def test_undefined_tensor() -> None:
    m = model_of([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], {"x": ([2], F)}, ["y"])
    with pytest.raises(ModelError) as exc:
        import_model(m)
    assert "'ghost'" in one_line(exc)


def test_undefined_graph_output() -> None:
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], {"x": ([2], F)}, ["y", "nothing"])
    with pytest.raises(ModelError) as exc:
        import_model(m)
    assert "'nothing'" in one_line(exc)


def test_type_mismatch_inside_the_graph() -> None:
    m = model_of(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": ([2, 3], F)}, ["y"], {"w": np.ones((4, 5), np.float32)}
    )
    with pytest.raises(AccelError) as exc:
        import_model(m)
    one_line(exc)


# -- shapes ----------------------------------------------------------------------------


def test_negative_input_dim() -> None:
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], {"x": ([1, -3], F)}, ["y"])
    with pytest.raises(ModelError) as exc:
        import_model(m)
    assert "negative" in one_line(exc)


@pytest.mark.parametrize("shape", [[1 << 41], [1 << 21, 1 << 21], [1, 2**62, 2**62]])
def test_overflowing_input_dims(shape: list[int]) -> None:
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], {"x": (shape, F)}, ["y"])
    with pytest.raises(AccelError) as exc:
        import_model(m)
    assert "2**40" in one_line(exc)


def test_negative_and_huge_input_shapes_override() -> None:
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], {"x": (["N", "C"], F)}, ["y"])
    with pytest.raises(ModelError) as exc:
        import_model(m, input_shapes={"x": (1, -2)})
    one_line(exc)
    with pytest.raises(AccelError) as exc:
        import_model(m, input_shapes={"x": (1 << 30, 1 << 30)})
    one_line(exc)


def test_initializer_with_bad_dims() -> None:
    m = model_of([helper.make_node("Add", ["x", "w"], ["y"])], {"x": ([2], F)}, ["y"], {"w": np.ones(2, np.float32)})
    m.graph.initializer[0].dims[:] = [-2]
    with pytest.raises(ModelError) as exc:
        import_model(m)
    one_line(exc)
    m.graph.initializer[0].dims[:] = [1 << 20, 1 << 20]  # claims 4 TiB, holds 8 bytes
    with pytest.raises(ModelError) as exc:
        import_model(m)
    one_line(exc)


def test_unknown_rank_input() -> None:
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], {"x": (None, F)}, ["y"])
    with pytest.raises(ModelError) as exc:
        import_model(m)
    assert "input_shapes" in one_line(exc)


# -- run-time inputs ---------------------------------------------------------------------


def test_wrong_runtime_inputs() -> None:
    graph = accel.import_onnx(good_model(), optimize=False)
    ok = np.zeros((1, 3, 8, 8), np.float32)
    accel.execute(graph, {"x": ok})
    for bad in (
        {"x": np.zeros((1, 3, 8, 9), np.float32)},
        {"x": np.zeros((1, 3, 8, 8), np.float64)},
        {"x": np.zeros((3, 8, 8), np.float32)},
        {},
        {"x": ok, "extra": ok},
        {"x": "not an array"},
    ):
        with pytest.raises(InputError) as exc:
            accel.execute(graph, bad)  # type: ignore[arg-type]
        one_line(exc)


# -- external data: path traversal and friends --------------------------------------------


def ext_model(
    location: str,
    nbytes: int = 16,
    offset: int | None = None,
    length: int | None = None,
    extra_tensor: str | None = None,
) -> onnx.ModelProto:
    """x + w, with w (float32[nbytes/4]) stored at ``location``."""
    n = nbytes // 4

    def ext(name: str, loc: str) -> TensorProto:
        t = TensorProto(name=name, data_type=F, dims=[n])
        t.data_location = TensorProto.EXTERNAL
        entries = [("location", loc)]
        if offset is not None:
            entries.append(("offset", str(offset)))
        if length is not None:
            entries.append(("length", str(length)))
        for k, v in entries:
            e = t.external_data.add()
            e.key, e.value = k, v
        return t

    inits = [ext("w", location)]
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    if extra_tensor is not None:
        inits.insert(0, ext("v", extra_tensor))
        nodes.append(helper.make_node("Add", ["y", "v"], ["z"]))
    graph = helper.make_graph(
        nodes,
        "ext",
        [helper.make_tensor_value_info("x", F, [n])],
        [helper.make_tensor_value_info(nodes[-1].output[0], F, [n])],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """model/ (the model's folder, with good.bin and sub/) next to secret.bin outside it.

    Any read of external data is recorded, so tests can check nothing was read.
    """
    model_dir = tmp_path / "model"
    (model_dir / "sub").mkdir(parents=True)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (model_dir / "good.bin").write_bytes(np.ones(4, np.float32).tobytes())
    (model_dir / "sub" / "good.bin").write_bytes(np.ones(4, np.float32).tobytes())
    reads: list[str] = []
    real_read = external_data._read

    def spy(ref):  # type: ignore[no-untyped-def]
        reads.append(str(ref.path))
        return real_read(ref)

    monkeypatch.setattr(external_data, "_read", spy)
    return {"dir": model_dir, "secret": secret, "reads": reads}  # type: ignore[dict-item]


def import_from(folder: Path, model: onnx.ModelProto):  # type: ignore[no-untyped-def]
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return accel.import_onnx(path, optimize=False)


def test_external_data_good_reference_loads(layout: dict) -> None:
    for loc in ("good.bin", "sub/good.bin", "./sub/./good.bin"):
        graph = import_from(layout["dir"], ext_model(loc))
        out = accel.execute(graph, {"x": np.zeros(4, np.float32)})["y"]
        np.testing.assert_array_equal(out, np.ones(4, np.float32))
    assert len(layout["reads"]) == 3


@pytest.mark.parametrize(
    "location,text",
    [
        ("../secret.bin", "'..'"),  # CVE-2022-25882
        ("sub/../../secret.bin", "'..'"),  # CVE-2024-27318: a '..' that is not leading
        ("sub/..", "'..'"),
        ("..\\secret.bin", "'..'"),  # Windows separators
        ("sub\\..\\..\\secret.bin", "'..'"),
        ("/etc/passwd", "absolute"),
        ("\\\\server\\share\\x.bin", "absolute"),
        ("C:/Windows/x.bin", "absolute"),
        ("", "no location"),
        ("good.bin\x00.txt", "NUL"),
        ("missing.bin", "does not exist"),
        ("sub", "not a regular file"),
        ("good.bin/x", "not a folder"),
    ],
)
def test_external_data_bad_locations(layout: dict, location: str, text: str) -> None:
    with pytest.raises(ExternalDataError) as exc:
        import_from(layout["dir"], ext_model(location))
    assert text in one_line(exc)
    assert layout["reads"] == []


def test_external_data_absolute_path_to_real_file(layout: dict) -> None:
    with pytest.raises(ExternalDataError) as exc:
        import_from(layout["dir"], ext_model(str(layout["secret"])))
    assert "absolute" in one_line(exc)
    assert layout["reads"] == []


def test_external_data_symlinked_file(layout: dict) -> None:
    os.symlink(layout["secret"], layout["dir"] / "link.bin")
    with pytest.raises(ExternalDataError) as exc:
        import_from(layout["dir"], ext_model("link.bin"))
    assert "symbolic link" in one_line(exc)
    # a symlink pointing inside the folder is refused too
    os.symlink(layout["dir"] / "good.bin", layout["dir"] / "inner.bin")
    with pytest.raises(ExternalDataError):
        import_from(layout["dir"], ext_model("inner.bin"))
    assert layout["reads"] == []


def test_external_data_symlinked_parent_folder(layout: dict) -> None:
    outside = layout["secret"].parent / "outside"
    outside.mkdir()
    (outside / "w.bin").write_bytes(np.zeros(4, np.float32).tobytes())
    os.symlink(outside, layout["dir"] / "linked")
    with pytest.raises(ExternalDataError) as exc:
        import_from(layout["dir"], ext_model("linked/w.bin"))
    assert "symbolic link" in one_line(exc)
    assert layout["reads"] == []


def test_external_data_hard_link(layout: dict) -> None:
    os.link(layout["secret"], layout["dir"] / "hard.bin")
    with pytest.raises(ExternalDataError) as exc:
        import_from(layout["dir"], ext_model("hard.bin"))
    assert "hard link" in one_line(exc)
    assert layout["reads"] == []


@pytest.mark.parametrize(
    "offset,length,text",
    [
        (20, None, "beyond the end"),
        (8, 16, "beyond the end"),
        (0, 17, "beyond the end"),
        (-4, None, "negative"),
        (None, -1, "negative"),
    ],
)
def test_external_data_range_outside_file(layout: dict, offset: int | None, length: int | None, text: str) -> None:
    with pytest.raises(ExternalDataError) as exc:
        import_from(layout["dir"], ext_model("good.bin", offset=offset, length=length))
    assert text in one_line(exc)
    assert layout["reads"] == []


def test_external_data_bad_offset_text(layout: dict) -> None:
    m = ext_model("good.bin")
    e = m.graph.initializer[0].external_data.add()
    e.key, e.value = "offset", "12abc"
    with pytest.raises(ExternalDataError) as exc:
        import_from(layout["dir"], m)
    one_line(exc)


def test_external_data_length_not_matching_the_tensor(layout: dict) -> None:
    with pytest.raises(ModelError) as exc:
        import_from(layout["dir"], ext_model("good.bin", nbytes=16, length=8))
    one_line(exc)


def test_nothing_is_read_when_any_reference_is_bad(layout: dict) -> None:
    # the first tensor is fine, the second escapes: neither is read
    with pytest.raises(ExternalDataError):
        import_from(layout["dir"], ext_model("sub/../../secret.bin", extra_tensor="good.bin"))
    assert layout["reads"] == []


def test_external_data_needs_base_dir_for_bytes_and_protos(layout: dict) -> None:
    m = ext_model("good.bin")
    for model in (m, m.SerializeToString()):
        with pytest.raises(ExternalDataError) as exc:
            import_model(model)
        assert "base_dir" in one_line(exc)
    graph = import_model(m, base_dir=layout["dir"])
    assert graph.nodes[0].inputs[1].is_constant
    with pytest.raises(ExternalDataError):
        import_model(ext_model("../secret.bin"), base_dir=layout["dir"])
