"""The bnns backend next to ONNX Runtime in the same run: ResNet-18, MobileNetV2, an encoder.

ResNet-18 and MobileNetV2 (fp32, 224x224) and a transformer encoder, compiled
with ``--backends bnns``, at 1 and 2 threads.

The compiled model runs its bnns partitions in the C++ runtime (oneDNN, with the
thread count given when it is loaded: ``executable(threads=N)``) and what bnns
does not take on accel's host (numpy). ONNX Runtime runs with the same thread count and
``session.intra_op.allow_spinning=0``: its spinning worker threads would
otherwise steal the cores oneDNN's threads run on in this process. Figures are
medians of alternating runs; the machine is shared and noisy, so read the
ratios of one run, not absolute times across runs.

GNU OpenMP's worker threads (oneDNN's) spin for 300,000 iterations by default
before they sleep, which on a shared machine costs more than the partitions
themselves. The plugin, as every plugin, loads its runtime after setting
``OMP_WAIT_POLICY=PASSIVE`` unless ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is
set (``accel_sdk.openmp``), as ONNX Runtime's spinning is turned off here; this
script leaves that choice to it (MobileNetV2 at 2 threads under load: 180 ms
with ``GOMP_SPINCOUNT=10000``, 33 ms passive, 31 ms at 1 thread).

Run with ``nox -s bench`` or ``python plugins/bnns/benchmarks/bench_bnns.py``
(``--models resnet18,mobilenet_v2 --repeat 10`` for a shorter run).
"""

from __future__ import annotations

# ruff: noqa: I001  (accel is imported before numpy on purpose: see accel/_cpu.py)

import argparse
import json
import os
import statistics
import time

import accel  # first: lets accel pick OpenBLAS kernels before numpy loads

import numpy as np
import onnxruntime as ort
from rich.console import Console
from rich.table import Table

from accel.testing import modelgen
from accel_sdk.bench import ort_session

#: The bar this backend is held to (docs/backends/bnns.md): at most this many times ONNX Runtime's latency.
BAR = 2.0


#: The models, by the name --models takes.
MODELS = {
    "resnet18": ("resnet18 fp32 224x224", modelgen.resnet18),
    "mobilenet_v2": ("mobilenet_v2 fp32 224x224", modelgen.mobilenet_v2),
    "encoder": (
        "encoder seq128 d256 h4 ffn1024 x2",
        lambda: modelgen.transformer_encoder(128, dim=256, heads=4, ffn=1024, layers=2),
    ),
}


def compiled(model, threads: int):
    """The model compiled for bnns, loaded to compute with ``threads`` threads."""
    return accel.compile(model, "bnns").executable(threads=threads)


def alternate(fns: list, repeat: int, warmup: int = 3) -> list[float]:
    """Median seconds of each function, run in turns so noise hits all of them alike."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def bench(name: str, model, threads: int, repeat: int) -> dict:
    feeds = modelgen.random_inputs(model, seed=0)[0]
    sess = ort_session(model.SerializeToString(), threads)
    exe = compiled(model, threads)
    want = sess.run(None, feeds)[0]
    got = exe.run(feeds)[modelgen.OUTPUT_NAME]
    err = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())
    t_ort, t_bnns = alternate([lambda: sess.run(None, feeds), lambda: exe.run(feeds)], repeat)
    return {
        "model": name,
        "threads": threads,
        "ort_ms": t_ort * 1e3,
        "bnns_ms": t_bnns * 1e3,
        "ratio": t_bnns / t_ort,
        "max_rel_err_vs_ort": err,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    console = Console()
    console.print(
        f"accel {accel.__version__}, onnxruntime {ort.__version__}, {os.cpu_count()} cores, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(bnns: PASSIVE)')}, "
        f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '(default)')}, load average {os.getloadavg()[0]:.1f}"
    )
    unknown = [m for m in args.models.split(",") if m.strip() and m.strip() not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r} (choose from {', '.join(MODELS)})")
    models = {MODELS[m.strip()][0]: MODELS[m.strip()][1]() for m in args.models.split(",") if m.strip()}
    rows = [
        bench(name, m, int(t), args.repeat) for name, m in models.items() for t in args.threads.split(",") if t.strip()
    ]
    table = Table(title=f"bnns next to onnxruntime, batch 1 (median of {args.repeat}, alternating)")
    for col in ("model", "threads", "onnxruntime", "bnns", "bnns / ort", "max rel. error"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        table.add_row(
            r["model"],
            str(r["threads"]),
            f"{r['ort_ms']:.2f} ms",
            f"{r['bnns_ms']:.2f} ms",
            f"{r['ratio']:.2f}x",
            f"{r['max_rel_err_vs_ort']:.1e}",
        )
    console.print(table)
    over = [r for r in rows if r["model"].startswith("resnet18") and r["ratio"] > BAR]
    if over:
        which = ", ".join(f"{r['threads']} threads" for r in over)
        console.print(f"[red]above the {BAR:.1f}x bar: {which}[/red]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
