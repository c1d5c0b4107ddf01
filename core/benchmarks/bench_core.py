"""Core benchmarks, side by side with ONNX Runtime in the same run.

- import + passes time (ONNX bytes -> simplified IR) for ResNet-18, MobileNetV2
  and a ResNet-50-sized graph;
- reference-executor latency next to onnxruntime's, as a ratio, for the fp32
  and QDQ (int8) versions of ResNet-18 and MobileNetV2.

Run with ``nox -s bench`` (or ``python core/benchmarks/bench_core.py``).
Figures are medians over repeated runs; the machine is shared and noisy, so
compare ratios from one run, not absolute times across runs.
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

from accel.executor import ReferenceExecutor
from accel.testing import modelgen


def median_time(fn, repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_import(name: str, model, repeat: int) -> dict:
    data = model.SerializeToString()
    t = median_time(lambda: accel.import_onnx(data), repeat, warmup=1)
    graph = accel.import_onnx(data)
    return {"model": name, "onnx_nodes": len(model.graph.node), "ir_nodes": len(graph.nodes), "import_s": t}


def bench_latency(name: str, model, repeat: int, threads: int) -> dict:
    data = model.SerializeToString()
    graph = accel.import_onnx(data)
    executor = ReferenceExecutor(graph)
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    feeds = {inp.name: x}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    t_ort = median_time(lambda: sess.run(None, feeds), repeat)
    t_ref = median_time(lambda: executor.run(feeds), repeat)
    return {"model": name, "ort_ms": t_ort * 1e3, "accel_ms": t_ref * 1e3, "ratio": t_ref / t_ort}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    console = Console()
    threads = os.cpu_count() or 1
    console.print(
        f"accel {accel.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}, "
        f"{threads} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(default)')}"
    )

    models = {
        "resnet18": modelgen.resnet18(),
        "mobilenet_v2": modelgen.mobilenet_v2(),
        "resnet50": modelgen.resnet50(),
    }
    imports = [bench_import(name, m, max(3, args.repeat // 4)) for name, m in models.items()]
    table = Table(title="import + passes (ONNX bytes -> simplified IR)")
    for col in ("model", "ONNX nodes", "IR nodes", "time"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in imports:
        table.add_row(r["model"], str(r["onnx_nodes"]), str(r["ir_nodes"]), f"{r['import_s'] * 1e3:.1f} ms")
    console.print(table)

    rng = np.random.default_rng(0)
    calib = [rng.random((1, 3, 224, 224), dtype=np.float32) for _ in range(4)]
    latency_models = {
        "resnet18 fp32": models["resnet18"],
        "mobilenet_v2 fp32": models["mobilenet_v2"],
        "resnet18 qdq int8": modelgen.quantize_qdq(models["resnet18"], calib),
        "mobilenet_v2 qdq int8": modelgen.quantize_qdq(models["mobilenet_v2"], calib),
    }
    latencies = [bench_latency(name, m, args.repeat, threads) for name, m in latency_models.items()]
    table = Table(title=f"latency, batch 1, 224x224, {threads} threads (median of {args.repeat})")
    for col in ("model", "onnxruntime", "accel reference", "accel / ort"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in latencies:
        table.add_row(r["model"], f"{r['ort_ms']:.2f} ms", f"{r['accel_ms']:.2f} ms", f"{r['ratio']:.2f}x")
    console.print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"import": imports, "latency": latencies}, f, indent=1)


if __name__ == "__main__":
    main()
