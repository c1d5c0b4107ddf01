"""Build a backend's fuzz target (accel_sdk/fuzz.hpp) with the sanitizers and run it on mutations of real blobs.

A plugin's ``fuzz/run_fuzz.py`` gives its target's source, its seeds (blobs its serializer wrote)
and what its runtime links with; this does the rest::

    from accel_sdk.fuzz import run_fuzz

    run_fuzz("fuzz_mynpu_blob", HERE / "fuzz_mynpu_blob.cpp", seeds, include_dirs=[...], link=[...])

With clang++ and libFuzzer the target is a libFuzzer binary run for ``iterations`` executions from
the seeds; otherwise g++ builds it with the sdk's own mutation driver (ACCEL_SDK_FUZZ_DRIVER).
AddressSanitizer and UndefinedBehaviorSanitizer either way; a finding stops the run non-zero.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

import accel_sdk

__all__ = ["python_link", "run_fuzz"]


def python_link() -> list[str]:
    """libpython, for the pybind11 code accel_sdk/runtime.hpp brings in (a target never calls it)."""
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    if not libdir or not ldlib.startswith("lib"):
        return []
    name = ldlib[3:].split(".so")[0].split(".a")[0]
    return [f"-L{libdir}", f"-l{name}", f"-Wl,-rpath,{libdir}"]


def _has_libfuzzer(clang: str) -> bool:
    probe = subprocess.run(
        [clang, "-x", "c++", "-fsanitize=fuzzer", "-", "-o", os.devnull],
        input='extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }',
        capture_output=True,
        text=True,
    )
    return probe.returncode == 0


def run_fuzz(
    name: str,
    source: Path,
    seeds: Sequence[bytes],
    *,
    include_dirs: Sequence[Path | str] = (),
    link: Sequence[str] = (),
    iterations: int = 2000,
) -> int:
    """Build ``source`` as the fuzz target ``name`` and run it; its exit code."""
    import pybind11

    import accel

    clang = shutil.which("clang++")
    libfuzzer = bool(clang) and _has_libfuzzer(clang)  # type: ignore[arg-type]
    compiler = clang if libfuzzer else (shutil.which("g++") or shutil.which("c++"))
    if compiler is None:
        raise SystemExit(f"{name}: no C++ compiler (apt install g++)")
    includes = [accel_sdk.get_include(), accel.get_include(), pybind11.get_include(), sysconfig.get_paths()["include"]]
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        exe = t / name
        sanitize = "-fsanitize=fuzzer,address,undefined" if libfuzzer else "-fsanitize=address,undefined"
        cmd = [
            compiler, "-std=c++17", "-g", "-O1", sanitize, "-fno-sanitize-recover=undefined",
            *([] if libfuzzer else ["-DACCEL_SDK_FUZZ_DRIVER"]),
            *(f"-I{d}" for d in [*includes, *include_dirs]),
            str(source), "-o", str(exe), *link, "-lpthread", *python_link(),
        ]  # fmt: skip
        print(f"building {name} with {Path(compiler).name} ...", flush=True)
        subprocess.run(cmd, check=True)
        corpus = t / "seeds"
        corpus.mkdir()
        paths = []
        for i, blob in enumerate(seeds):
            p = corpus / f"seed{i}.bin"
            p.write_bytes(blob)
            paths.append(str(p))
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1", OMP_NUM_THREADS="1")
        run = [str(exe), f"-runs={iterations}", str(corpus)] if libfuzzer else [str(exe), str(iterations), *paths]
        return subprocess.run(run, env=env).returncode
