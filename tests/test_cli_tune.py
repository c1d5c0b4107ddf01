"""``accel compile --tune`` as a user runs it: the record printed, kept in the artifact and shown by inspect."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_helpers import run_accel

from accel.models import default_model_path


def accel_cli(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    return run_accel(*args, cwd=cwd, env={"XDG_CACHE_HOME": str(cache)}, columns=200)


def test_compile_tune_then_inspect(tmp_path):
    model = default_model_path(quantized=False)
    cache = tmp_path / "cache"
    args = ("compile", str(model), "-b", "testbackend", "--tune", "--tune-budget", "20s", "--tune-threads", "1")
    proc = accel_cli(*args, "-o", "m.accel", cwd=tmp_path, cache=cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Tuning: candidate placements" in proc.stdout and "priority" in proc.stdout
    doc = json.loads((cache / "accel" / "tune.json").read_text())
    assert doc["format"] == "accel-tune-cache" and doc["entries"]
    proc = accel_cli("inspect", "m.accel", "--format", "json", cwd=tmp_path, cache=cache)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)["tuning"]
    assert record["threads"] == 1 and record["candidates"][0]["label"] == "priority"
    assert record["cache"]["path"] == str(cache / "accel" / "tune.json")
    proc = accel_cli("inspect", "m.accel", cwd=tmp_path, cache=cache)
    assert proc.returncode == 0 and "Tuned on" in proc.stdout
    again = accel_cli(*args, "-o", "m2.accel", cwd=tmp_path, cache=cache)
    assert again.returncode == 0, again.stderr
    proc = accel_cli("inspect", "m2.accel", "--format", "json", cwd=tmp_path, cache=cache)
    assert json.loads(proc.stdout)["tuning"]["cache"]["misses"] == 0


def test_tune_options_need_tune(tmp_path):
    model = default_model_path(quantized=False)
    proc = accel_cli("compile", str(model), "-b", "testbackend", "--tune-budget", "5s", cwd=tmp_path, cache=tmp_path)
    assert proc.returncode == 2 and "apply with --tune" in proc.stderr
    proc = accel_cli("compile", str(model), "--tune", "--tune-budget", "soon", cwd=tmp_path, cache=tmp_path)
    assert proc.returncode == 2 and "--tune-budget must be a duration" in proc.stderr


def test_run_says_in_one_line_that_an_artifact_was_tuned_elsewhere(tmp_path):
    from accel.artifact import read_artifact

    model = default_model_path(quantized=False)
    cache = tmp_path / "cache"
    args = ("compile", str(model), "-b", "testbackend", "--tune", "--tune-budget", "0", "--tune-threads", "1")
    assert accel_cli(*args, "-o", "m.accel", cwd=tmp_path, cache=cache).returncode == 0
    art = read_artifact(tmp_path / "m.accel")
    art.report.tuning["machine"] = {"arch": "riscv64", "cpu": "a board", "isa": [], "id": "0"}
    art.save(tmp_path / "elsewhere.accel")
    proc = accel_cli("run", "elsewhere.accel", cwd=tmp_path, cache=cache)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "tuned on" in notes[0], proc.stderr
