"""The ``accel`` command end to end, as a user runs it (a subprocess of the installed package)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_accel

from accel.models import default_model_path


def accel_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_accel(*args, cwd=cwd, columns=200)


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_version_and_help():
    proc = accel_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("accel-core ")
    proc = accel_cli("--help")
    assert proc.returncode == 0 and "run" in proc.stdout and "inspect" in proc.stdout and "Examples" in proc.stdout


def test_run_default_scores_embedded_model():
    proc = accel_cli("run")
    assert proc.returncode == 0, proc.stderr
    assert "accel reference executor" in proc.stdout
    assert "onnxruntime" in proc.stdout
    assert "held-out handwritten digits" in proc.stdout
    accuracies = [float(tok.rstrip("%")) for tok in proc.stdout.split() if tok.endswith("%") and tok[0].isdigit()]
    assert len(accuracies) == 2 and min(accuracies) > 90 and abs(accuracies[0] - accuracies[1]) < 1.0


def test_run_model_with_inputs_and_outputs(tmp_path):
    model = default_model_path(quantized=False)
    x = np.random.default_rng(0).random((1, 1, 8, 8), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = accel_cli(
        "run",
        str(model),
        "--input",
        f"image={tmp_path / 'x.npy'}",
        "--output",
        str(tmp_path / "out.npz"),
        "--repeat",
        "3",
    )
    assert proc.returncode == 0, proc.stderr
    assert "over 3 runs" in proc.stdout
    with np.load(tmp_path / "out.npz", allow_pickle=False) as out:
        probs = out[out.files[0]]
    assert probs.shape == (1, 10) and abs(float(probs.sum()) - 1.0) < 1e-5
    proc = accel_cli("run", str(model))
    assert proc.returncode == 0 and "random (seed 0)" in proc.stdout


@pytest.mark.parametrize(
    "content, fragment",
    [(b"", "empty"), (b"\x08\x07garbage that is not protobuf\xff\xff", "ONNX"), (None, "does not exist")],
    ids=["empty", "garbage", "missing"],
)
def test_bad_model_is_one_line_exit_2(tmp_path, content, fragment):
    path = tmp_path / "bad.onnx"
    if content is not None:
        path.write_bytes(content)
    proc = accel_cli("run", str(path), "--output", str(tmp_path / "out.npz"))
    assert_one_line_error(proc)
    assert fragment.lower() in proc.stderr.lower()
    assert not (tmp_path / "out.npz").exists()
    debug = accel_cli("--debug", "run", str(path))
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_wrong_input_shape_is_one_line_and_writes_nothing(tmp_path):
    model = default_model_path(quantized=True)
    np.save(tmp_path / "x.npy", np.zeros((1, 1, 9, 9), np.float32))
    proc = accel_cli("run", str(model), "-i", f"image={tmp_path / 'x.npy'}", "-o", str(tmp_path / "out.npz"))
    assert_one_line_error(proc, "image", "float32[1,1,8,8]", "float32[1,1,9,9]")
    assert not (tmp_path / "out.npz").exists()
    proc = accel_cli("run", str(model), "-i", "image")
    assert_one_line_error(proc, "NAME=FILE.npy")
    proc = accel_cli("run", str(model), "-i", f"image={tmp_path / 'nope.npy'}")
    assert_one_line_error(proc, "no such file")


def test_inspect_text_and_json():
    model = default_model_path(quantized=True)
    proc = accel_cli("inspect", str(model))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("graph ") and "qnn.conv2d" in proc.stdout and "nn.softmax" in proc.stdout
    proc = accel_cli("inspect", str(model), "--format", "json", "--raw")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["format"] == "accel-graph" and any(n["op"] == "qnn.dequantize" for n in doc["nodes"])
    proc = accel_cli("inspect", str(model), "--format", "yaml")
    assert_one_line_error(proc, "text, json or html")


def _model_file(tmp_path: Path, nodes, inputs, outputs, initializers=(), name="m.onnx") -> Path:
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / name
    onnx.save(model, path)
    return path


def test_bad_models_through_the_cli(tmp_path):
    """Unknown op, a cycle, and external data escaping the folder: exit 2, one line each."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    unknown = _model_file(tmp_path, [helper.make_node("Frobnicate", ["x"], ["y"], name="n0")], [x], [y], name="u.onnx")
    assert_one_line_error(accel_cli("inspect", str(unknown)), "Frobnicate", "n0", "17")

    cycle = _model_file(
        tmp_path,
        [helper.make_node("Relu", ["b"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2")],
        [x],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4])],
        name="c.onnx",
    )
    assert_one_line_error(accel_cli("run", str(cycle)), "cycle")

    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1, 4])
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../secret.bin"), ("offset", "0"), ("length", "16")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    sub = tmp_path / "model"
    sub.mkdir()
    escape = _model_file(sub, [helper.make_node("Add", ["x", "w"], ["y"])], [x], [y], [w], name="e.onnx")
    assert_one_line_error(accel_cli("run", str(escape), "-o", str(sub / "out.npz")), "..")
    assert not (sub / "out.npz").exists()


