"""GFLOP/s of accel-sdk's oneDNN convolutions: conv3x3 56x56x64 (and a MobileNetV2 1x1 expand), fp32 vs exact int8.

Run from an accel checkout with accel-sdk's [test] extra installed:
``python sdk/benchmarks/bench_onednn.py``. It builds the probe of sdk/tests (CMake,
accel_link_onednn) on first use. int8 is IntConvRequantize (uint8 in, uint8 out, bias,
per-channel scales), exact on every CPU: without VNNI its weights run in parts (the
column "parts"). Figures are medians of a few timed batches, without creating the ops; machines are shared, so
compare ratios from one run.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from onednn_build import probe
from test_onednn_int_ops import geometry, out_size

LAYERS = {
    "conv3x3 56x56x64": geometry(56, 56, 64, 64, p=1),
    "1x1 expand 56x56 24->144": geometry(56, 56, 24, 144, k=1),
    "dw3x3 112x112x32": geometry(112, 112, 32, 32, groups=32, p=1),
}


def gflop(g) -> float:
    oh, ow = out_size(g)
    return 2.0 * g["batch"] * oh * ow * g["oc"] * (g["c"] // g["groups"]) * g["kh"] * g["kw"] / 1e9


def timed(fn, repeat: int) -> float:
    """Seconds per run, without the op's creation: each probe call creates the op, then runs it n times."""
    fn(1)  # warm up: caches, the primitive cache, page faults
    samples = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn(1)
        t1 = time.perf_counter()
        fn(1 + repeat)
        t2 = time.perf_counter()
        samples.append(max((t2 - t1) - (t1 - t0), 1e-9) / repeat)
    return statistics.median(samples)


def bench_layer(p, name: str, g, rng: np.random.Generator) -> None:
    x32 = rng.standard_normal((1, g["h"], g["w"], g["c"])).astype(np.float32)
    w32 = (rng.standard_normal((g["oc"], g["kh"], g["kw"], g["c"] // g["groups"])) * 0.1).astype(np.float32)
    b32 = rng.standard_normal(g["oc"]).astype(np.float32)
    x8 = rng.integers(0, 256, size=x32.shape).astype(np.uint8)
    w8 = rng.integers(-127, 128, size=w32.shape).astype(np.int8)
    bias = rng.integers(-1000, 1000, size=g["oc"]).tolist()
    scales = rng.uniform(1e-4, 1e-3, size=g["oc"]).tolist()
    parts = p.int_conv(g, x8, w8, 3, [0], "ohwi", 1, 0)[1]
    f = gflop(g)
    for threads in (1, 2):

        def fp32(n: int, t: int = threads) -> None:
            p.float_conv(g, x32, w32, b32, [("relu", 0, 0)], "nhwc", "ohwi", t, n)

        def int8(n: int, t: int = threads) -> None:
            p.int_conv_requantize(g, x8, w8, 3, [0], scales, 0.05, 0, 0, 255, bias, "uint8", t, 0, n)

        t32, t8 = timed(fp32, 40), timed(int8, 40)
        print(f"{name:28} {threads:>7} {f / t32:>13.1f} {f / t8:>13.1f} {parts:>6} {t32 / t8:>9.2f}")


def main() -> None:
    p = probe()
    rng = np.random.default_rng(0)
    print(
        f"oneDNN ISA {p.cpu_isa()}, int8 exact without splitting: {p.int8_exact()}, requantize kernel {p.requantize_isa()}"
    )
    print(f"{'layer':28} {'threads':>7} {'fp32 GFLOP/s':>13} {'int8 GFLOP/s':>13} {'parts':>6} {'int8/fp32':>9}")
    for name, g in LAYERS.items():
        bench_layer(p, name, g, rng)


if __name__ == "__main__":
    main()
