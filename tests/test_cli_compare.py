"""``accel run X --compare onnxruntime|reference``: the outputs of a model or an artifact against
another runtime on the same inputs, per output; exit code 1, with one line naming the output and
the tolerance it exceeded, when they differ by more than the user allows."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_accel

from accel.cli import Tolerance, compare_outputs, ort_session
from accel.models import default_model_path

FLOAT = default_model_path(quantized=False)
QDQ = default_model_path(quantized=True)


def accel_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_accel(*args, cwd=cwd)


def table_row(stdout: str, output: str) -> list[str]:
    for line in stdout.splitlines():
        if line.startswith(f"│ {output} "):
            return [c.strip() for c in line.strip("│").split("│")]
    raise AssertionError(f"no row for {output!r} in\n{stdout}")


def one_error(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("compare") / "digits_qdq.accel"
    proc = accel_cli("compile", str(QDQ), "--backends", "testbackend", "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.fixture(scope="module")
def float_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("compare") / "digits_fp32.accel"
    proc = accel_cli("compile", str(FLOAT), "--backends", "testbackend", "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.mark.parametrize("model", [FLOAT, QDQ], ids=["fp32", "qdq"])
def test_model_against_onnxruntime(model: Path) -> None:
    proc = accel_cli("run", str(model), "--compare", "onnxruntime", "--seed", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("compared with onnxruntime ") and f"running {model.name}" in lines[1]
    assert "tolerance --atol 0.0001 --rtol 0.001, uint8/int8 outputs --max-quantum-diff 1" in lines[1]
    row = table_row(proc.stdout, "probabilities")
    assert row[1:3] == ["float32", "[1, 10]"]
    assert float(row[3]) < 1e-5 and row[5] == "top-1 1/1, top-5 1/1" and row[6] == "yes"
    assert lines[-1].startswith("inputs: random (seed 2); ")


def test_artifact_against_its_host_graph_and_onnxruntime(float_artifact: Path, tmp_path: Path) -> None:
    x = np.random.default_rng(5).random((1, 1, 8, 8), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = accel_cli("run", str(float_artifact), "--compare", "reference", "-i", f"image={tmp_path / 'x.npy'}")
    assert proc.returncode == 0, proc.stderr
    assert "compared with the reference executor (the artifact's host graph)" in proc.stdout
    assert table_row(proc.stdout, "probabilities")[6] == "yes"
    assert "inputs: given" in proc.stdout
    proc = accel_cli("run", str(float_artifact), "--compare", f"onnxruntime={FLOAT}")
    assert proc.returncode == 0, proc.stderr
    assert f"running {FLOAT.name}" in proc.stdout and table_row(proc.stdout, "probabilities")[6] == "yes"


def test_artifact_needs_its_model_for_onnxruntime(artifact: Path) -> None:
    line = one_error(accel_cli("run", str(artifact), "--compare", "onnxruntime"))
    assert line == (
        "error: --compare onnxruntime on an artifact needs the ONNX model it was compiled from: "
        "--compare onnxruntime=MODEL.onnx (or --compare reference: its host graph on the reference executor)"
    )


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["run", str(FLOAT), "--compare", "reference"], "compare a model with --compare onnxruntime"),
        (["run", str(FLOAT), "--compare", f"onnxruntime={QDQ}"], "is for an artifact"),
        (["run", str(FLOAT), "--compare", "tvm"], "--compare takes onnxruntime, onnxruntime=MODEL.onnx or reference"),
        (["run", "--compare", "onnxruntime"], "need a MODEL"),
        (["run", str(FLOAT), "--compare", "onnxruntime", "--atol", "-1"], "--atol"),
    ],
)
def test_compare_usage_errors_are_one_line(args: list[str], fragment: str) -> None:
    assert fragment in one_error(accel_cli(*args))


def test_past_the_tolerance_exits_1_naming_the_output(artifact: Path) -> None:
    proc = accel_cli("run", str(FLOAT), "--compare", "onnxruntime", "--atol", "0", "--rtol", "0")
    line = one_error(proc, code=1)
    assert line.startswith("mismatch: output 'probabilities' differs by ")
    assert "more than --atol 0 + --rtol 0 x |" in line
    assert table_row(proc.stdout, "probabilities")[6] == "NO"


def _quantize_model(tmp_path: Path) -> Path:
    """float x [2, 64] -> QuantizeLinear (scale 0.05, zero point 128) -> uint8 y."""
    from onnx import TensorProto, helper, numpy_helper, save

    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
        "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 64])],
        [numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.uint8(128), "z")],
    )
    path = tmp_path / "quantize.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_quantized_output_counts_steps(tmp_path: Path) -> None:
    proc = accel_cli("run", str(_quantize_model(tmp_path)), "--compare", "onnxruntime")
    assert proc.returncode == 0, proc.stderr
    row = table_row(proc.stdout, "y")
    assert row[1:3] == ["uint8", "[2, 64]"] and row[5] == "0 values 1 step apart, 0 more" and row[6] == "yes"


def test_compare_outputs_quantized() -> None:
    got = {"y": np.array([0, 1, 5, 10, 200], np.uint8)}
    expected = {"y": np.array([0, 2, 5, 13, 199], np.uint8)}
    (v,) = compare_outputs(got, expected)
    assert (v.one_step, v.more_steps, v.max_abs) == (2, 1, 3.0)
    assert v.failure == (
        "output 'y' (uint8) differs by 3 steps at [3] (10 vs 13), more than --max-quantum-diff 1; 1 of 5 values"
    )
    (v,) = compare_outputs(got, expected, Tolerance(max_quantum_diff=3))
    assert v.failure is None


def test_compare_outputs_classifier_agreement() -> None:
    rng = np.random.default_rng(0)
    b = rng.random((4, 10)).astype(np.float32)
    a = b.copy()
    a[0, np.argsort(-b[0])[1]] = 2.0  # row 0: another top-1, same top-5 set
    a[1, np.argsort(-b[1])[7]] = 2.0  # row 1: another top-1 and a class from outside the top 5
    (v,) = compare_outputs({"p": a}, {"p": b}, Tolerance(atol=10.0))
    assert (v.top1, v.top5, v.rows) == (2, 3, 4) and v.failure is None
    (v,) = compare_outputs({"p": a}, {"p": b})
    assert v.failure is not None and v.failure.startswith("output 'p' differs by ")


def test_compare_outputs_names_shapes_and_nan() -> None:
    nan = np.array([np.nan, 1.0], np.float32)
    (v,) = compare_outputs({"a": nan}, {"b": nan.copy()})  # matched in order when the names differ
    assert v.max_abs == 0.0 and v.failure is None
    (v,) = compare_outputs({"a": nan}, {"a": np.array([0.0, 1.0], np.float32)})
    assert v.max_abs == np.inf and v.failure is not None
    (v,) = compare_outputs({"a": np.zeros((1, 3))}, {"a": np.zeros((3,))})
    assert v.failure == "output 'a' has shape [1, 3], the other runtime's [3]"


def test_ort_session_options() -> None:
    from accel.cli import cpu_has_vnni

    sess = ort_session(QDQ, quantized=True)
    opts = sess.get_session_options()
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    if not cpu_has_vnni():
        assert opts.get_session_config_entry("session.x64quantprecision") == "1"
