"""Build plugins/ncnn/fuzz/fuzz_ncnn_blob.cpp with AddressSanitizer and UndefinedBehaviorSanitizer and run it
on mutations of real ncnn blobs (the graphs of plugins/ncnn/tests).

``python plugins/ncnn/fuzz/run_fuzz.py [ITERATIONS]`` (default 2000), after the plugin was built in this checkout
(it links the ncnn library the build left in plugins/ncnn/.ncnn-cache, or in ACCEL_NCNN_CACHE). Needs the
installed accel-ncnn (for the seeds), accel-sdk and pybind11. accel_sdk.fuzz does the building and running:
libFuzzer with clang++ where it has it, else g++ and the sdk's mutation driver.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def ncnn_install() -> Path:
    cache = Path(os.environ.get("ACCEL_NCNN_CACHE", HERE.parent / ".ncnn-cache"))
    found = sorted(p for p in cache.glob("install-*") if (p / ".accel-built").exists())
    if not found:
        raise SystemExit(f"run_fuzz: no ncnn build in {cache}: build the plugin first (pip install ./plugins/ncnn)")
    return found[-1]


def seeds() -> list[bytes]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    import ncnn_graphs as graphs
    from accel_ncnn import NcnnBackend

    from accel.partition import partition_graph

    seeds = [graphs.conv(), graphs.dense(relu=True), graphs.add(), graphs.concat(), graphs.batch_norm()]
    return [NcnnBackend().serialize(r.body) for g in seeds for r in partition_graph(g, [NcnnBackend()]).regions]


def main() -> None:
    from accel_sdk.fuzz import run_fuzz

    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    install = ncnn_install()
    lib = next(p for p in (install / "lib" / "libncnn.a", install / "lib64" / "libncnn.a") if p.exists())
    link = [str(lib), "-fopenmp"]
    include = [install / "include" / "ncnn", install / "include"]
    sys.exit(
        run_fuzz(
            "fuzz_ncnn_blob",
            HERE / "fuzz_ncnn_blob.cpp",
            seeds(),
            include_dirs=include,
            link=link,
            iterations=iterations,
        )
    )


if __name__ == "__main__":
    main()
