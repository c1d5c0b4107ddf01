"""A backend build that lacks a C++ compiler or accel-sdk stops with one line saying what to install.

CMake configures the rendered template (``accel-sdk new``) the way scikit-build-core
would, with the compiler or the sdk taken away; nothing is compiled.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import accel_sdk
import pytest
from accel_sdk.cli import render


def cmake_tool(name: str) -> str:
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        pytest.fail(f"{name} is not installed (pip install {name}): the backend build tests need it")
    return found


def configure(source: Path, build: Path, *defines: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [cmake_tool("cmake"), "-S", str(source), "-B", str(build), "-G", "Ninja"]
    cmd += [f"-DCMAKE_MAKE_PROGRAM={cmake_tool('ninja')}", f"-DPython_EXECUTABLE={sys.executable}", *defines]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """The lines of CMake's error text that carry a message (not its 'CMake Error at' frame)."""
    return [line.strip() for line in proc.stderr.splitlines() if line.startswith("   ") and line.strip()]


@pytest.fixture
def backend(tmp_path) -> Path:
    render("mynpu", tmp_path / "accel-mynpu")
    return tmp_path / "accel-mynpu"


def test_no_cxx_compiler_is_one_line(backend, tmp_path):
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler" / "c++")}
    proc = configure(backend, tmp_path / "build", f"-Daccel_sdk_DIR={accel_sdk.get_cmake_dir()}", env=env)
    assert proc.returncode != 0
    (line,) = [line for line in error_lines(proc) if "accel-sdk" in line]
    assert line.startswith("accel-sdk: no C++ compiler found; building an accel backend needs a C++17 compiler")
    assert "apt install g++" in line


def test_no_accel_sdk_is_one_line(backend, tmp_path):
    proc = configure(backend, tmp_path / "build", "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", env=dict(os.environ))
    assert proc.returncode != 0
    lines = error_lines(proc)
    assert lines == [
        "accel-mynpu: accel-sdk not found; install accel-sdk in the build environment "
        "(from an accel checkout: nox -s wheels, then pip install --find-links wheelhouse accel-mynpu)"
    ], proc.stderr


def test_with_both_the_configure_step_passes(backend, tmp_path):
    proc = configure(backend, tmp_path / "build", f"-Daccel_sdk_DIR={accel_sdk.get_cmake_dir()}", env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
