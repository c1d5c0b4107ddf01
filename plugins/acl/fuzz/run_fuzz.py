"""Build plugins/acl/fuzz/fuzz_acl_blob.cpp with AddressSanitizer and UndefinedBehaviorSanitizer and run it
on mutations of real acl blobs (the cases of plugins/acl/tests).

``python plugins/acl/fuzz/run_fuzz.py [ITERATIONS]`` (default 2000). With clang++ and libFuzzer it builds a
libFuzzer target and runs it for ITERATIONS executions from the seeds; otherwise g++ builds the target with
its own mutation driver. Needs the installed accel-acl (for the seeds), accel-sdk, pybind11 and the oneDNN
wheels (onednn-cpu-gomp, onednn-devel-cpu-gomp).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _dist_dir(dist: str, suffix: str) -> Path:
    d = md.distribution(dist)
    for f in d.files or []:
        if str(f).replace("\\", "/").endswith(suffix):
            return Path(d.locate_file(f)).resolve().parent
    raise SystemExit(f"{dist}: no {suffix} (pip install {dist}==2023.2.0)")


def _python_link() -> list[str]:
    """libpython, for the pybind11 code runtime.hpp brings in (the harness never calls it)."""
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    if not libdir or not ldlib.startswith("lib"):
        return []
    name = ldlib[3:].split(".so")[0].split(".a")[0]
    return [f"-L{libdir}", f"-l{name}", f"-Wl,-rpath,{libdir}"]


def seeds(out: Path) -> list[str]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    import acl_cases as cases
    from accel_acl import AclBackend

    from accel.partition import partition_graph

    graphs = [
        cases.network_fp32(),
        cases.l2_pool(),
        cases.conv_fp32(pad=(1, 0, 1, 0), act="relu6"),
        cases.qnn_network("uint8"),
        cases.qnn_network("int8", conv=False),
        cases.qnn_conv((1, 8, 9, 10), 8, groups=8),
        cases.qnn_dense("int8"),
    ]
    paths = []
    for graph in graphs:
        for region in partition_graph(graph, [AclBackend()]).regions:
            p = out / f"seed{len(paths)}.bin"
            p.write_bytes(AclBackend().serialize(region.body))
            paths.append(str(p))
    return paths


def main() -> None:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    import accel_sdk
    import pybind11

    import accel

    dnnl_inc = _dist_dir("onednn-devel-cpu-gomp", "oneapi/dnnl/dnnl.hpp").parent.parent
    dnnl_lib = _dist_dir("onednn-cpu-gomp", "libdnnl.so.3")
    clang = shutil.which("clang++")
    libfuzzer = False
    if clang:
        probe = subprocess.run(
            [clang, "-x", "c++", "-fsanitize=fuzzer", "-", "-o", os.devnull],
            input='extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }',
            capture_output=True,
            text=True,
        )
        libfuzzer = probe.returncode == 0
    compiler = clang if libfuzzer else (shutil.which("g++") or shutil.which("c++"))
    if compiler is None:
        raise SystemExit("run_fuzz: no C++ compiler")
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        exe = t / "fuzz_acl_blob"
        sanitize = "-fsanitize=fuzzer,address,undefined" if libfuzzer else "-fsanitize=address,undefined"
        cmd = [
            compiler, "-std=c++17", "-g", "-O1", sanitize, "-fno-sanitize-recover=undefined",
            *([] if libfuzzer else ["-DACL_FUZZ_DRIVER"]),
            f"-I{accel_sdk.get_include()}", f"-I{accel.get_include()}", f"-I{pybind11.get_include()}",
            f"-I{sysconfig.get_paths()['include']}", f"-I{dnnl_inc}",
            str(HERE / "fuzz_acl_blob.cpp"), "-o", str(exe),
            f"-L{dnnl_lib}", "-l:libdnnl.so.3", f"-Wl,-rpath,{dnnl_lib}", "-lgomp", "-lpthread",
            *_python_link(),
        ]  # fmt: skip
        print("building:", " ".join(cmd[:6]), "...", flush=True)
        subprocess.run(cmd, check=True)
        corpus = t / "seeds"
        corpus.mkdir()
        paths = seeds(corpus)
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1", OMP_NUM_THREADS="1")
        if libfuzzer:
            run = [str(exe), f"-runs={iterations}", str(corpus)]
        else:
            run = [str(exe), str(iterations), *paths]
        proc = subprocess.run(run, env=env)
        sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
