"""Output piped to a file or a CI log is never cut to 80 columns: the command runs here as a
subprocess whose stdout and stderr are pipes, without COLUMNS, as a CI job runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from accel.cli import app

#: A node name longer than any terminal is wide.
LONG = "stage4/block17/" + "very_long_scope_name/" * 6 + "conv_with_a_name_nobody_would_type"


def piped(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run(
        [sys.executable, "-m", "accel", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def _long_named_model(tmp_path: Path) -> Path:
    """A float conv (the test backend takes it) and an int32 relu after a cast (it declines it, with a reason)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name=LONG),
        helper.make_node("Cast", ["c"], ["i"], to=TensorProto.INT32, name=LONG + "/cast"),
        helper.make_node("Relu", ["i"], ["y"], name=LONG + "/relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [w],
    )
    path = tmp_path / "long_names.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_compile_report_keeps_long_names_and_reasons_on_one_line(tmp_path: Path) -> None:
    model = _long_named_model(tmp_path)
    proc = piped("compile", str(model), "--backends", "testbackend", "-o", str(tmp_path / "m.accel"), "--verbose")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("target testbackend (priority order) - ") and lines[0].endswith("on the host")
    relu = [line for line in lines if f"{LONG}/relu" in line]
    assert len(relu) == 1, proc.stdout  # the name whole, and the reason beside it on the same row
    assert "dtype='int32', dtype must be float32" in relu[0]
    assert re.search(r"wrote \S+m\.accel \([\d.]+ MB\) in [\d.]+ s$", lines[-1])


def test_inspect_to_a_file_keeps_long_lines(tmp_path: Path) -> None:
    model = _long_named_model(tmp_path)
    report = tmp_path / "report.txt"
    proc = piped("inspect", str(model), "--backends", "testbackend", "-o", str(report), "--verbose")
    assert proc.returncode == 0, proc.stderr
    assert sum(f"{LONG}/relu" in line for line in report.read_text().splitlines()) == 1


def test_error_lines_are_not_wrapped(tmp_path: Path) -> None:
    missing = tmp_path / ("a_folder_with_a_long_name_" * 5) / "model.onnx"
    proc = piped("run", str(missing))
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and str(missing) in proc.stderr


def test_help_keeps_its_examples_verbatim() -> None:
    proc = piped("--help")
    assert proc.returncode == 0, proc.stderr
    help_text = app.info.help
    assert isinstance(help_text, str)
    examples = [line.strip() for line in help_text.split("\b\n", 1)[1].splitlines() if line.strip()]
    assert len(examples) >= 5
    printed = [line.strip() for line in proc.stdout.splitlines()]
    for example in examples:
        assert example in printed, f"{example!r} is not one line of `accel --help`:\n{proc.stdout}"
