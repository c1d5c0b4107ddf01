"""accel_sdk/requantize.hpp's ChannelRequantizer against accel.quant, bit for bit, on every kernel."""

from __future__ import annotations

import numpy as np
import pytest
from onednn_build import probe

from accel import quant

KERNELS = ["portable", "avx2", "avx512"]  # avx512 runs as avx2 on a CPU without it
SPECIAL_M = [1 << 30, 3 << 29, (1 << 31) - 1, (1 << 30) + 1, 0, 1 << 16, (1 << 16) - 1, 3]


def reference(acc, channels, parts, m, shift, z_out, lo, hi, bias, z_in, dtype):
    """The definition: wrap32(Σ parts + bias), then clip(z_out + MBQM(sat32(t − z_in)), lo, hi)."""
    a = acc.astype(np.int64).reshape(acc.shape[0], parts, channels).sum(axis=1)
    if bias.size:
        a = a + bias.astype(np.int64)
    t = a.astype(np.uint32).astype(np.int32).astype(np.int64)  # nn.bias_add wraps like int32
    axis = 1 if m.size > 1 else None
    y = quant.multiply_by_quantized_multiplier(t - z_in, m, shift, axis=axis).astype(np.int64) + z_out
    return np.clip(y, lo, hi).astype(dtype)


def accumulators(rng, rows, width):
    """A mix of small values, the full int32 range and the extremes."""
    kind = rng.integers(0, 4, size=(rows, width))
    small = rng.integers(-5000, 5000, size=(rows, width))
    full = rng.integers(-(1 << 31), 1 << 31, size=(rows, width))
    edge = rng.choice(
        np.array([-(1 << 31), -(1 << 31) + 1, -1, 0, 1, (1 << 31) - 2, (1 << 31) - 1]), size=(rows, width)
    )
    mid = rng.integers(-(1 << 20), 1 << 20, size=(rows, width))
    return np.choose(kind, [small, full, edge, mid]).astype(np.int32)


def multipliers(rng, n):
    m = rng.integers(1 << 30, 1 << 31, size=n)
    special = rng.random(n) < 0.4
    m[special] = rng.choice(np.array(SPECIAL_M), size=int(special.sum()))
    shift = rng.integers(-31, 32, size=n)
    realistic = rng.random(n) < 0.5
    shift[realistic] = rng.integers(-12, 2, size=int(realistic.sum()))
    shift[m == 0] = 0
    return m.astype(np.int32), shift.astype(np.int32)


@pytest.mark.parametrize("kernel", KERNELS)
def test_random_blocks_match_accel_quant(kernel):
    p = probe()
    rng = np.random.default_rng(7 + KERNELS.index(kernel))
    checked = 0
    for case in range(120):
        channels = int(rng.choice([1, 3, 7, 8, 9, 16, 19, 32, 64, 67]))
        parts = int(rng.choice([1, 1, 2, 3]))
        rows = int(rng.integers(1, 40))
        per_channel = bool(rng.random() < 0.6)
        dtype = np.uint8 if case % 2 else np.int8
        lo, hi = quant.dtype_range(dtype)
        z_out = int(rng.integers(lo, hi + 1))
        if rng.random() < 0.3:  # a fused relu / clip narrows the range
            lo = max(lo, z_out - int(rng.integers(0, 3)))
            hi = min(hi, lo + int(rng.integers(0, 200)))
            hi = max(hi, lo)
        m, shift = multipliers(rng, channels if per_channel else 1)
        bias = (
            rng.integers(-(1 << 31), 1 << 31, size=channels).astype(np.int32)
            if rng.random() < 0.5
            else np.zeros(0, np.int32)
        )
        z_in = int(rng.choice([0, 0, 1, -3, 1 << 20, -(1 << 31), (1 << 31) - 1]))
        acc = accumulators(rng, rows, channels * parts)
        got = p.requantize(acc, channels, parts, m, shift, z_out, lo, hi, bias, z_in, np.dtype(dtype).name, kernel)
        want = reference(acc, channels, parts, m, shift, z_out, lo, hi, bias, z_in, dtype)
        assert got.dtype == want.dtype
        bad = np.argwhere(got != want)
        assert bad.size == 0, (
            f"case {case}: {len(bad)} mismatches, first at {bad[0]}: {got[tuple(bad[0])]} != {want[tuple(bad[0])]}"
        )
        checked += got.size
    assert checked > 10_000


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_every_shift_and_tie(kernel, dtype):
    """Ties (x·m an odd multiple of 2^(n−1)) round away from zero at every shift; ±2^31 saturate."""
    p = probe()
    lo, hi = quant.dtype_range(dtype)
    z_out = 3 if dtype == np.uint8 else -2
    shifts = np.arange(-31, 32, dtype=np.int32)
    channels = shifts.size
    for m0 in [*SPECIAL_M[:4], 1 << 16, (1 << 16) - 1, 3]:  # m < 2^16 with shift > 0: the general kernel
        m = np.full(channels, m0, np.int32)
        xs = [np.arange(-64, 65), [-(1 << 31), -(1 << 31) + 1, (1 << 31) - 1, 1 << 30, -(1 << 30), 12345, -12345]]
        x = np.concatenate([np.asarray(v, np.int64) for v in xs]).astype(np.int32)
        acc = np.repeat(x[:, None], channels, axis=1)
        got = p.requantize(
            acc, channels, 1, m, shifts, z_out, lo, hi, np.zeros(0, np.int32), 0, np.dtype(dtype).name, kernel
        )
        want = reference(acc, channels, 1, m, shifts, z_out, lo, hi, np.zeros(0, np.int32), 0, dtype)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel", KERNELS)
