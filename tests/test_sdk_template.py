"""``accel-sdk new`` renders a backend that builds and passes its own tests as rendered.

The backend is rendered by the installed ``accel-sdk`` command, built by pip
against the installed accel-core and accel-sdk (no build isolation: the build
tools come from this environment, as in ``nox -s tests``), installed into a
folder of its own so this environment's plugins stay as they are, and its
tests (the conformance kit and its refusals) run in a fresh interpreter that
sees it. About 30 s, almost all of it the C++ build.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from accel_sdk.cli import render

SCRIPT = Path(sys.executable).parent / "accel-sdk"
ROOT = Path(__file__).resolve().parents[1]
#: A code block of docs/sdk.md quoting a rendered file: its first line names it (``# accel-mynpu/<path>``).
EXCERPT = re.compile(r"^```\w*\n(?:#|//) accel-mynpu/(\S+)\n(.*?)^```", re.S | re.M)


def run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=env or dict(os.environ), timeout=900
    )
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return proc


def test_rendered_backend_builds_installs_and_passes_its_tests(tmp_path):
    run(SCRIPT, "new", "mynpu", "--output", tmp_path / "accel-mynpu", cwd=tmp_path)
    site = tmp_path / "site"
    run(
        sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--target", site,
        tmp_path / "accel-mynpu", cwd=tmp_path,
    )  # fmt: skip
    assert list(site.glob("accel_mynpu/_runtime*.so")) or list(site.glob("accel_mynpu/_runtime*.pyd"))

    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}
    backends = run(sys.executable, "-m", "accel", "backends", cwd=tmp_path, env=env)
    assert "mynpu" in backends.stdout
    tests = run(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rA",
        "tests",
        cwd=tmp_path / "accel-mynpu",
        env=env,
    )
    summary = tests.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "skipped" not in summary and "failed" not in summary, tests.stdout
    passed = [line for line in tests.stdout.splitlines() if line.startswith("PASSED")]
    for name in (
        "test_runtime_matches_reference",
        "test_discoverable_through_its_entry_point",
        "test_refusals_give_their_reason",
        "test_compiled_model_matches_reference",
    ):
        assert any(name in line for line in passed), f"{name} did not pass:\n{tests.stdout}"


def test_the_sdk_docs_quote_the_rendered_template(tmp_path):
    """Every line of each excerpt in docs/sdk.md is a line of the rendered file, in order (``...`` skips)."""
    render("mynpu", tmp_path)
    excerpts = EXCERPT.findall((ROOT / "docs" / "sdk.md").read_text(encoding="utf-8"))
    assert {rel for rel, _ in excerpts} >= {"CMakeLists.txt", "pyproject.toml", "src/runtime.cpp"}
    for rel, body in excerpts:
        lines = (tmp_path / rel).read_text(encoding="utf-8").splitlines()
        at = 0
        for line in body.splitlines():
            if line.strip() in ("", "..."):
                continue
            assert line in lines[at:], (
                f"docs/sdk.md quotes {rel} with a line it does not have (after line {at}): {line!r}"
            )
            at = lines.index(line, at) + 1
