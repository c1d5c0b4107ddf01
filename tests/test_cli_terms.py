"""Errors of the ``accel`` command speak in its own terms: the options a user typed (``-s/--input-shape``,
``--backends``), never the Python API's keyword arguments or pydantic's wording; an unsupported op is
matched only with similarly spelled ones."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_helpers import run_accel

from accel.frontend.onnx import SUPPORTED_OPS, _unsupported_op_message
from accel.models import default_model_path


def accel_cli(*args: str) -> subprocess.CompletedProcess:
    return run_accel(*args, columns=200)


def error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    "command, shape, fragments",
    [
        ("run", "image=2,1,8,8", ["-s/--input-shape image=2,1,8,8", "float32[1,1,8,8]", "fixed at 1 on axis 0"]),
        ("compile", "image=1,8,8", ["-s/--input-shape image=1,8,8", "rank 4", "give 4 dimensions"]),
        ("inspect", "img=1,1,8,8", ["-s/--input-shape img=1,1,8,8", "no input 'img'", "its inputs: image"]),
    ],
)
def test_input_shape_errors_name_the_option(command: str, shape: str, fragments: list[str], tmp_path: Path) -> None:
    model = str(default_model_path(quantized=False))
    extra = ["-o", str(tmp_path / "m.accel")] if command == "compile" else []
    line = error_line(accel_cli(command, model, "-s", shape, *extra))
    for fragment in fragments:
        assert fragment in line
    assert "input_shapes" not in line
    assert not (tmp_path / "m.accel").exists()


def test_fixed_dimension_note_names_the_option(tmp_path: Path) -> None:
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "relu.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    proc = accel_cli("run", str(path))
    assert proc.returncode == 0, proc.stderr
    note = "note: input 'x': symbolic dimension(s) 'batch' (axis 0) = 1 by default; choose with -s/--input-shape x=1,3"
    assert note in proc.stderr.splitlines()
    assert "input_shapes" not in proc.stderr


def test_a_backend_named_twice_is_one_line() -> None:
    assert error_line(accel_cli("compile", "--backends", "acl,acl")) == (
        "error: backend 'acl' is listed twice in --backends"
    )


def test_a_backend_listed_twice_in_a_target_file(tmp_path: Path) -> None:
    target = tmp_path / "t.json"
    target.write_text('{"devices": [{"kind": "acl"}, {"kind": "testbackend"}, {"kind": "acl"}]}')
    line = error_line(accel_cli("compile", "--target", str(target)))
    assert line == f"error: {target}: backend 'acl' is listed twice in devices"


@pytest.mark.parametrize(
    "op, suggested",
    [
        ("NonMaxSuppression", None),  # contains "Max", but is another operator
        ("ArgMax", None),
        ("Einsum", None),
        ("Relu6", "Relu, PRelu, Elu"),
        ("Softmx", "Softmax"),
        ("Conv3D", "Conv"),
    ],
)
def test_unsupported_op_suggests_similar_names_only(op: str, suggested: str | None) -> None:
    message = _unsupported_op_message(op, "", 17, "'n'")
    if suggested is None:
        assert "closest supported" not in message
    else:
        assert f"closest supported: {suggested};" in message
    assert message.endswith(
        f"`accel ops` lists the {len(SUPPORTED_OPS)} supported ONNX ops (accel.frontend.onnx.SUPPORTED_OPS)"
    )
