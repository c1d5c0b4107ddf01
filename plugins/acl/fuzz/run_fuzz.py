"""Build plugins/acl/fuzz/fuzz_acl_blob.cpp with AddressSanitizer and UndefinedBehaviorSanitizer and run it
on mutations of real acl blobs (the cases of plugins/acl/tests).

``python plugins/acl/fuzz/run_fuzz.py [ITERATIONS]`` (default 2000). With clang++ and libFuzzer it builds a
libFuzzer target and runs it for ITERATIONS executions from the seeds; otherwise g++ builds the target with
its own mutation driver. Needs the installed accel-acl (for the seeds), accel-sdk, pybind11 and the oneDNN
wheels (onednn-cpu-gomp, onednn-devel-cpu-gomp).
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _dist_dir(dist: str, suffix: str) -> Path:
    d = md.distribution(dist)
    for f in d.files or []:
        if str(f).replace("\\", "/").endswith(suffix):
            return Path(d.locate_file(f)).resolve().parent
    raise SystemExit(f"{dist}: no {suffix} (pip install {dist}==2023.2.0)")


def seeds() -> list[bytes]:
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
    return [AclBackend().serialize(r.body) for g in graphs for r in partition_graph(g, [AclBackend()]).regions]


def main() -> None:
    from accel_sdk.fuzz import run_fuzz

    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    dnnl_inc = _dist_dir("onednn-devel-cpu-gomp", "oneapi/dnnl/dnnl.hpp").parent.parent
    dnnl_lib = _dist_dir("onednn-cpu-gomp", "libdnnl.so.3")
    link = [f"-L{dnnl_lib}", "-l:libdnnl.so.3", f"-Wl,-rpath,{dnnl_lib}", "-lgomp"]
    code = run_fuzz(
        "fuzz_acl_blob", HERE / "fuzz_acl_blob.cpp", seeds(), include_dirs=[dnnl_inc], link=link, iterations=iterations
    )
    sys.exit(code)


if __name__ == "__main__":
    main()
