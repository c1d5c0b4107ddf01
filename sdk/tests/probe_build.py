"""Build the ``_sdk_probe`` extension (sdk/tests/probe/probe.cpp) once per content and import it.

The sdk's C++ headers have no compiled code of their own; this module compiles a
small pybind11 extension that drives them, keyed by a hash of its source, the
headers and the interpreter, so a re-run reuses the build.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

import accel_sdk
import pytest

import accel

SOURCE = Path(__file__).parent / "probe" / "probe.cpp"
_module: ModuleType | None = None


def compiler() -> str | None:
    """The C++ compiler: $CXX, else c++, g++ or clang++ on PATH."""
    if os.environ.get("CXX"):
        return os.environ["CXX"]
    return next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)


def include_dirs() -> list[str]:
    """accel-sdk's and accel-core's headers, then pybind11's and Python's (the test skips without pybind11)."""
    pybind11 = pytest.importorskip("pybind11", reason="pybind11 builds the sdk's C++ probe")
    return [accel_sdk.get_include(), accel.get_include(), pybind11.get_include(), sysconfig.get_paths()["include"]]


def _key() -> str:
    h = hashlib.sha256(SOURCE.read_bytes())
    for header in sorted((Path(accel_sdk.get_include()) / "accel_sdk").glob("*.hpp")):
        h.update(header.read_bytes())
    h.update((Path(accel.get_include()) / "accel" / "runtime_abi.h").read_bytes())
    h.update(sys.version.encode())
    return h.hexdigest()[:16]


def probe() -> ModuleType:
    """The compiled probe module (built on first use; skips the test when there is no compiler)."""
    global _module
    if _module is not None:
        return _module
    cxx = compiler()
    if cxx is None:
        pytest.skip("no C++ compiler (set CXX) to build the sdk's C++ probe")
    folder = Path(tempfile.gettempdir()) / f"accel-sdk-probe-{_key()}"
    target = folder / ("_sdk_probe" + sysconfig.get_config_var("EXT_SUFFIX"))
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"build-{os.getpid()}.so"
        cmd = [cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra"]
        cmd += [f"-I{d}" for d in include_dirs()] + [str(SOURCE), "-o", str(tmp)]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"building the probe failed:\n{' '.join(cmd)}\n{result.stderr[-4000:]}")
        os.replace(tmp, target)  # atomic: a concurrent run sees the old state or the whole file
    spec = importlib.util.spec_from_file_location("_sdk_probe", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _module = module
    return module
