"""The workspace's pytest configuration lets every plugin keep a ``tests/test_conformance.py``.

Each plugin distribution has its own tests folder with the same file names
(the conformance kit's ``test_conformance.py``); run together from the
repository root, they must all be collected.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _collect(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    files = []
    for name in ("acl", "bnns"):
        folder = tmp_path / "plugins" / name / "tests"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "test_conformance.py"
        path.write_text(f"def test_{name}():\n    pass\n", encoding="utf-8")
        files.append(str(path))
    cmd = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-p", "no:cacheprovider", "-q"]
    return subprocess.run([*cmd, *extra, *files], capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_two_plugins_each_with_tests_test_conformance_are_both_collected(tmp_path):
    done = _collect(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_the_default_import_mode_would_clash(tmp_path):
    done = _collect(tmp_path, "--import-mode=prepend")
    assert done.returncode != 0
    assert "import file mismatch" in done.stdout + done.stderr
