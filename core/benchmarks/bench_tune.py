"""``accel compile --tune`` on real backends: tuning time cold and from the cache, and the tuned
placement next to the plain priority placement and every single-backend one, in one run.

For ResNet-18 and MobileNetV2 (``accel.testing.modelgen``, 224×224, batch 1), fp32 and QDQ (ONNX
Runtime's static quantizer), with every installed backend among bnns, acl, ethosn and ncnn in
that priority order:

- a tune with an empty cache (cold) and a second one with the cache it filled (warm);
- the tuned artifact, the plain priority placement and each backend alone, run interleaved
  (one call of each per round, ``--repeat`` rounds, median), at the tune's thread count;
- the tuned artifact's output against the reference executor (fp32 within 1e-4 of the largest
  output, QDQ bit-exact).

The last column names the tuning's choice and, in parentheses, the untuned placements it is
identical to (their times differ by the run's noise only).

    python core/benchmarks/bench_tune.py [--repeat N] [--threads N] [--budget S]
"""

from __future__ import annotations

# ruff: noqa: I001  (accel is imported before numpy on purpose: see accel/_cpu.py)

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import accel

import numpy as np

from accel.executor import ReferenceExecutor
from accel.plugins import statuses
from accel.testing import modelgen
from accel.tune import TuneOptions

PRIORITY = ("bnns", "acl", "ethosn", "ncnn")
MODELS = {"ResNet-18": modelgen.resnet18, "MobileNetV2": modelgen.mobilenet_v2}


def interleaved(runs: list, feed: dict, repeat: int) -> list[float]:
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(2):
        for r in runs:
            r.run(feed)
    for k in range(repeat):
        order = range(len(runs)) if k % 2 == 0 else reversed(range(len(runs)))
        for i in order:
            t0 = time.perf_counter()
            runs[i].run(feed)
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) * 1e3 for t in times]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=60.0)
    args = parser.parse_args(argv)
    installed = {s.name for s in statuses() if s.ok}
    backends = [b for b in PRIORITY if b in installed]
    if not backends:
        print("no backend among " + ", ".join(PRIORITY) + " is installed")
        return 0
    print(f"backends {','.join(backends)}, {args.threads} thread(s), budget {args.budget:g} s, median of {args.repeat}")
    head = f"{'model':<18} {'cold s':>7} {'warm s':>7}  {'tuned ms':>9} {'plain ms':>9} {'best single':>20}  tuned/best  chosen"
    print(head)
    rng = np.random.default_rng(0)
    for name, make in MODELS.items():
        for form in ("fp32", "qdq"):
            model = make(224)
            if form == "qdq":
                model = modelgen.quantize_qdq(model, [rng.random((1, 3, 224, 224), dtype=np.float32) for _ in range(2)])
            graph = accel.import_onnx(model)
            feed = {graph.inputs[0].name: rng.random(graph.inputs[0].type.shape, dtype=np.float32)}
            with tempfile.TemporaryDirectory() as tmp:
                opts = TuneOptions(threads=args.threads, budget=args.budget, cache=Path(tmp) / "tune.json")
                t0 = time.perf_counter()
                accel.compile(graph, ",".join(backends), tune=opts)
                cold = time.perf_counter() - t0
                t0 = time.perf_counter()
                tuned = accel.compile(graph, ",".join(backends), tune=opts)
                warm = time.perf_counter() - t0
            plain = accel.compile(graph, ",".join(backends))
            singles = {}
            for b in backends:
                art = accel.compile(graph, b)
                if art.partitions:
                    singles[b] = art
            labels = ["tuned", "plain", *singles]
            runs = [a.executable(args.threads) for a in (tuned, plain, *singles.values())]
            got = runs[0].run(feed)
            want = ReferenceExecutor(graph).run(feed)
            out = graph.outputs[0].name
            g, w = np.asarray(got[out]), np.asarray(want[out])
            ok = np.array_equal(g, w) if form == "qdq" else bool(np.max(np.abs(g - w)) <= 1e-4 * np.max(np.abs(w)))
            ms = dict(zip(labels, interleaved(runs, feed, args.repeat)))
            best_single = min(singles, key=lambda b: ms[b])
            best = min(ms["plain"], ms[best_single])
            record = tuned.report.tuning
            where = {k: tuple(n.backend for n in a.report.nodes) for k, a in (("plain", plain), *singles.items())}
            same = [k for k, placement in where.items() if placement == tuple(n.backend for n in tuned.report.nodes)]
            print(
                f"{name + ' ' + form:<18} {cold:7.1f} {warm:7.1f}  {ms['tuned']:9.2f} {ms['plain']:9.2f} "
                f"{best_single + ' ' + format(ms[best_single], '.2f'):>20}  {ms['tuned'] / best:10.2f}  "
                f"{record['chosen']}{' (= ' + ', '.join(same) + ')' if same else ''}{'' if ok else '  OUTPUT WRONG'}"
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
