"""accel.quant against an independent scalar definition (Python ints, explicit truncation).

The vectorized numpy arithmetic in accel.quant is the definition backends must
match bit for bit; here it is re-derived one element at a time with Python's
unbounded integers and exact fractions, and compared over random sweeps and
the edge cases where fixed-point code usually goes wrong.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest

from accel import quant
from accel.errors import AccelError
from accel.quant import INT32_MAX, INT32_MIN, QuantizationError

RNG_SEED = 20240607
TWO31 = 1 << 31


# -- the scalar reference -----------------------------------------------------------


def trunc_div(n: int, d: int) -> int:
    """n / d truncated toward zero (Python's // floors, so work on magnitudes)."""
    q = abs(n) // abs(d)
    return q if (n >= 0) == (d > 0) else -q


def ref_srdhm(a: int, b: int) -> int:
    if a == INT32_MIN and b == INT32_MIN:
        return INT32_MAX
    p = a * b
    nudge = (1 << 30) if p >= 0 else 1 - (1 << 30)
    return trunc_div(p + nudge, TWO31)


def ref_rdbpot(x: int, n: int) -> int:
    """x / 2^n rounded to nearest, ties away from zero."""
    assert 0 <= n <= 31
    q, r = divmod(abs(x), 1 << n)
    if 2 * r >= (1 << n) and n > 0:
        q += 1
    return q if x >= 0 else -q


def clamp(v: int, lo: int, hi: int) -> int:
    return lo if v < lo else hi if v > hi else v


def ref_mbqm(x: int, m: int, shift: int) -> int:
    left, right = max(shift, 0), max(-shift, 0)
    return ref_rdbpot(ref_srdhm(clamp(x * (1 << left), INT32_MIN, INT32_MAX), m), right)


def ref_quantize_multiplier(real: float) -> tuple[int, int]:
    f = Fraction(real)
    e = 0
    while f >= Fraction(2) ** e:
        e += 1
    while f < Fraction(2) ** (e - 1):
        e -= 1
    # now 2^(e-1) <= f < 2^e, so f·2^(31-e) is in [2^30, 2^31)
    m = math.floor(f * Fraction(2) ** (31 - e) + Fraction(1, 2))
    if m == TWO31:
        m, e = 1 << 30, e + 1
    if e < -31:
        return 0, 0
    assert e <= 31
    return m, e


def ref_requantize(x: int, s_in: float, z_in: int, s_out: float, z_out: int, lo: int, hi: int) -> int:
    m, shift = ref_quantize_multiplier(float(s_in) / float(s_out))
    return clamp(z_out + ref_mbqm(clamp(x - z_in, INT32_MIN, INT32_MAX), m, shift), lo, hi)


def f32(v: float) -> float:
    """Round a Python float to the nearest float32 (ties to even), as a Python float."""
    return struct.unpack("f", struct.pack("f", v))[0]


RANGES = {"uint8": (0, 255), "int8": (-128, 127), "int32": (INT32_MIN, INT32_MAX)}


# -- helpers for random data -------------------------------------------------------


def random_int32(rng: np.random.Generator, n: int) -> np.ndarray:
    """A mix of full-range, small and boundary int32 values."""
    full = rng.integers(INT32_MIN, INT32_MAX, n, endpoint=True, dtype=np.int64)
    small = rng.integers(-70000, 70000, n, dtype=np.int64)
    edges = np.array([INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX - 1, INT32_MAX], dtype=np.int64)
    pick = rng.integers(0, 3, n)
    out = np.where(pick == 0, full, small)
    out = np.where(pick == 2, rng.choice(edges, n), out)
    return out.astype(np.int32)


def random_multipliers(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.integers(1 << 30, TWO31, n, dtype=np.int64)
    m[: n // 20] = 1 << 30
    m[n // 20 : n // 10] = TWO31 - 1
    return rng.permutation(m).astype(np.int32)


# -- SRDHM / RDBPOT / MBQM ---------------------------------------------------------


def test_srdhm_random_sweep() -> None:
    rng = np.random.default_rng(RNG_SEED)
    a = random_int32(rng, 60_000)
    b = np.concatenate([random_multipliers(rng, 30_000), random_int32(rng, 30_000)])
    got = quant.saturating_rounding_doubling_high_mul(a, b)
    assert got.dtype == np.int32
    want = [ref_srdhm(int(x), int(y)) for x, y in zip(a, b, strict=True)]
    assert got.tolist() == want


def test_srdhm_edges() -> None:
    f = quant.saturating_rounding_doubling_high_mul
    assert int(f(INT32_MIN, INT32_MIN)) == INT32_MAX  # the single overflow case
    assert int(f(INT32_MIN, INT32_MAX)) == -INT32_MAX
    assert int(f(INT32_MAX, INT32_MAX)) == INT32_MAX - 1
    # ties: 2·a·b / 2^32 = ±0.5 → positive rounds up, negative toward zero
    assert int(f(1, 1 << 30)) == 1
    assert int(f(-1, 1 << 30)) == 0
    assert int(f(3, 1 << 30)) == 2  # 1.5 → 2
    assert int(f(-3, 1 << 30)) == -1  # −1.5 → −1
    assert int(f(0, INT32_MIN)) == 0


def test_rdbpot_random_sweep_every_exponent() -> None:
    rng = np.random.default_rng(RNG_SEED + 1)
    x = random_int32(rng, 64_000)
    e = np.tile(np.arange(32), 2000)
    got = quant.rounding_divide_by_pot(x, e)
    assert got.dtype == np.int32
    assert got.tolist() == [ref_rdbpot(int(v), int(n)) for v, n in zip(x, e, strict=True)]


def test_rdbpot_edges() -> None:
    f = quant.rounding_divide_by_pot
    x = np.array([INT32_MIN, -3, -2, -1, 0, 1, 2, 3, INT32_MAX], dtype=np.int32)
    assert f(x, 0).tolist() == x.tolist()
    assert f(x, 1).tolist() == [-(1 << 30), -2, -1, -1, 0, 1, 1, 2, 1 << 30]  # ±0.5, ±1.5 away from zero
    assert f(x, 31).tolist() == [-1, 0, 0, 0, 0, 0, 0, 0, 1]
    assert int(f(-(1 << 30), 31)) == -1  # −0.5 → −1
    assert int(f(1 << 30, 31)) == 1
    assert int(f((1 << 30) - 1, 31)) == 0
    assert int(f(-6, 2)) == -2 and int(f(-5, 2)) == -1 and int(f(6, 2)) == 2
    for bad in (-1, 32):
        with pytest.raises(QuantizationError):
            f(x, bad)


def test_mbqm_random_sweep() -> None:
    rng = np.random.default_rng(RNG_SEED + 2)
    n = 60_000
    x = random_int32(rng, n)
    m = random_multipliers(rng, n)
    shift = rng.integers(-31, 32, n).astype(np.int32)
    shift[: n // 3] = rng.integers(-12, 3, n // 3)  # the usual range of requantize shifts
    got = quant.multiply_by_quantized_multiplier(x, m, shift)
    assert got.dtype == np.int32
    assert got.tolist() == [ref_mbqm(int(a), int(b), int(c)) for a, b, c in zip(x, m, shift, strict=True)]


def test_mbqm_zero_multiplier_and_extremes() -> None:
    x = np.array([INT32_MIN, -5, 0, 7, INT32_MAX], dtype=np.int32)
    assert quant.multiply_by_quantized_multiplier(x, 0, 0).tolist() == [0] * 5
    for m in (1 << 30, TWO31 - 1):
        for shift in (-31, -1, 0, 1, 31):
            got = quant.multiply_by_quantized_multiplier(x, m, shift)
            assert got.tolist() == [ref_mbqm(int(v), m, shift) for v in x]


def test_mbqm_rounds_twice_as_defined() -> None:
    """SRDHM rounds, then RDBPOT rounds again: the definition, not the nearest integer.

    −26 · 0.4 = −10.4, but SRDHM(−26, 0.8·2^31) = round(−20.8) = −21 and
    RDBPOT(−21, 1) = −10.5 → −11. A runtime rounding once would give −10.
    """
    m, shift = quant.quantize_multiplier(0.4)
    assert (int(m), int(shift)) == (1717986918, -1)
    assert quant.multiply_by_quantized_multiplier(np.array([-26, 26]), m, shift).tolist() == [-11, 11]


def test_mbqm_per_channel_axis() -> None:
    rng = np.random.default_rng(RNG_SEED + 3)
    x = random_int32(rng, 2 * 5 * 7 * 3).reshape(2, 5, 7, 3)
    m = random_multipliers(rng, 5)
    shift = rng.integers(-20, 5, 5).astype(np.int32)
    got = quant.multiply_by_quantized_multiplier(x, m, shift, axis=1)
    want = np.empty_like(x)
    for idx in np.ndindex(x.shape):
        c = idx[1]
        want[idx] = ref_mbqm(int(x[idx]), int(m[c]), int(shift[c]))
    np.testing.assert_array_equal(got, want)
    # a negative axis names the same dimension
    np.testing.assert_array_equal(quant.multiply_by_quantized_multiplier(x, m, shift, axis=-3), want)


# -- quantize_multiplier -----------------------------------------------------------


def test_quantize_multiplier_random_matches_exact_reference() -> None:
    rng = np.random.default_rng(RNG_SEED + 4)
    reals = np.exp2(rng.uniform(-40, 31, 20_000)) * rng.uniform(0.5, 1.0, 20_000)
    reals = np.concatenate([reals, np.float32(rng.uniform(1e-4, 1e-2, 5000)).astype(np.float64)])
    m, shift = quant.quantize_multiplier(reals)
    assert m.dtype == np.int32 and shift.dtype == np.int32 and m.shape == reals.shape
    for r, mi, si in zip(reals.tolist(), m.tolist(), shift.tolist(), strict=True):
        assert (mi, si) == ref_quantize_multiplier(r), r
        if mi:
            assert (1 << 30) <= mi < TWO31
            # the encoding is within half a unit of m of the real value
            assert abs(Fraction(mi) * Fraction(2) ** (si - 31) - Fraction(r)) <= Fraction(2) ** (si - 32)


def test_quantize_multiplier_edges() -> None:
    qm = quant.quantize_multiplier
    assert qm(0.5) == (1 << 30, 0)
    assert qm(1.0) == (1 << 30, 1)
    assert qm(2.0) == (1 << 30, 2)
    assert qm((TWO31 - 1) / TWO31) == (TWO31 - 1, 0)
    assert qm(1.0 - 2.0**-40) == (1 << 30, 1)  # m rounds up to 2^31 and carries into the shift
    assert qm(2.0**-32) == (1 << 30, -31)
    assert qm(2.0**-33) == (0, 0)  # |x·M| < 0.5 for all int32 x: the zero multiplier is exact
    assert qm(2.0**30) == (1 << 30, 31)
    m, s = qm(0.75)
    assert isinstance(m, np.int32) and isinstance(s, np.int32)
    for bad in (0.0, -1.0, float("nan"), float("inf"), 2.0**31, 1e300):
        with pytest.raises(QuantizationError):
            qm(bad)
    with pytest.raises(AccelError):
        qm(np.array([0.5, 0.0, 0.25]))


def test_zero_multiplier_is_the_correctly_rounded_product() -> None:
    m, shift = quant.quantize_multiplier(2.0**-32 * 0.999)
    x = np.array([INT32_MIN, INT32_MAX, 12345], dtype=np.int32)
    assert quant.multiply_by_quantized_multiplier(x, m, shift).tolist() == [0, 0, 0]


# -- requantize --------------------------------------------------------------------


@pytest.mark.parametrize("out_dtype", ["uint8", "int8", "int32"])
def test_requantize_matches_scalar_reference(out_dtype: str) -> None:
    rng = np.random.default_rng(RNG_SEED + 5)
    lo, hi = RANGES[out_dtype]
    for _ in range(8):
        s_in = float(np.float32(10 ** rng.uniform(-6, 0)))
        s_out = float(np.float32(10 ** rng.uniform(-3, 0)))
        z_in = int(rng.integers(-100, 100))
        z_out = int(rng.integers(lo, hi, endpoint=True)) if out_dtype != "int32" else int(rng.integers(-50, 50))
        x = random_int32(rng, 3000)
        got = quant.requantize(x, s_in, z_in, s_out, z_out, out_dtype)
        assert got.dtype == np.dtype(out_dtype)
        want = [ref_requantize(int(v), s_in, z_in, s_out, z_out, lo, hi) for v in x]
        assert got.tolist() == want


def test_requantize_per_channel() -> None:
    rng = np.random.default_rng(RNG_SEED + 6)
    x = rng.integers(-40000, 40000, (2, 3, 4, 6)).astype(np.int32)
    s_in = np.float32(10 ** rng.uniform(-5, -2, 6))
    z_in = rng.integers(-5, 5, 6)
    got = quant.requantize(x, s_in, z_in, 0.05, 3, "int8", axis=3)
    want = np.empty(x.shape, dtype=np.int8)
    for idx in np.ndindex(x.shape):
        c = idx[3]
        want[idx] = ref_requantize(int(x[idx]), float(s_in[c]), int(z_in[c]), float(np.float32(0.05)), 3, -128, 127)
    np.testing.assert_array_equal(got, want)


def test_requantize_within_one_lsb_of_real() -> None:
    rng = np.random.default_rng(RNG_SEED + 7)
    worst, exact, total = 0, 0, 0
    for _ in range(40):
        s_in = np.float32(10 ** rng.uniform(-6, 1))
        s_out = np.float32(10 ** rng.uniform(-3, 0))
        z_in = int(rng.integers(-20, 20))
        z_out = int(rng.integers(0, 256))
        # inputs whose real result lands mostly inside the uint8 range
        span = max(1, int(300 * float(s_out) / float(s_in)))
        x = (rng.integers(-span, span, 5000) + z_in).clip(INT32_MIN, INT32_MAX).astype(np.int32)
        got = quant.requantize(x, s_in, z_in, s_out, z_out, "uint8").astype(np.int64)
        real = z_out + (x.astype(np.float64) - z_in) * (float(s_in) / float(s_out))
        want = np.clip(np.round(real), 0, 255)
        err = np.abs(got - want)
        worst = max(worst, int(err.max()))
        exact += int((err == 0).sum())
        total += err.size
    assert worst <= 1
    assert exact / total > 0.99


# -- qnn.add / qnn.mul arithmetic ---------------------------------------------------


def ref_add(a: int, s_a: float, z_a: int, b: int, s_b: float, z_b: int, s_o: float, z_o: int, lo: int, hi: int) -> int:
    t = 2.0 * max(s_a, s_b)
    ma, sa = ref_quantize_multiplier(s_a / t)
    mb, sb = ref_quantize_multiplier(s_b / t)
    mo, so = ref_quantize_multiplier(t / ((1 << 20) * s_o))
    a2 = ref_mbqm(clamp((a - z_a) << 20, INT32_MIN, INT32_MAX), ma, sa)
    b2 = ref_mbqm(clamp((b - z_b) << 20, INT32_MIN, INT32_MAX), mb, sb)
    return clamp(z_o + ref_mbqm(clamp(a2 + b2, INT32_MIN, INT32_MAX), mo, so), lo, hi)


def ref_mul(a: int, s_a: float, z_a: int, b: int, s_b: float, z_b: int, s_o: float, z_o: int, lo: int, hi: int) -> int:
    m, shift = ref_quantize_multiplier(s_a * s_b / s_o)
    return clamp(z_o + ref_mbqm(clamp((a - z_a) * (b - z_b), INT32_MIN, INT32_MAX), m, shift), lo, hi)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("which", ["add", "mul"])
def test_add_mul_match_scalar_reference_and_real(dtype: str, which: str) -> None:
    rng = np.random.default_rng(RNG_SEED + 8)
    lo, hi = RANGES[dtype]
    vec = quant.quantized_add if which == "add" else quant.quantized_mul
    ref = ref_add if which == "add" else ref_mul
    worst = 0
    for _ in range(6):
        s_a, s_b = (float(np.float32(10 ** rng.uniform(-3, 0))) for _ in range(2))
        s_o = float(np.float32((s_a + s_b) if which == "add" else s_a * s_b * 128 * rng.uniform(0.5, 2)))
        z_a, z_b, z_o = (int(rng.integers(lo, hi, endpoint=True)) for _ in range(3))
        a = rng.integers(lo, hi, (40, 50), endpoint=True).astype(dtype)
        b = rng.integers(lo, hi, (1, 50), endpoint=True).astype(dtype)  # broadcasts
        got = vec(a, s_a, z_a, b, s_b, z_b, s_o, z_o, dtype)
        assert got.dtype == np.dtype(dtype) and got.shape == (40, 50)
        bb = np.broadcast_to(b, a.shape)
        want = [
            ref(int(x), s_a, z_a, int(y), s_b, z_b, s_o, z_o, lo, hi)
            for x, y in zip(a.ravel(), bb.ravel(), strict=True)
        ]
        assert got.ravel().tolist() == want
        da, db = (a.astype(np.float64) - z_a) * s_a, (bb.astype(np.float64) - z_b) * s_b
        real = (da + db if which == "add" else da * db) / s_o + z_o
        worst = max(worst, int(np.abs(got.astype(np.int64) - np.clip(np.round(real), lo, hi)).max()))
    assert worst <= 1


# -- quantize / dequantize ---------------------------------------------------------


def ref_quantize(x: float, s: float, z: int, lo: int, hi: int) -> int:
    if math.isnan(x):
        return clamp(z, lo, hi)
    q = f32(x / s)  # float32 division = exact quotient rounded once to float32
    if math.isinf(q):
        return hi if q > 0 else lo
    return clamp(round(q) + z, lo, hi)  # Python's round() is half to even


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32"])
def test_quantize_matches_scalar_reference(dtype: str) -> None:
    rng = np.random.default_rng(RNG_SEED + 9)
    lo, hi = RANGES[dtype]
    s = float(np.float32(0.037))
    z = {"uint8": 131, "int8": -7, "int32": 1000}[dtype]
    x = np.float32(rng.normal(0, 4, 20_000))
    halves = np.float32((np.arange(-40, 40) + 0.5) * s)  # many exact ties after division
    special = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 0.0, -0.0], dtype=np.float32)
    x = np.concatenate([x, halves, special])
    got = quant.quantize(x, s, z, dtype)
    assert got.dtype == np.dtype(dtype)
    assert got.tolist() == [ref_quantize(float(v), s, z, lo, hi) for v in x]


def test_quantize_ties_to_even_and_per_axis() -> None:
    ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5], dtype=np.float32)
    assert quant.quantize(ties, 1.0, 0, "int8").tolist() == [0, 2, 2, 0, -2]
    rng = np.random.default_rng(RNG_SEED + 10)
    x = np.float32(rng.normal(0, 2, (3, 4, 5)))
    s = np.array([0.01, 0.02, 0.05, 0.1], dtype=np.float32)
    z = np.array([0, 10, 250, 128])
    got = quant.quantize(x, s, z, "uint8", axis=1)
    want = np.empty(x.shape, dtype=np.uint8)
    for idx in np.ndindex(x.shape):
        c = idx[1]
        want[idx] = ref_quantize(float(x[idx]), float(s[c]), int(z[c]), 0, 255)
    np.testing.assert_array_equal(got, want)


def test_dequantize_matches_scalar_reference() -> None:
    rng = np.random.default_rng(RNG_SEED + 11)
    q = rng.integers(-128, 128, (4, 3, 5)).astype(np.int8)
    s = np.array([0.013, 0.5, 7e-4], dtype=np.float32)
    z = np.array([-3, 0, 100])
    got = quant.dequantize(q, s, z, axis=1)
    assert got.dtype == np.float32
    want = np.empty(q.shape, dtype=np.float32)
    for idx in np.ndindex(q.shape):
        c = idx[1]
        want[idx] = f32(float(int(q[idx]) - int(z[c])) * float(s[c]))
    np.testing.assert_array_equal(got, want)
    big = np.array([INT32_MAX, INT32_MIN], dtype=np.int32)
    assert quant.dequantize(big, 1.0, 0).tolist() == [f32(float(INT32_MAX)), float(INT32_MIN)]


def test_saturate_and_bad_dtype() -> None:
    assert quant.saturate(np.array([-300, 5, 300]), "uint8").tolist() == [0, 5, 255]
    assert quant.saturate(np.array([-300, 5, 300]), "int8").tolist() == [-128, 5, 127]
    with pytest.raises(QuantizationError):
        quant.dtype_range("float32")
