"""GFLOP/s of accel-sdk's oneDNN convolutions: conv3x3 56x56x64 and MobileNetV2 layers, fp32 vs exact int8.

Run from an accel checkout with accel-sdk's [test] extra installed:
``python sdk/benchmarks/bench_onednn.py``. It builds the probe of sdk/tests (CMake,
accel_link_onednn) on first use. int8 is IntConvRequantize (uint8 in, uint8 out, bias,
per-channel scales), exact on every CPU, twice: forced onto the int8 path (without VNNI
its weights run in parts, column "parts") and with the path IntConv picks for the layer
(column "path": int8, or f32 where oneDNN's f32 convolution is exact and faster).
Figures are the best of a few timed batches taken in turn, without creating the ops;
machines are shared, so compare ratios from one run.
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
    "conv3x3 28x28x128": geometry(28, 28, 128, 128, p=1),
    "1x1 expand 56x56 24->144": geometry(56, 56, 24, 144, k=1),
    "1x1 project 28x28 192->32": geometry(28, 28, 192, 32, k=1),
    "dw3x3 112x112x32": geometry(112, 112, 32, 32, groups=32, p=1),
    "dw3x3 s2 56x56x144": geometry(56, 56, 144, 144, groups=144, s=2, p=1),
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


def best_of(fns: dict, repeat: int, rounds: int = 5) -> dict:
    """Seconds per run of each fn, without the op's creation: the best time of one call with 1 run
    and of one with 1 + repeat runs over `rounds` rounds, each round timing every fn in turn (so a
    busy spell of a shared machine hits all of them alike); per run = (long - short) / repeat."""
    short = dict.fromkeys(fns, float("inf"))
    long = dict.fromkeys(fns, float("inf"))
    for fn in fns.values():
        fn(1)  # warm up: caches, the primitive cache, page faults
    for _ in range(rounds):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn(1)
            t1 = time.perf_counter()
            fn(1 + repeat)
            t2 = time.perf_counter()
            short[key] = min(short[key], t1 - t0)
            long[key] = min(long[key], t2 - t1)
    return {key: max(long[key] - short[key], 1e-9) / repeat for key in fns}


def bench_layer(p, name: str, g, rng: np.random.Generator) -> None:
    x32 = rng.standard_normal((1, g["h"], g["w"], g["c"])).astype(np.float32)
    w32 = (rng.standard_normal((g["oc"], g["kh"], g["kw"], g["c"] // g["groups"])) * 0.1).astype(np.float32)
    b32 = rng.standard_normal(g["oc"]).astype(np.float32)
    x8 = rng.integers(0, 256, size=x32.shape).astype(np.uint8)
    w8 = rng.integers(-127, 128, size=w32.shape).astype(np.int8)
    bias = rng.integers(-1000, 1000, size=g["oc"]).tolist()
    scales = rng.uniform(1e-4, 1e-3, size=g["oc"]).tolist()
    p.set_path("int8")
    parts = p.int_conv(g, x8, w8, 3, [0], "ohwi", 1, 0)[1]
    p.set_path("auto")
    path = "f32" if "f32 path" in p.int_conv(g, x8, w8, 3, [0], "ohwi", 1, 0)[2] else "int8"
    f = gflop(g)
    for threads in (1, 2):

        def fp32(n: int, t: int = threads) -> None:
            p.float_conv(g, x32, w32, b32, [("relu", 0, 0)], "nhwc", "ohwi", t, n)

        def int8(n: int, t: int = threads, path: str = "auto") -> None:
            p.set_path(path)
            p.int_conv_requantize(g, x8, w8, 3, [0], scales, 0.05, 0, 0, 255, bias, "uint8", t, 0, n)

        t = best_of({"fp32": fp32, "int8": lambda n: int8(n, path="int8"), "auto": int8}, 20)
        t32, t_int8, t_auto = t["fp32"], t["int8"], t["auto"]
        print(
            f"{name:28} {threads:>7} {f / t32:>8.1f} {f / t_int8:>10.1f} {parts:>5} {f / t_auto:>10.1f} {path:>5}"
            f" {t32 / t_auto:>9.2f}"
        )


REQUANTIZE_BLOCKS = {  # rows x channels: a band of about 256 KiB of accumulators, and a whole layer
    "band 448x144": (448, 144),
    "band 2048x32": (2048, 32),
    "layer 3136x144": (3136, 144),
    "layer 12544x32": (12544, 32),
}


def bench_requantize(p, rng: np.random.Generator) -> None:
    """ns per output value of ChannelRequantizer (uint8 out, bias, per-channel and per-tensor).
    With AVX-512 every column but the last runs the float32 kernel; with AVX2, shift ≤ 0
    (multipliers below 1, as convolutions have) and shift > 0 with m ≥ 2^16 run the fast integer
    kernel and the same block with m = 1000, shift 1 on its first channel the general one."""
    print(f"\nrequantize, ns per output value (kernel {p.requantize_isa()})")
    print(f"{'block':16} {'multipliers':12} {'shift<=0':>9} {'shift<=4':>9} {'general':>9} {'portable':>9}")
    for name, (rows, channels) in REQUANTIZE_BLOCKS.items():
        acc = rng.integers(-200_000, 200_000, size=(rows, channels)).astype(np.int32)
        bias = rng.integers(-1000, 1000, size=channels).astype(np.int32)
        for per_channel in (True, False):
            n = channels if per_channel else 1
            m = rng.integers(1 << 30, 1 << 31, size=n).astype(np.int32)
            shift = rng.integers(-12, 1, size=n).astype(np.int32)
            up = rng.integers(-12, 5, size=n).astype(np.int32)
            up[0] = 4
            m_general, general = m.copy(), shift.copy()
            m_general[0], general[0] = 1000, 1
            runs = ((m, shift, "avx512", 20), (m, up, "avx512", 20), (m_general, general, "avx512", 20))
            runs += ((m, shift, "portable", 2),)
            ns = [1e9 * p.requantize_seconds(acc, mm, s, bias, isa, reps, 5) for mm, s, isa, reps in runs]
            kind = "per-channel" if per_channel else "per-tensor"
            print(f"{name:16} {kind:12} {ns[0]:>9.3f} {ns[1]:>9.3f} {ns[2]:>9.3f} {ns[3]:>9.3f}")


def main() -> None:
    p = probe()
    rng = np.random.default_rng(0)
    print(
        f"oneDNN ISA {p.cpu_isa()}, int8 exact without splitting: {p.int8_exact()}, requantize kernel {p.requantize_isa()}"
    )
    print("GFLOP/s; int8 path = IntConvRequantize forced onto oneDNN's int8 kernels; auto = the path it picks")
    print(
        f"{'layer':28} {'threads':>7} {'fp32':>8} {'int8 path':>10} {'parts':>5} {'auto':>10} {'path':>5} {'auto/fp32':>9}"
    )
    for name, g in LAYERS.items():
        bench_layer(p, name, g, rng)
    bench_requantize(p, rng)


if __name__ == "__main__":
    main()