def test_fast_kernel_cases(kernel):
    """Shift ≤ 0, or shift > 0 with m = 0 or m ≥ 2^16 (the cases of the fast AVX2 kernel: blocks of
    32 and 8 channels, then a tail): ties, ±2^31, m = 0, 2^16 and 2^31 − 1, per-channel and
    per-tensor, bias, z_in, parts, narrowed ranges."""
    p = probe()
    rng = np.random.default_rng(11 + KERNELS.index(kernel))
    ties = np.concatenate([np.arange(-70, 71), [-(1 << 31), -(1 << 31) + 1, (1 << 31) - 1, 1 << 30, -(1 << 30)]])
    for case in range(60):
        channels = int(rng.choice([8, 16, 32, 40, 67, 96, 104, 144]))
        parts = int(rng.choice([1, 1, 2]))
        per_channel = case % 3 != 0
        dtype = np.uint8 if case % 2 else np.int8
        lo, hi = quant.dtype_range(dtype)
        z_out = int(rng.integers(lo, hi + 1))
        if case % 4 == 1:
            lo = max(lo, z_out - int(rng.integers(0, 3)))
            hi = max(lo, min(hi, lo + int(rng.integers(0, 200))))
        n = channels if per_channel else 1
        m = rng.integers(1 << 30, 1 << 31, size=n)
        special = rng.random(n) < 0.3
        m[special] = rng.choice(np.array(SPECIAL_M[:6]), size=int(special.sum()))
        m = m.astype(np.int32)
        shift = rng.integers(-31, 1 if case % 3 else 32, size=n).astype(np.int32)
        if per_channel and case < 8:
            shift = np.resize(np.arange(-31, 32, dtype=np.int32), n)
        bias = (
            rng.integers(-(1 << 31), 1 << 31, size=channels).astype(np.int32)
            if case % 5 == 2
            else np.zeros(0, np.int32)
        )
        z_in = int(rng.choice([0, 0, 0, 7, -(1 << 31), (1 << 31) - 1]))
        rows = 100
        acc = accumulators(rng, rows, channels * parts)
        if case % 2 == 0 and parts == 1:  # x·m an odd multiple of 2^(n−1) for small x: every tie
            acc[:60] = rng.choice(ties, size=(60, channels))
        got = p.requantize(acc, channels, parts, m, shift, z_out, lo, hi, bias, z_in, np.dtype(dtype).name, kernel)
        want = reference(acc, channels, parts, m, shift, z_out, lo, hi, bias, z_in, dtype)
        bad = np.argwhere(got != want)
        assert bad.size == 0, f"case {case}: {len(bad)} mismatches, first at {bad[0]}"


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_accumulators_at_every_rounding_step(kernel, dtype):
    """Realistic per-channel multipliers (1e-5 to 0.5, as quantize_multiplier makes them) and, for
    every output level of every channel, the accumulators just below, at and just above the
    step to the next level, exact ties among them (m = 2^30): the float32 kernel settles most
    lanes in float32 and must hand each one it cannot settle to the definition. Rows and
    channels leave tails of the four-row and 16-channel steps; two parts; bias; narrowed range."""
    p = probe()
    rng = np.random.default_rng(23 + KERNELS.index(kernel))
    lo, hi = quant.dtype_range(dtype)
    for parts, channels, narrowed in ((1, 43, False), (2, 35, True)):
        reals = np.exp(rng.uniform(np.log(1e-5), np.log(0.5), size=channels))
        pairs = [quant.quantize_multiplier(float(r)) for r in reals]
        m = np.array([mm for mm, _ in pairs], np.int32)
        shift = np.array([sh for _, sh in pairs], np.int32)
        m[:5], shift[:5] = 1 << 30, np.arange(-14, -9)  # M = 2^(shift - 1): t * M lands on ties
        z_out = int(rng.integers(lo, hi + 1))
        r_lo, r_hi = (max(lo, z_out), min(hi, z_out + 100)) if narrowed else (lo, hi)
        bias = rng.integers(-3000, 3000, size=channels).astype(np.int32)
        real = m.astype(np.float64) * np.exp2(shift.astype(np.float64) - 31)
        levels = np.arange(lo - z_out - 1, hi - z_out + 2, dtype=np.float64)[:, None]
        step = np.floor((levels + 0.5) / real).astype(np.int64)  # t * M just below each half
        t = np.concatenate([step + d for d in (-1, 0, 1, 2)])  # rows: 4 x (levels + 3), not a multiple of 4
        t = np.clip(t - bias, -(1 << 31), (1 << 31) - 1)
        acc = np.zeros((t.shape[0], parts * channels), np.int64)
        acc[:, :channels] = t
        if parts == 2:  # the same sum split over two parts
            half = t // 2
            acc[:, :channels], acc[:, channels:] = half, t - half
        acc = acc.astype(np.int32)
        got = p.requantize(acc, channels, parts, m, shift, z_out, r_lo, r_hi, bias, 0, np.dtype(dtype).name, kernel)
        want = reference(acc, channels, parts, m, shift, z_out, r_lo, r_hi, bias, 0, dtype)
        bad = np.argwhere(got != want)
        assert bad.size == 0, f"{len(bad)} mismatches, first at {bad[0]}: {got[tuple(bad[0])]} != {want[tuple(bad[0])]}"


