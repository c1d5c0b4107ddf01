"""acl next to ONNX Runtime, in the same run: ResNet-18-like and MobileNetV2-like graphs (from the
core's model generators), float32 and QDQ-quantized, batch 1, at 1 and 2 threads, as latency
ratios (acl / onnxruntime; below 1 is faster).

ONNX Runtime runs with ``session.intra_op.allow_spinning=0``: its spinning worker threads would
otherwise take the cores from oneDNN's OpenMP threads in the same process (shared/NOTES.md). On
CPUs without VNNI its default uint8 x int8 kernels saturate 16-bit pair sums (wrong results), so
there it runs with ``session.x64quantprecision=1``, its exact path, as a fair comparison with
acl's exact int8 path. Run with ``nox -s bench`` or ``python plugins/acl/benchmarks/bench_acl.py``
(``--resolution 112 --repeat 5`` for a quick look). The machine is shared and noisy: compare the
ratios of one run.
"""

from __future__ import annotations

# ruff: noqa: I001  (accel is imported before numpy on purpose: see accel/_cpu.py)

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import accel

import numpy as np
import onnxruntime as ort
from rich.console import Console
from rich.table import Table

from accel.compiler import compile as compile_model
from accel.executor import ReferenceExecutor
from accel.testing import modelgen
from accel_sdk.bench import cpu_has_vnni, ort_session


def times_ms(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def bench(name: str, model, threads: int, repeat: int, quantized: bool) -> dict:
    data = model.SerializeToString()
    graph = accel.import_onnx(data)
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(1).random(shape, dtype=np.float32)
    feeds = {inp.name: x}
    t0 = time.perf_counter()
    artifact = compile_model(graph, "acl")
    executable = artifact.executable(threads)
    setup_ms = (time.perf_counter() - t0) * 1e3
    host = [n for n in artifact.host_graph.nodes if n.op != "call"] if hasattr(artifact, "host_graph") else []
    sess = ort_session(data, threads, quantized=quantized)
    out_name = model.graph.output[0].name
    got = np.asarray(executable.run(feeds)[out_name])
    want = np.asarray(ReferenceExecutor(graph).run(feeds)[out_name])
    exact = bool(np.array_equal(got, want)) if quantized else None
    err = float(np.max(np.abs(got - want)) / max(1e-12, float(np.max(np.abs(want)))))
    ort_out = np.asarray(sess.run(None, feeds)[0])
    ort_err = float(np.max(np.abs(ort_out - got)))
    # interleaved rounds, so drifting machine load hits both alike; the ratio of the fastest
    # runs is the least disturbed by other jobs on a shared machine (the medians are kept too)
    for _ in range(3):
        executable.run(feeds)
        sess.run(None, feeds)
    t_acl: list[float] = []
    t_ort: list[float] = []
    rounds = 5
    for _ in range(rounds):
        t_acl += times_ms(lambda: executable.run(feeds), max(1, repeat // rounds))
        t_ort += times_ms(lambda: sess.run(None, feeds), max(1, repeat // rounds))
    acl_ms, ort_ms = min(t_acl), min(t_ort)
    acl_med, ort_med = statistics.median(t_acl), statistics.median(t_ort)
    return {
        "model": name,
        "threads": threads,
        "acl_ms": acl_ms,
        "ort_ms": ort_ms,
        "ratio": acl_ms / ort_ms,
        "acl_median_ms": acl_med,
        "ort_median_ms": ort_med,
        "median_ratio": acl_med / ort_med,
        "setup_ms": setup_ms,
        "partitions": len(artifact.partitions),
        "host_ops": sorted({n.op for n in host}),
        "rel_err_vs_reference": err,
        "bit_exact_vs_reference": exact,
        "max_abs_diff_vs_ort": ort_err,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    console = Console()
    import accel_acl  # not its runtime module: the backend loads it (after choosing the OpenMP wait policy)

    console.print(
        f"accel {accel.__version__}, accel-acl {accel_acl.__version__}, onnxruntime {ort.__version__}, "
        f"VNNI: {'yes' if cpu_has_vnni() else 'no (ORT with session.x64quantprecision=1)'}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(acl: PASSIVE)')}"
    )
    rng = np.random.default_rng(0)
    r = args.resolution
    calib = [rng.random((1, 3, r, r), dtype=np.float32) for _ in range(4)]
    gens = {"resnet18": modelgen.resnet18, "mobilenet_v2": modelgen.mobilenet_v2}
    models = []
    for name in args.models.split(","):
        fp32 = gens[name](r)
        models.append((f"{name} fp32", fp32, False))
        models.append((f"{name} qdq", modelgen.quantize_qdq(fp32, calib), True))
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        for name, model, quantized in models:
            rows.append(bench(name, model, threads, args.repeat, quantized))
    table = Table(title=f"acl vs onnxruntime, batch 1, {r}x{r}: fastest of {args.repeat} runs each (interleaved)")
    for col in ("model", "threads", "acl", "onnxruntime", "acl / ort", "median ratio", "exact", "setup"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for row in rows:
        exact = "-" if row["bit_exact_vs_reference"] is None else ("yes" if row["bit_exact_vs_reference"] else "NO")
        table.add_row(
            row["model"],
            str(row["threads"]),
            f"{row['acl_ms']:.2f} ms",
            f"{row['ort_ms']:.2f} ms",
            f"{row['ratio']:.2f}x",
            f"{row['median_ratio']:.2f}x",
            exact,
            f"{row['setup_ms']:.0f} ms",
        )
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
