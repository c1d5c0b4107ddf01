"""What a new user meets at the command line: usage errors as one line, --debug anywhere with the
same exit code, output paths checked before any work, artifacts given where a model is expected,
short headers whose counts agree between commands, and a warning when nothing is offloaded."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_accel

from accel.models import default_model_path

ROOT = Path(__file__).resolve().parents[1]


def accel_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_accel(*args, cwd=cwd, env=env, columns=200)


def error_line(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "Usage:" not in proc.stderr and "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The float digits model compiled for testbackend (partitions), the quantized one (none)."""
    folder = tmp_path_factory.mktemp("artifacts")
    float_model = default_model_path(quantized=False)
    paths = {"float": folder / "float.accel", "quant": folder / "quant.accel"}
    compiled = accel_cli("compile", str(float_model), "--backends", "testbackend", "-o", str(paths["float"]))
    assert compiled.returncode == 0, compiled.stderr
    paths["float_out"] = compiled  # type: ignore[assignment]
    quant = accel_cli("compile", "--backends", "testbackend", "-o", str(paths["quant"]))
    assert quant.returncode == 0, quant.stderr
    paths["quant_out"] = quant  # type: ignore[assignment]
    return paths


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["run", "--repeat", "0"], ["--repeat", "accel run --help"]),
        (["run", "--no-such-option"], ["No such option: --no-such-option"]),
        (["frobnicate"], ["No such command", "frobnicate"]),
        (["inspect"], ["Missing argument"]),
        (["compile", "--backends"], ["--backends", "requires an argument"]),
    ],
)
def test_usage_errors_are_one_error_line(args: list[str], fragments: list[str]) -> None:
    line = error_line(accel_cli(*args))
    for f in fragments:
        assert f in line, line


def test_no_arguments_shows_the_help() -> None:
    proc = accel_cli()
    assert proc.returncode == 0 and "Usage:" in proc.stdout and "Commands" in proc.stdout


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_anywhere_keeps_the_exit_code(tmp_path: Path, where: str) -> None:
    missing = str(tmp_path / "missing.onnx")
    args = ["--debug", "run", missing] if where == "before" else ["run", missing, "--debug"]
    proc = accel_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" in proc.stderr and "ModelError" in proc.stderr and "does not exist" in proc.stderr
    # and a usage error under --debug is still exit 2
    assert accel_cli("run", "--repeat", "0", "--debug").returncode == 2


def test_debug_after_double_dash_is_an_argument(tmp_path: Path) -> None:
    line = error_line(accel_cli("run", "--", "--debug"))
    assert "'--debug' does not exist" in line


@pytest.mark.parametrize("kind", ["missing folder", "a folder", "under a file"])
def test_run_output_path_checked_before_running(tmp_path: Path, artifacts: dict[str, Path], kind: str) -> None:
    target = {
        "missing folder": tmp_path / "nowhere" / "out.npz",
        "a folder": tmp_path,
        "under a file": artifacts["float"] / "out.npz",
    }[kind]
    proc = accel_cli("run", str(artifacts["float"]), "-o", str(target))
    line = error_line(proc)
    assert "--output" in line and str(target) in line
    assert proc.stdout == "", "results were printed before the destination was checked"


def test_compile_and_inspect_output_paths_checked_first(tmp_path: Path) -> None:
    model = str(default_model_path(quantized=False))
    for args in (
        ["compile", model, "-o", str(tmp_path / "no" / "m.accel")],
        ["compile", model, "-o", str(tmp_path / "m.accel"), "--report", str(tmp_path / "no" / "r.html")],
        ["inspect", model, "-o", str(tmp_path / "no" / "ir.txt")],
    ):
        line = error_line(accel_cli(*args))
        assert "does not exist" in line
    assert list(tmp_path.iterdir()) == []


def test_compile_of_an_artifact_says_what_it_is(artifacts: dict[str, Path]) -> None:
    line = error_line(accel_cli("compile", str(artifacts["float"])))
    assert "compiled accel artifact, not an ONNX model" in line and "accel run" in line
    assert "protobuf" not in line


