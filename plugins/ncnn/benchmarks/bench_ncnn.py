"""ncnn next to acl and ONNX Runtime, in the same run: AlexNet (with its LRNs, tests/nets.py),
ResNet-18 and MobileNetV2 (accel's model generator), float32, batch 1, at 1 and 2 threads, as
milliseconds and the latency ratio ncnn / onnxruntime (below 1 is faster).

ncnn takes every node of the three. ONNX Runtime runs with ``session.intra_op.allow_spinning=0``
(accel_sdk.bench.ort_session), as the backends' own OpenMP threads sleep when idle: spinning
workers of one would take the cores from the other. The rounds alternate between the runners so
that drifting load on a shared machine hits them all; the fastest runs are the least disturbed by
other work. acl is left out when accel-acl is not installed. Run it with
``python benchmarks/bench_ncnn.py`` (``--resolution 112 --repeat 10`` for a quick look).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from accel_sdk.bench import ort_session

import accel
from accel.compiler import compile as compile_model
from accel.executor import ReferenceExecutor
from accel.testing import modelgen

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from ncnn_nets import alexnet

NETWORKS = {"alexnet": alexnet, "resnet18": modelgen.resnet18, "mobilenet_v2": modelgen.mobilenet_v2}


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def bench(model, threads: int, repeat: int, backends: list[str], rounds: int = 5) -> dict:
    data = model.SerializeToString()
    graph = accel.import_onnx(data)
    name = graph.inputs[0].name
    feed = {name: np.random.default_rng(1).random(graph.inputs[0].type.shape, dtype=np.float32)}
    out = graph.outputs[0].name
    want = np.asarray(ReferenceExecutor(graph).run(feed)[out])
    runners = {}
    result: dict = {"threads": threads}
    for backend in backends:
        artifact = compile_model(graph, target={"devices": [{"kind": backend}]})
        exe = artifact.executable(threads=threads)
        got = np.asarray(exe.run(feed)[out])
        result[f"{backend}_error"] = float(np.max(np.abs(got - want)) / max(1e-12, float(np.max(np.abs(want)))))
        result[f"{backend}_host"] = sorted({n.op for n in artifact.report.host_nodes()})
        runners[backend] = lambda exe=exe: exe.run(feed)
    session = ort_session(data, threads)
    runners["onnxruntime"] = lambda: session.run(None, feed)
    times: dict[str, list[float]] = {k: [] for k in runners}
    for run in runners.values():  # warm up
        for _ in range(3):
            run()
    for _ in range(rounds):
        for k, run in runners.items():
            times[k] += timed(run, max(1, repeat // rounds))
    for k, ts in times.items():
        result[k] = min(ts)
        result[f"{k}_median"] = statistics.median(ts)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--networks", default=",".join(NETWORKS))
    args = parser.parse_args()
    backends = ["ncnn"] + (["acl"] if importlib.util.find_spec("accel_acl") else [])
    print(f"fp32, {args.resolution}x{args.resolution}, batch 1: fastest of {args.repeat} runs each, ms")
    head = "".join(f"{b:>12}" for b in [*backends, "onnxruntime"])
    print(f"{'network':<13}{'threads':>7}{head}  ncnn/ort  ncnn rel. error  ncnn leaves on the host")
    for net in args.networks.split(","):
        model = NETWORKS[net](args.resolution)
        for threads in (int(t) for t in args.threads.split(",")):
            r = bench(model, threads, args.repeat, backends)
            cells = "".join(f"{r[b]:>12.2f}" for b in [*backends, "onnxruntime"])
            print(
                f"{net:<13}{threads:>7}{cells}  {r['ncnn'] / r['onnxruntime']:>7.2f}x  {r['ncnn_error']:>15.1e}  "
                f"{', '.join(r['ncnn_host']) or '-'}"
            )


if __name__ == "__main__":
    main()
