"""The root conftest's CI rule: a missing test dependency fails in CI and is skipped elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

MODULE_SKIP = """
import pytest

dep = pytest.importorskip("accel_no_such_dependency")


def test_uses_it():
    assert dep
"""

FUNCTION_SKIP = """
import pytest


def test_uses_it():
    pytest.importorskip("accel_no_such_dependency")


def test_other_skip_is_still_a_skip():
    pytest.skip("not about a dependency")
"""


def run_pytest(folder: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=120,
    )


@pytest.mark.parametrize("source", [MODULE_SKIP, FUNCTION_SKIP], ids=["module-level", "in-a-test"])
def test_missing_dependency_fails_in_ci_and_skips_elsewhere(tmp_path: Path, source: str) -> None:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_dep.py").write_text(source)
    local = run_pytest(tmp_path, None)
    assert local.returncode in (0, 5), local.stdout  # 5: a skipped module leaves no test to run
    assert "failed" not in local.stdout and "skipped" in local.stdout
    ci = run_pytest(tmp_path, "true")
    assert ci.returncode in (1, 2), ci.stdout  # 2: a module that fails to collect interrupts the run
    assert "a test dependency is missing in CI" in ci.stdout
    if source is FUNCTION_SKIP:
        assert "1 failed" in ci.stdout and "1 skipped" in ci.stdout  # other skips are untouched