def test_int32_output_and_realistic_scales():
    """from float32 scales as a conv's requantize sees them: per-channel s_x·s_w[c] / s_out, vs quant.requantize."""
    p = probe()
    rng = np.random.default_rng(3)
    channels, rows = 24, 500
    acc_scale = (np.float32(0.02) * rng.uniform(0.001, 0.05, channels).astype(np.float32)).astype(np.float32)
    out_scale = np.float32(0.05)
    m, shift = quant.quantize_multiplier(acc_scale.astype(np.float64) / np.float64(out_scale))
    acc = rng.integers(-200_000, 200_000, size=(rows, channels)).astype(np.int32)
    for dtype, z in ((np.uint8, 128), (np.int8, -5)):
        lo, hi = quant.dtype_range(dtype)
        want = quant.requantize(acc, acc_scale, 0, out_scale, z, dtype, axis=1)
        for kernel in KERNELS:
            got = p.requantize(
                acc, channels, 1, m, shift, z, lo, hi, np.zeros(0, np.int32), 0, np.dtype(dtype).name, kernel
            )
            np.testing.assert_array_equal(got, want)
    # int32 output: the portable kernel, same definition
    got = p.requantize(
        acc, channels, 1, m, shift, 0, -(1 << 31), (1 << 31) - 1, np.zeros(0, np.int32), 0, "int32", "avx2"
    )
    np.testing.assert_array_equal(got, quant.multiply_by_quantized_multiplier(acc, m, shift, axis=1))


