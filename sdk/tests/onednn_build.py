"""Build the ``_sdk_onednn_probe`` extension (sdk/tests/onednn_probe) with CMake and import it.

The probe is built as a plugin builds its runtime: ``find_package(accel_sdk)``,
``accel_add_runtime`` and ``accel_link_onednn``, against the oneDNN wheels of this
interpreter. It is keyed by a hash of its sources, the sdk's headers and CMake file
and the interpreter, so a re-run reuses the build. Tests skip when CMake, pybind11,
a compiler or the oneDNN wheels are missing.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
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

SOURCES = Path(__file__).parent / "onednn_probe"
_module: ModuleType | None = None


def _require() -> None:
    for dist in ("onednn-cpu-gomp", "onednn-devel-cpu-gomp", "pybind11", "cmake"):
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{dist} is not installed (accel-sdk's [test] extra installs it)")
    if not (os.environ.get("CXX") or any(shutil.which(c) for c in ("c++", "g++", "clang++"))):
        pytest.skip("no C++ compiler (set CXX) to build the oneDNN probe")


def _key() -> str:
    h = hashlib.sha256()
    for f in sorted(SOURCES.iterdir()):
        h.update(f.name.encode() + f.read_bytes())
    for header in sorted((Path(accel_sdk.get_include()) / "accel_sdk").glob("*.hpp")):
        h.update(header.read_bytes())
    h.update((Path(accel_sdk.get_cmake_dir()) / "accel_sdkConfig.cmake").read_bytes())
    h.update((Path(accel.get_include()) / "accel" / "runtime_abi.h").read_bytes())
    h.update(sys.version.encode() + sys.executable.encode())
    return h.hexdigest()[:16]


def build_dir() -> Path:
    """Where the probe is (or will be) built."""
    return Path(tempfile.gettempdir()) / f"accel-sdk-onednn-probe-{_key()}"


def _cmake() -> str:
    exe = Path(sys.executable).parent / "cmake"
    return str(exe) if exe.exists() else (shutil.which("cmake") or "cmake")


def probe_path() -> Path:
    """The built extension (built on first use, in a folder under build_dir())."""
    _require()
    folder = build_dir()
    done = folder / "done"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=folder))
        env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "1"))
        ninja = shutil.which("ninja") or str(Path(sys.executable).parent / "ninja")
        gen = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if Path(ninja).exists() else []
        steps = [
            [
                _cmake(), "-S", str(SOURCES), "-B", str(work), *gen, "-DCMAKE_BUILD_TYPE=Release",
                f"-Daccel_sdk_DIR={accel_sdk.get_cmake_dir()}", f"-DPython_EXECUTABLE={sys.executable}",
            ],
            [_cmake(), "--build", str(work)],
        ]  # fmt: skip
        for cmd in steps:
            result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if result.returncode != 0:
                shutil.rmtree(work, ignore_errors=True)
                raise RuntimeError(
                    f"building the oneDNN probe failed:\n{' '.join(cmd)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
                )
        built = next(work.glob("_sdk_onednn_probe*" + sysconfig.get_config_var("EXT_SUFFIX")))
        # the build folder stays (cmake --install needs it); the marker names it
        tmp = folder / f"done-{os.getpid()}"
        tmp.write_text(str(built.relative_to(folder)))
        os.replace(tmp, done)  # atomic: a concurrent run sees no marker or a whole one
    return folder / done.read_text()


def install(prefix: Path) -> None:
    """cmake --install the probe under prefix (as a wheel's files land in site-packages)."""
    result = subprocess.run(
        [_cmake(), "--install", str(probe_path().parent), "--prefix", str(prefix)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"installing the oneDNN probe failed:\n{result.stdout}\n{result.stderr}")


def probe() -> ModuleType:
    """The compiled probe module."""
    global _module
    if _module is None:
        target = probe_path()
        spec = importlib.util.spec_from_file_location("_sdk_onednn_probe", target)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _module = module
    return _module