def test_artifact_is_written_like_other_outputs(artifacts: dict[str, Path]) -> None:
    mode = stat.S_IMODE(artifacts["float"].stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


def test_run_header_is_short_and_agrees_with_compile(artifacts: dict[str, Path]) -> None:
    compiled = artifacts["float_out"].stdout  # type: ignore[attr-defined]
    m = re.search(r"(\d+) offloaded in (\d+) partitions, (\d+)\s+on the host", " ".join(compiled.split()))
    assert m, compiled
    offloaded, partitions, host = (int(g) for g in m.groups())
    assert partitions >= 1 and offloaded >= 1
    proc = accel_cli("run", str(artifacts["float"]))
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[0]
    assert (
        header
        == f"float.accel: {partitions} partition(s): {partitions} on testbackend ({offloaded} ops); {host} host op(s)"
    )


def test_compile_that_offloads_nothing_warns(artifacts: dict[str, Path]) -> None:
    proc = artifacts["quant_out"]
    assert "warning: no node was offloaded to testbackend" in proc.stderr  # type: ignore[attr-defined]
    assert "warning" not in artifacts["float_out"].stderr  # type: ignore[attr-defined]
    header = accel_cli("run", str(artifacts["quant"])).stdout.splitlines()[0]
    assert header.startswith("quant.accel: everything on the host, ")


def test_disabled_plugin_is_not_reported_as_missing(artifacts: dict[str, Path]) -> None:
    line = error_line(accel_cli("run", str(artifacts["float"]), env={"ACCEL_DISABLE_PLUGINS": "testbackend"}))
    assert "ACCEL_DISABLE_PLUGINS" in line
    assert "pip install" not in line


def test_no_plugins_message_points_at_nothing_a_pip_user_lacks(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import accel.cli
    import accel.plugins

    monkeypatch.setattr(accel.plugins, "statuses", lambda: [])
    accel.cli.main(["backends"])
    text = capsys.readouterr().out
    assert "no backend plugins are installed" in text
    assert "docs/" not in text and ".md" not in text


def test_model_larger_than_memory_is_refused_before_running(tmp_path: Path) -> None:
    """A 4 TiB ConstantOfShape is left to run time by import; run refuses it up front. The address
    space is capped so that a regression fails with MemoryError instead of exhausting the machine."""
    import resource

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    value = numpy_helper.from_array(np.ones(1, np.float32))
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["c"], value=value), helper.make_node("Add", ["x", "c"], ["y"])],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array([1 << 40], np.int64), "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "big.onnx"
    path.write_bytes(model.SerializeToString())

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    proc = subprocess.run(
        [sys.executable, "-m", "accel", "run", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=cap,
        env={**os.environ, "COLUMNS": "200"},
    )
    line = error_line(proc)
    assert "more than this machine's memory" in line and "'c'" in line


def test_run_takes_the_thread_count_at_load_time(artifacts: dict[str, Path]) -> None:
    """`accel run --threads N` runs the partitions on N threads and says so; ACCEL_NUM_THREADS when not given.
    (The digits artifact is scored; any other prints its outputs, with the threads on its last line.)"""
    art = str(artifacts["float"])
    for args, env, want in (
        (["--threads", "1"], {}, 1),
        (["-t", "2"], {"ACCEL_NUM_THREADS": "1"}, 2),
        ([], {"ACCEL_NUM_THREADS": "2"}, 2),
    ):
        proc = accel_cli("run", art, *args, env=env)
        assert proc.returncode == 0, proc.stderr
        assert f"images; threads: {want}\n" in proc.stdout, proc.stdout


def test_thread_count_errors_are_one_line(artifacts: dict[str, Path]) -> None:
    assert "ACCEL_NUM_THREADS='many'" in error_line(
        accel_cli("run", str(artifacts["float"]), env={"ACCEL_NUM_THREADS": "many"})
    )
    assert "--threads applies to a compiled .accel artifact" in error_line(
        accel_cli("run", str(default_model_path(quantized=False)), "--threads", "2")
    )
    assert "--threads" in error_line(accel_cli("run", str(artifacts["float"]), "--threads", "0"))