# -- input shapes, run-time shape operands, accel ops ------------------------------------


def _symbolic_conv(tmp_path: Path, dims: list) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).random((4, 3, 3, 3), dtype=np.float32), "w")
    return _model_file(
        tmp_path,
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
        name="conv.onnx",
    )


def test_input_shape_fixes_symbolic_dims_on_run_compile_inspect(tmp_path):
    model = _symbolic_conv(tmp_path, ["N", 3, "H", "W"])
    proc = accel_cli("inspect", str(model))
    assert_one_line_error(proc, "'H'", "--input-shape x=")
    proc = accel_cli("inspect", str(model), "--input-shape", "x=2,3,16,12")
    assert proc.returncode == 0, proc.stderr
    assert "float32[2,3,16,12]" in proc.stdout
    assert "'N' (axis 0) = 2, 'H' (axis 2) = 16, 'W' (axis 3) = 12" in proc.stderr
    proc = accel_cli("compile", str(model), "-s", "x=1,3,8,8", "-o", str(tmp_path / "m.accel"))
    assert proc.returncode == 0, proc.stderr
    assert "'H' (axis 2) = 8" in proc.stderr
    proc = accel_cli("run", str(tmp_path / "m.accel"))
    assert proc.returncode == 0 and "[1, 4, 8, 8]" in proc.stdout, proc.stderr
    proc = accel_cli("run", str(model), "--input-shape", "x=3,3,5,6")
    assert proc.returncode == 0 and "[3, 4, 5, 6]" in proc.stdout, proc.stderr
    for bad, fragment in (
        ("x", "NAME=D0,D1"),
        ("x=1,3,a,4", "integers"),
        ("x=0,3,4,4", "positive"),
        ("z=1,3,4,4", "'z'"),
    ):
        assert_one_line_error(accel_cli("inspect", str(model), "--input-shape", bad), fragment)
    assert_one_line_error(accel_cli("run", str(tmp_path / "m.accel"), "-s", "x=1,3,8,8"), "artifact")


def test_dynamic_batch_is_reported_and_follows_the_given_input(tmp_path):
    model = _symbolic_conv(tmp_path, ["batch", 3, 8, 8])
    proc = accel_cli("run", str(model))
    assert proc.returncode == 0, proc.stderr
    assert "note: input 'x': symbolic dimension(s) 'batch' (axis 0) = 1 by default" in proc.stderr
    assert "--input-shape x=1,3,8,8" in proc.stderr
    np.save(tmp_path / "x4.npy", np.ones((4, 3, 8, 8), np.float32))
    proc = accel_cli("run", str(model), "-i", f"x={tmp_path / 'x4.npy'}")
    assert proc.returncode == 0, proc.stderr
    assert "[4, 4, 8, 8]" in proc.stdout and "'batch' (axis 0) = 4, as given" in proc.stderr


def test_run_specializes_on_a_shape_operand_given_as_input(tmp_path):
    from onnx import TensorProto, helper

    model = _model_file(
        tmp_path,
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        name="reshape.onnx",
    )
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.float32).reshape(2, 6))
    np.save(tmp_path / "s.npy", np.array([4, 3], np.int64))
    out = tmp_path / "out.npz"
    proc = accel_cli(
        "run", str(model), "-i", f"x={tmp_path / 'x.npy'}", "-i", f"shape={tmp_path / 's.npy'}", "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert "specialized on the values of shape" in proc.stdout
    with np.load(out) as z:
        np.testing.assert_array_equal(z["y"], np.arange(12, dtype=np.float32).reshape(4, 3))
    # random inputs cannot give a shape: the error says how to give it
    assert_one_line_error(accel_cli("run", str(model)), "'shape' is a graph input", "--input")


def test_ops_lists_onnx_and_ir_ops_and_the_unsupported_op_error_points_there(tmp_path):
    from onnx import TensorProto, helper

    proc = accel_cli("ops")
    assert proc.returncode == 0, proc.stderr
    assert "LRN" in proc.stdout and "nn.lrn" in proc.stdout and "Local response normalization" in proc.stdout
    proc = accel_cli("ops", "pool")
    assert proc.returncode == 0 and "MaxPool" in proc.stdout and "Conv," not in proc.stdout
    assert_one_line_error(accel_cli("ops", "nosuchop"), "nosuchop")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = _model_file(tmp_path, [helper.make_node("Relu6", ["x"], ["y"], name="r")], [x], [y], name="r6.onnx")
    proc = accel_cli("inspect", str(model))
    assert_one_line_error(proc, "'Relu6'", "closest supported: Relu", "accel ops")
    assert len(proc.stderr) < 300
