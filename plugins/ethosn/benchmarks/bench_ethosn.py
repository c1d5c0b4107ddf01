"""ethosn next to ONNX Runtime on the same QDQ models, in the same run.

For QDQ ResNet-18-like and MobileNetV2-like graphs (``accel.testing.modelgen``,
224×224, ONNX Runtime's static quantizer): compile time, command count and
arena size, then latency at 1 and 2 threads of

- the whole compiled model (``accel.load`` of the artifact: host quantize /
  dequantize around one ethosn partition),
- the ethosn partition alone (its runtime handle on the partition's inputs),
- onnxruntime on the same QDQ file (``session.intra_op.allow_spinning=0``; on
  CPUs without VNNI also ``session.x64quantprecision=1``, the exact kernels),

as medians of interleaved rounds (one call of each per round) and ratios, plus a
bit-exactness check against accel's reference executor. The thread count is
given where it is chosen, when the artifact is loaded (``accel.load(path,
threads=N)``, ``Runtime(blob, threads=N)``); each count still runs in its own
process, ethosn and onnxruntime side by side in it, so no OpenMP team of one
count waits beside the other's.

    python plugins/ethosn/benchmarks/bench_ethosn.py [--resolution 224] [--repeat 30]
"""

from __future__ import annotations

# ruff: noqa: I001  (accel is imported before numpy on purpose: see accel/_cpu.py)

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import accel

import numpy as np
from accel_sdk.bench import cpu_has_vnni, ort_session


def median_ms(fns, repeat: int, warmup: int = 3) -> list[float]:
    """Median milliseconds of each function, timed in interleaved rounds.

    One call of each per round, so that whatever the machine does meanwhile (and the
    threads one runtime leaves behind) falls on all of them alike.
    """
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, got in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            got.append(time.perf_counter() - t0)
    return [statistics.median(t) * 1e3 for t in times]


def build_models(resolution: int, folder: Path) -> dict[str, Path]:
    from accel.testing import modelgen

    out = {}
    for name, make in (("resnet18", modelgen.resnet18), ("mobilenet_v2", modelgen.mobilenet_v2)):
        model = modelgen.quantize_qdq(make(resolution=resolution), 4)
        path = folder / f"{name}_qdq.onnx"
        path.write_bytes(model.SerializeToString())
        out[name] = path
    return out


def worker(models: dict[str, str], threads: int, repeat: int) -> list[dict]:
    from accel_ethosn import EthosnBackend
    from accel_ethosn.serializer import command_stream

    from accel.executor import ReferenceExecutor

    rows = []
    for name, path in models.items():
        data = Path(path).read_bytes()
        t0 = time.perf_counter()
        art = accel.compile(data, "ethosn")
        compile_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            apath = Path(tmp) / "m.accel"
            apath.write_bytes(art.to_bytes())
            t0 = time.perf_counter()
            exe = accel.load(apath, threads=threads)
            load_s = time.perf_counter() - t0
        (region,) = [n for n in art.graph.nodes if n.op == "call"]
        stream = command_stream(region.body)
        graph = accel.import_onnx(data)
        name_in = graph.inputs[0].name
        rng = np.random.default_rng(0)
        x = rng.standard_normal(graph.inputs[0].type.shape).astype(np.float32)
        feeds = {name_in: x}
        got = exe.run(feeds)
        want = ReferenceExecutor(graph).run(feeds)
        exact = all(np.array_equal(got[k], want[k]) for k in want)

        # the partition alone, on the quantized input the host hands it
        runtime = EthosnBackend().runtime_module().Runtime(art.blobs[region.name], threads=threads)
        assert runtime.threads == threads, (runtime.threads, threads)
        q_in = [np.ascontiguousarray(np.zeros(v.type.shape, v.type.dtype)) for v in region.body.inputs]
        q_out = [np.empty(v.type.shape, v.type.dtype) for v in region.body.outputs]

        sess = ort_session(data, threads, quantized=True)

        t_ort, t_accel, t_part = median_ms(
            [
                lambda sess=sess, feeds=feeds: sess.run(None, feeds),
                lambda exe=exe, feeds=feeds: exe.run(feeds),
                lambda rt=runtime, i=q_in, o=q_out: rt.run(i, o),
            ],
            repeat,
        )
        rows.append(
            {
                "model": name,
                "threads": threads,
                "compile_s": compile_s,
                "load_s": load_s,
                "commands": len(stream.commands),
                "arena_bytes": stream.arena_size,
                "weights_bytes": stream.weights_size,
                "accel_ms": t_accel,
                "partition_ms": t_part,
                "ort_ms": t_ort,
                "ratio": t_accel / t_ort,
                "partition_ratio": t_part / t_ort,
                "bit_exact": exact,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        print(json.dumps(worker(spec["models"], spec["threads"], spec["repeat"])))
        return
    from rich.console import Console
    from rich.table import Table

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ethosn-") as tmp:
        models = {k: str(v) for k, v in build_models(args.resolution, Path(tmp)).items()}
        for threads in (int(t) for t in args.threads.split(",")):
            env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
            spec = json.dumps({"models": models, "threads": threads, "repeat": args.repeat})
            out = subprocess.run(
                [sys.executable, __file__, "--worker", spec], env=env, check=True, capture_output=True, text=True
            )
            rows.extend(json.loads(out.stdout.strip().splitlines()[-1]))
    table = Table(
        title=f"ethosn vs onnxruntime, QDQ int8, {args.resolution}x{args.resolution} (VNNI: {cpu_has_vnni()})"
    )
    for col in (
        "model",
        "threads",
        "ethosn ms",
        "partition ms",
        "ORT ms",
        "ratio",
        "partition ratio",
        "compile s",
        "arena KiB",
        "commands",
        "bit-exact",
    ):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["model"],
            str(r["threads"]),
            f"{r['accel_ms']:.2f}",
            f"{r['partition_ms']:.2f}",
            f"{r['ort_ms']:.2f}",
            f"{r['ratio']:.2f}x",
            f"{r['partition_ratio']:.2f}x",
            f"{r['compile_s']:.2f}",
            f"{r['arena_bytes'] / 1024:.0f}",
            str(r["commands"]),
            str(r["bit_exact"]),
        )
    Console().print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