def test_refuses_bad_parameters():
    p = probe()
    acc = np.zeros((2, 4), np.int32)
    one = np.ones(1, np.int32) << 30
    with pytest.raises(ValueError, match="multipliers for 4 channels"):
        p.requantize(
            acc, 4, 1, np.ones(3, np.int32), np.zeros(3, np.int32), 0, 0, 255, np.zeros(0, np.int32), 0, "uint8", "avx2"
        )
    with pytest.raises(ValueError, match="invalid fixed-point multiplier"):
        p.requantize(acc, 4, 1, one, np.array([40], np.int32), 0, 0, 255, np.zeros(0, np.int32), 0, "uint8", "avx2")
    with pytest.raises(ValueError, match="bias values"):
        p.requantize(acc, 4, 1, one, np.zeros(1, np.int32), 0, 0, 255, np.zeros(3, np.int32), 0, "uint8", "avx2")


def test_kernel_of_this_cpu_is_reported():
    assert probe().requantize_isa() in ("portable", "avx2", "avx512")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_add_table_is_quantized_add_on_every_pair(kernel, dtype):
    """quant::AddTable against accel.quant.quantized_add on all 65,536 pairs of bytes (then a tail of 7),
    on its float64 formula (scales as a calibration leaves them) and on its table (scales whose sums
    fall on ties of the real numbers, 5/6 and 37/60 of the output's, where the formula would round
    a few pairs the other way and the create-time check turns it down)."""
    p = probe()
    rng = np.random.default_rng(11)
    info = np.iinfo(dtype)
    values = np.arange(256, dtype=np.uint8).view(dtype)
    a = np.repeat(values, 256)
    b = np.tile(values, 256)
    a = np.concatenate([a, a[:7]])  # 65,543 elements: 16 and 8 do not divide them
    b = np.concatenate([b, b[-7:]])
    vector = kernel != "portable" and p.requantize_isa() != "portable"
    cases = (
        (0.05, 0.02, 0.07, info.min, info.max, None, vector),
        (0.3, 0.004, 0.1, 0, info.max, None, vector),
        (0.05, 0.037, 0.06, info.min, info.max, [3, 120, 77], False),
    )
    for s_a, s_b, s_out, lo, hi, zero, formula in cases:
        z = (
            [int(v) for v in rng.integers(info.min, info.max + 1, size=3)]
            if zero is None
            else [v + info.min for v in zero]
        )
        z[2] = max(z[2], lo)
        (ma, sa), (mb, sb), (mo, so) = quant.add_multipliers(s_a, s_b, s_out)
        params = (dtype == "int8", [ma, mb, mo], [sa, sb, so], z, quant.ADD_LEFT_SHIFT, lo, hi)
        assert p.add_uses_formula(*params, kernel) == formula
        got = p.add_table(
            dtype == "int8",
            [ma, mb, mo],
            [sa, sb, so],
            z,
            quant.ADD_LEFT_SHIFT,
            lo,
            hi,
            a.view(np.uint8),
            b.view(np.uint8),
            kernel,
        ).view(dtype)
        want = np.clip(quant.quantized_add(a, s_a, z[0], b, s_b, z[1], s_out, z[2], dtype), lo, hi)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_quantizer_is_the_definition(kernel, dtype):
    """quant::Quantizer against accel.quant.Quantizer: ties of x / s at every half, values past the range,
    NaN, ±Inf, -0.0, denormals, float32 extremes, and a tail 16 and 8 do not divide."""
    p = probe()
    rng = np.random.default_rng(5)
    info = np.finfo(np.float32)
    for scale, zp in ((0.02, 3 if dtype == "uint8" else -7), (1.0, 0 if dtype == "uint8" else -128), (0.0039215689, 0)):
        s = np.float32(scale)
        halves = (np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)) * s  # x / s near every tie
        edges = np.array(
            [np.nan, np.inf, -np.inf, -0.0, 0.0, info.tiny / 2, -info.tiny, info.max, info.min], np.float32
        )
        x = np.concatenate(
            [halves, np.nextafter(halves, np.inf), edges, rng.standard_normal(1003).astype(np.float32) * 3]
        )
        got = p.quantizer(x, scale, zp, dtype, kernel).view(dtype)
        want = quant.Quantizer(s, zp, dtype).exact(x)
        np.testing.assert_array_equal(got, want)
