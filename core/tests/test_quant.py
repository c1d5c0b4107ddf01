"""accel.quant against an independent scalar definition (Python ints and exact fractions).

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


def clamp(v: int, lo: int, hi: int) -> int:
    return lo if v < lo else hi if v > hi else v


def round_half_away(f: Fraction) -> int:
    """The integer nearest to ``f``; exact halves go away from zero."""
    q, r = divmod(abs(f.numerator), f.denominator)
    if 2 * r >= f.denominator:
        q += 1
    return q if f >= 0 else -q


def ref_mbqm(x: int, m: int, shift: int) -> int:
    """sat32 of ``sat32(x) · m / 2^(31 − shift)`` rounded once, ties away from zero."""
    assert 0 <= m < TWO31 and -31 <= shift <= 31
    x = clamp(x, INT32_MIN, INT32_MAX)
    return clamp(round_half_away(Fraction(x * m, 1 << (31 - shift))), INT32_MIN, INT32_MAX)


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


# -- MBQM ---------------------------------------------------------------------------


def test_mbqm_random_sweep() -> None:
    rng = np.random.default_rng(RNG_SEED + 2)
    n = 60_000
    x = random_int32(rng, n).astype(np.int64)
    x[: n // 50] = rng.integers(-(1 << 40), 1 << 40, n // 50)  # beyond int32: saturated before the multiply
    m = random_multipliers(rng, n)
    m[: n // 10] = rng.integers(0, TWO31, n // 10)  # raw m below 2^30 is valid too
    shift = rng.integers(-31, 32, n).astype(np.int32)
    shift[: n // 3] = rng.integers(-12, 3, n // 3)  # the usual range of requantize shifts
    perm = rng.permutation(n)
    x, m, shift = x[perm], m[rng.permutation(n)], shift[rng.permutation(n)]
    got = quant.multiply_by_quantized_multiplier(x, m, shift)
    assert got.dtype == np.int32
    assert got.tolist() == [ref_mbqm(int(a), int(b), int(c)) for a, b, c in zip(x, m, shift, strict=True)]
    # the sweep reaches both saturation limits
    assert {INT32_MIN, INT32_MAX} <= set(got.tolist())


def test_mbqm_single_rounding_not_gemmlowp() -> None:
    """−26 · 0.4 = −10.4 rounds to −10 (gemmlowp's SRDHM then RDBPOT would give −11)."""
    m, shift = quant.quantize_multiplier(0.4)
    assert (int(m), int(shift)) == (1717986918, -1)
    assert quant.multiply_by_quantized_multiplier(np.array([-26, 26]), m, shift).tolist() == [-10, 10]
    # 0.4·x for x = 1..1000 is never a tie and M_q is 0.4 to 2^-33: always the nearest integer
    x = np.arange(-1000, 1001)
    want = [round_half_away(Fraction(2, 5) * int(v)) for v in x]
    assert quant.multiply_by_quantized_multiplier(x, m, shift).tolist() == want


def test_mbqm_exact_ties_round_away_from_zero() -> None:
    f = quant.multiply_by_quantized_multiplier
    half = 1 << 30  # m · 2^(0 − 31) = 0.5
    x = np.array([-7, -5, -3, -1, 1, 3, 5, 7], dtype=np.int32)
    assert f(x, half, 0).tolist() == [-4, -3, -2, -1, 1, 2, 3, 4]  # ±0.5, ±1.5, ... away from zero
    assert f(x, half, -1).tolist() == [-2, -1, -1, 0, 0, 1, 1, 2]  # ±0.25, ±0.75, ±1.25, ±1.75
    # one unit of p short of a tie rounds toward zero, at every n
    for n in (1, 2, 17, 31, 40, 62):
        shift = 31 - n
        for sign in (1, -1):
            tie = 1 << (n - 1)
            if tie <= INT32_MAX:  # x = ±2^(n−1), m = 1: exactly ±0.5
                assert int(f(sign * tie, 1, shift)) == sign
                assert int(f(sign * (tie - 1), 1, shift)) == 0
            # x · m = ±2^(n−1) with m = 2^30 needs x = 2^(n−31)
            if 31 <= n <= 61:
                x1 = 1 << (n - 31)
                assert int(f(sign * x1, 1 << 30, shift)) == sign
                assert int(f(sign * x1, (1 << 30) - 1, shift)) == 0


def test_mbqm_extremes_n0_n62_int32_min() -> None:
    f = quant.multiply_by_quantized_multiplier
    big = TWO31 - 1
    # n = 0 (shift = 31): no rounding, only saturation
    assert f(np.array([0, 1, -1, 3]), 5, 31).tolist() == [0, 5, -5, 15]
    assert f(np.array([INT32_MIN, -1, 1, INT32_MAX]), big, 31).tolist() == [INT32_MIN, -big, big, INT32_MAX]
    assert f(np.array([2, -2, -3]), 1 << 30, 31).tolist() == [INT32_MAX, INT32_MIN, INT32_MIN]  # 2^31 clamps
    assert f(np.array([1, -1]), 1 << 30, 31).tolist() == [1 << 30, -(1 << 30)]
    # n = 62 (shift = −31): |x · M_q| < 1, and p + 2^61 must not overflow int64
    x = np.array([INT32_MIN, INT32_MIN + 1, -(1 << 30), -1, 0, 1, 1 << 30, INT32_MAX])
    assert f(x, 1 << 30, -31).tolist() == [-1, 0, 0, 0, 0, 0, 0, 0]  # −2^61 / 2^62 = −0.5 exactly
    assert f(x, big, -31).tolist() == [-1, -1, 0, 0, 0, 0, 0, 1]
    # INT32_MIN input: its magnitude is not an int32, the int64 product still is exact
    assert int(f(INT32_MIN, 1 << 30, 0)) == -(1 << 30)
    assert int(f(INT32_MIN, big, 0)) == -big
    assert int(f(INT32_MIN, 1 << 30, 1)) == INT32_MIN  # exactly −2^31: representable
    assert int(f(INT32_MIN, big, 1)) == INT32_MIN  # −2^32 + 2: saturated
    assert int(f(INT32_MAX, big, 1)) == INT32_MAX
    for m in (1 << 30, big):
        for shift in (-31, -30, -1, 0, 1, 30, 31):
            got = f(x, m, shift)
            assert got.tolist() == [ref_mbqm(int(v), m, shift) for v in x], (m, shift)


def test_mbqm_saturates_results_beyond_int32() -> None:
    """A positive shift with a big x: the rounded product leaves int32 and clamps, keeping its sign."""
    rng = np.random.default_rng(RNG_SEED + 12)
    x = rng.integers(1 << 20, TWO31, 5000) * rng.choice([-1, 1], 5000)
    m = random_multipliers(rng, 5000)
    shift = rng.integers(12, 32, 5000)
    got = quant.multiply_by_quantized_multiplier(x, m, shift)
    want = [ref_mbqm(int(a), int(b), int(c)) for a, b, c in zip(x, m, shift, strict=True)]
    assert got.tolist() == want
    assert np.all((got == INT32_MAX) == (x > 0)) and np.all((got == INT32_MIN) == (x < 0))
    # at the boundary (16843009 · 255 = 2^32 − 1, and shift 30 halves it):
    f = quant.multiply_by_quantized_multiplier
    assert int(f(16843009, 255, 30)) == INT32_MAX  # 2^31 − 1/2 rounds to 2^31, which clamps
    assert int(f(-16843009, 255, 30)) == INT32_MIN  # −2^31 + 1/2: the tie goes away from zero, onto INT32_MIN
    assert int(f(-16843009, 253, 30)) == -2130640639  # −2130640638.5, an ordinary tie
    assert int(f(-((1 << 32) + 5), 1, 30)) == -(1 << 30)  # x saturates to INT32_MIN before the multiply


def test_mbqm_zero_and_tiny_multipliers() -> None:
    x = np.array([INT32_MIN, -5, 0, 7, INT32_MAX], dtype=np.int32)
    assert quant.multiply_by_quantized_multiplier(x, 0, 0).tolist() == [0] * 5
    rng = np.random.default_rng(RNG_SEED + 13)
    xs = random_int32(rng, 20_000)
    m = rng.integers(0, 1 << 12, 20_000)
    shift = rng.integers(-31, 32, 20_000)
    got = quant.multiply_by_quantized_multiplier(xs, m, shift)
    assert got.tolist() == [ref_mbqm(int(a), int(b), int(c)) for a, b, c in zip(xs, m, shift, strict=True)]
    assert np.count_nonzero(got) > 1000  # not a sweep of zeros


def test_mbqm_refuses_out_of_range_multipliers() -> None:
    f = quant.multiply_by_quantized_multiplier
    for m, shift in ((1 << 30, 32), (1 << 30, -32), (-1, 0), (TWO31, 0)):
        with pytest.raises(QuantizationError, match="shift in"):
            f(np.array([1, 2]), m, shift)
    with pytest.raises(QuantizationError):
        f(np.zeros((2, 3)), np.array([1 << 30, 1 << 30, 1 << 30]), np.array([0, 40, 0]), axis=1)


def test_mbqm_is_the_correctly_rounded_product_of_the_encoded_multiplier() -> None:
    """MBQM(x, quantize_multiplier(M)) = round_half_away(x · M_q) exactly, and within 1 of x · M rounded.

    Where ``x · M`` is farther from a tie than the encoding error ``|x| · |M_q − M|``,
    rounding ``x · M`` and ``x · M_q`` must agree, so the result is then exactly the
    nearest integer to ``x · M`` too.
    """
    rng = np.random.default_rng(RNG_SEED + 14)
    n = 30_000
    reals = np.exp2(rng.uniform(-34, 12, n)) * rng.uniform(1.0, 2.0, n)
    reals[: n // 3] = np.float32(rng.uniform(1e-5, 2.0, n // 3))  # typical s_in / s_out ratios
    m, shift = quant.quantize_multiplier(reals)
    # x such that |x · M| mostly stays inside int32 (saturation is tested separately)
    limit = np.minimum(np.floor((TWO31 - 2) / reals), TWO31 - 1).astype(np.int64)
    x = (rng.uniform(-1, 1, n) * limit).astype(np.int64)
    x[: n // 10] = rng.integers(-300, 300, n // 10)
    got = quant.multiply_by_quantized_multiplier(x, m, shift).tolist()
    agree, small = 0, 0
    for xi, r, mi, si, g in zip(x.tolist(), reals.tolist(), m.tolist(), shift.tolist(), got, strict=True):
        mq = Fraction(mi) * Fraction(2) ** (si - 31)
        assert g == clamp(round_half_away(xi * mq), INT32_MIN, INT32_MAX)
        exact = xi * Fraction(r)
        nearest = round_half_away(exact)
        assert abs(g - nearest) <= 1
        tie_distance = abs(exact - (math.floor(exact) + Fraction(1, 2)))
        if tie_distance > abs(xi) * abs(mq - Fraction(r)):
            assert g == nearest, (xi, r)
        if abs(exact) < 1 << 16:  # the encoding error |x · (M_q − M)| < 2^−15 here: ties are all that is left
            small += 1
            agree += g == nearest
    assert small > n // 4 and agree / small > 0.9999


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


def test_zero_multiplier_encoding_is_the_correctly_rounded_product() -> None:
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
    # one rounding of a 31-bit-exact product: only near-ties (or exact ties, which
    # np.round sends to even) can differ; 200000/200000 match today
    assert exact / total > 0.9995


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


# -- the fast paths against the int64 definition -------------------------------------
#
# Requantizer's float64 path and the pair tables must give the int64 path's bits on
# every input they are taken for. The cases below sit where such shortcuts break:
# exact ties and one unit of p either side of them, products right at the float64
# bound, saturation in both directions and in both clamps, and every layout of the
# per-channel multipliers across block boundaries.


def ref_requantize_fixed(x: int, m: int, shift: int, z_in: int, z_out: int, lo: int, hi: int) -> int:
    return clamp(z_out + ref_mbqm(clamp(x - z_in, INT32_MIN, INT32_MAX), m, shift), lo, hi)


def check_paths(r: quant.Requantizer, x: np.ndarray, *, scalar: bool = False) -> bool:
    """``r(x)`` equals the int64 path (and, with ``scalar``, the Python-int reference); whether float64 was taken."""
    got = r(x)
    want = r.exact(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if scalar:
        lo, hi = RANGES[r.out_dtype.name]
        axis = None if r.axis is None else r.axis % x.ndim
        for idx in np.ndindex(x.shape):
            c = 0 if axis is None else idx[axis]
            m = int(r.m.reshape(-1)[c % r.m.size])
            s = int(r.shift.reshape(-1)[c % r.shift.size])
            z = int(r.z_in.reshape(-1)[c % max(r.z_in.size, 1)]) if r.z_in.size else 0
            assert int(got[idx]) == ref_requantize_fixed(int(x[idx]), m, s, z, r.z_out, lo, hi), (idx, m, s)
    return r.float_exact(x)


def _inverse_mod_pow2(a: int, n: int) -> int:
    return pow(a, -1, 1 << n)


def _multiplier_for(x: int, residue: int, n: int, at_least: int = 1 << 30) -> int:
    """An m in [max(2^30, at_least), 2^31) with ``x · m ≡ residue (mod 2^n)`` (``x`` odd, ``n ≤ 30``)."""
    r = residue * _inverse_mod_pow2(x % (1 << n), n) % (1 << n)
    m = r + ((at_least - r + (1 << n) - 1) >> n << n)
    assert max(1 << 30, at_least) <= m < TWO31 and (x * m - residue) % (1 << n) == 0
    return m


@pytest.mark.parametrize("block", [None, 7, 100])
def test_requantize_float_path_matches_int64_path_random(monkeypatch: pytest.MonkeyPatch, block: int | None) -> None:
    """Random parameters, dtypes and per-channel layouts, also cut into tiny blocks."""
    if block is not None:
        monkeypatch.setattr(quant, "REQUANTIZE_BLOCK", block)
    rng = np.random.default_rng(RNG_SEED + 20 + (block or 0))
    shapes = [(5,), (2, 3, 40), (3, 7, 2), (2, 4, 3, 5), (1, 6, 17, 3), (130,)]
    taken = total = 0
    for i in range(120):
        shape = shapes[i % len(shapes)]
        axis = None if i % 3 == 0 else int(rng.integers(-len(shape), len(shape)))
        c = 1 if axis is None else shape[axis]
        out = ("uint8", "int8", "int32")[i % 3 if i % 7 else 2]
        lo, hi = RANGES[out]
        s_in = np.float32(10 ** rng.uniform(-9, 2, c if axis is not None else ()))
        s_out = np.float32(10 ** rng.uniform(-3, 0))
        z_in = rng.integers(-300, 300, c if axis is not None else ()) * (i % 2)
        z_out = int(rng.choice([lo, 0, hi, int(rng.integers(max(lo, -1000), min(hi, 1000)))]))
        xdt = ("int32", "uint8", "int8", "int64", "int16", "uint32")[i % 6]
        info = np.iinfo(xdt)
        span = int(min(info.max, 2 ** rng.uniform(3, 34)))
        x = rng.integers(max(info.min, -span), min(info.max, span), shape, endpoint=True, dtype=np.int64).astype(xdt)
        try:
            r = quant.Requantizer(s_in, z_in, s_out, z_out, out, axis)
        except QuantizationError:
            continue
        taken += check_paths(r, x, scalar=i % 10 == 0)
        total += 1
    assert total > 100 and taken > total * 0.6


def test_requantize_float_path_ties_and_neighbours_at_the_bound() -> None:
    """x · m one unit of p below, at and above a tie, with |x · m| up to just under 2^52."""
    f = quant.Requantizer.from_multiplier
    for n in (1, 2, 11, 20, 29, 30):
        for x0 in (3, (1 << 21) - 1, 1234567):
            for delta in (-1, 0, 1):
                tie = 1 << (n - 1)
                # m odd-free construction: x0 odd, so any residue is reachable for n <= 30
                m = _multiplier_for(x0, (tie + delta) % (1 << n), n)
                for out, z_out in (("int32", 0), ("int32", 7), ("int8", -128), ("int8", 0), ("uint8", 200)):
                    r = f(m, 31 - n, 0, z_out, out)
                    x = np.array([x0, -x0, x0 - 1, 1 - x0, 0], dtype=np.int32)
                    assert abs(x0) * m < 1 << 52
                    assert check_paths(r, x, scalar=True), (n, x0, delta, out)
    # exact ties for n > 31: m = 2^a · u, x = 2^b · w (u, w odd), a + b = n − 1: x · m / 2^n = u · w / 2
    for n in (31, 35, 40, 43, 50, 51):
        for a, u in ((30, 1), (29, 3), (28, 7)):
            b, m = n - 1 - a, (1 << a) * u
            w_top = (((1 << 52) // m - 2) >> b) - 1 | 1  # the largest odd w keeping |x ± 1| · m < 2^52
            if w_top < 1:
                continue  # x = 2^b alone is past the bound
            w = np.array(sorted({1, 3, w_top} & set(range(1, w_top + 1))), dtype=np.int64)
            x = np.concatenate([w, -w]) << b
            x = np.concatenate([x, x + 1, x - 1]).astype(np.int32)  # the ties, and m units of p either side
            assert (np.abs(x).astype(object) * m).max() < 1 << 52
            r = f(m, 31 - n, 0, 0, "int32")
            assert check_paths(r, x, scalar=True), (n, a)
    # n > 53 (shift < −22): |y| < 1/4, every result is z_out
    for shift in (-23, -30, -31):
        r = f(TWO31 - 1, shift, 0, 5, "int8")
        x = np.array([1 << 21, -(1 << 21), 12345, -1, 0], dtype=np.int32)
        assert check_paths(r, x, scalar=True)
        assert r(x).tolist() == [5] * 5


def test_requantize_float_path_bound_is_needed() -> None:
    """Past 2^53 the float64 product itself rounds: the float path would be wrong, and is not taken.

    x · m ≡ 2^(n−1) − 1 (mod 2^n) is just below a tie; above 2^53 the product rounds
    to an even number, here up onto the tie, which then rounds away from zero.
    """
    n = 24
    x0 = 3 * (1 << 21) + 1
    m = _multiplier_for(x0, (1 << (n - 1)) - 1, n, at_least=-(-(1 << 53) // x0))
    assert x0 * m >= 1 << 53
    r = quant.Requantizer.from_multiplier(m, 31 - n, 0, 0, "int32")
    x = np.array([x0, -x0], dtype=np.int32)
    assert r._float(x).tolist() != r.exact(x).tolist()  # the shortcut really breaks here
    assert not check_paths(r, x, scalar=True)  # ... so the dispatcher keeps the int64 path
    # one below the bound the float path is taken (int32 output: no shortcut for huge inputs)
    x1 = (1 << 52) // (TWO31 - 1)
    r1 = quant.Requantizer.from_multiplier(TWO31 - 1, 31 - n, 0, 0, "int32")
    assert check_paths(r1, np.array([x1, -x1, 5], dtype=np.int32), scalar=True)
    assert not r1.float_exact(np.array([x1 + 1], dtype=np.int32))
    # int64 data is always scanned, whatever the output
    r2 = quant.Requantizer.from_multiplier(TWO31 - 1, 0, 0, 0, "uint8")
    big = np.array([1 << 40, -(1 << 62), 3], dtype=np.int64)
    assert not check_paths(r2, big, scalar=True)


def test_requantize_float_path_saturation() -> None:
    """Both clamps (int32, then the output range after z_out), from both sides, with nonzero zero points."""
    f = quant.Requantizer.from_multiplier
    x = np.array([1 << 20, -(1 << 20), 3, -3, 1, 0, -1, 1000, -1000], dtype=np.int32)
    for m, shift in ((TWO31 - 1, 31), (1 << 30, 31), (1 << 30, 12), (TWO31 - 1, 0), (1 << 30, -3)):
        for out, zs in (
            ("int32", (0, 5, -5, INT32_MAX, INT32_MIN)),
            ("uint8", (0, 1, 128, 254, 255)),
            ("int8", (-128, -1, 0, 1, 127)),
        ):
            for z_out in zs:
                for z_in in (0, 7, -7):
                    assert check_paths(f(m, shift, z_in, z_out, out), x, scalar=True), (m, shift, out, z_out)
    # the int32 clamp comes before z_out: 2^51 saturates to INT32_MAX, then − 5
    r = f(1 << 30, 31, 0, -5, "int32")
    assert r(np.array([1 << 20, -(1 << 20)], dtype=np.int32)).tolist() == [INT32_MAX - 5, INT32_MIN]


def test_requantize_float_path_any_32bit_input_when_saturation_is_certain() -> None:
    """8-bit outputs with shift >= −12 skip the min/max scan: past 2^52 every element saturates."""
    f = quant.Requantizer.from_multiplier
    rng = np.random.default_rng(RNG_SEED + 21)
    edge = np.array(
        [INT32_MIN, INT32_MIN + 1, INT32_MAX, -1, 0, 1, 1 << 21, (1 << 21) + 1, -(1 << 21) - 1, (1 << 22) - 3],
        dtype=np.int64,
    )
    x = np.concatenate([edge, rng.integers(INT32_MIN, INT32_MAX, 2998, endpoint=True)]).astype(np.int32)
    m = np.array([TWO31 - 1, 1 << 30, 1717986918, 1 << 30])
    for shift in (-12, -5, 0, 20):
        for z_in in (0, 100, -100):
            for out, z_out in (("uint8", 0), ("uint8", 131), ("int8", -128), ("int8", 3), ("uint8", 255)):
                # channels along short rows (multipliers per column) and along long rows (per row)
                for xs, axis in ((x.reshape(-1, 4, 1), 1), (x.reshape(-1, 4).T.copy(), 0)):
                    r = f(m, np.full(4, shift), z_in, z_out, out, axis=axis)
                    assert check_paths(r, xs), (shift, z_in, out, z_out)
                    if shift == -12:
                        check_paths(r, xs[:3] if axis == 1 else xs[:, :3], scalar=True)
    # shift −13: 2^(52−44) = 256 is no margin for an 8-bit clamp, so large data is scanned and refused
    r = f(np.array([1 << 30]), np.array([-13]), 0, 0, "int8", axis=0)
    assert not r.float_exact(np.array([1 << 23], dtype=np.int32))
    assert r.float_exact(np.array([1 << 20], dtype=np.int32))
    assert not check_paths(r, np.array([INT32_MAX, INT32_MIN, 5], dtype=np.int32), scalar=True)


def test_requantize_from_multiplier_refuses_bad_encodings() -> None:
    for m, shift in ((1 << 30, 32), (-1, 0), (TWO31, 0)):
        with pytest.raises(QuantizationError, match="shift in"):
            quant.Requantizer.from_multiplier(m, shift, 0, 0, "int8")


# -- pair tables ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("which", ["add", "mul"])
def test_pair_table_lookup_matches_the_definition(dtype: str, which: str) -> None:
    rng = np.random.default_rng(RNG_SEED + 22)
    lo, hi = RANGES[dtype]
    vec = quant.quantized_add if which == "add" else quant.quantized_mul
    for _ in range(3):
        s_a, s_b = (float(np.float32(10 ** rng.uniform(-3, 0))) for _ in range(2))
        s_o = float(np.float32((s_a + s_b) * rng.uniform(0.2, 2) if which == "add" else s_a * s_b * 100))
        z_a, z_b, z_o = (int(rng.integers(lo, hi, endpoint=True)) for _ in range(3))

        def fn(a: np.ndarray, b: np.ndarray, p: tuple = (s_a, z_a, s_b, z_b, s_o, z_o)) -> np.ndarray:
            return vec(a, p[0], p[1], b, p[2], p[3], p[4], p[5], dtype)

        table = quant.pair_table(fn, dtype)
        assert table.shape == (1 << 16,) and table.dtype == np.dtype(dtype)
        # every pair, in an order unrelated to the table's, and broadcasting shapes
        grid = np.arange(256, dtype=np.uint8).view(dtype)
        a = rng.permutation(np.repeat(grid, 256))
        b = rng.permutation(np.tile(grid, 256))
        np.testing.assert_array_equal(quant.lookup_pairs(table, a, b), fn(a, b))
        for sa, sb in (((3, 1, 5), (1, 4, 5)), ((2, 7), ()), ((), (6,)), ((4, 1), (4, 9)), ((), ())):
            xa = rng.integers(lo, hi, sa, endpoint=True).astype(dtype)
            xb = rng.integers(lo, hi, sb, endpoint=True).astype(dtype)
            got = quant.lookup_pairs(table, xa, xb)
            want = fn(xa, xb)
            assert isinstance(got, np.ndarray) and got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    with pytest.raises(QuantizationError, match="8-bit"):
        quant.pair_table(lambda a, b: a, "int32")


# -- bound paths: per-node quantize / dequantize / requantize against the definitions ----
#
# Executors bind a node's Quantizer, Dequantizer and Requantizer to its input type; the
# bound functions take shortcuts (the work dtype instead of float64, float32 instead of
# int64, whole-array float64 on small tensors) only where the values are provably the
# same. Each is compared, bit for bit, with the definition as written (``exact``).


def _quantize_inputs(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Normal data, exact ties of the 0.25 scale, and NaN, ±inf, huge, ±0 and float16's maximum."""
    x = (rng.normal(0, 40, shape)).astype(dtype)
    flat = x.reshape(-1)
    flat[:37] = (np.arange(37) - 18 + 0.5) * 0.25
    big = 65504.0 if dtype == "float16" else 3e38
    flat[37:45] = [np.nan, np.inf, -np.inf, big, -big, 0.0, -0.0, np.nan]
    return x


@pytest.mark.parametrize("in_dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("out_dtype", ["uint8", "int8", "int32"])
def test_bound_quantizer_matches_the_definition(in_dtype: str, out_dtype: str) -> None:
    rng = np.random.default_rng(RNG_SEED + 30)
    lo, hi = RANGES[out_dtype]
    # small arrays and large ones (4096 elements or more) take different clamps
    shapes = (((1, 1, 8, 8), None), ((2, 5, 4, 6), 1), ((3, 50), -1), ((0, 4), None), ((7,), 0), ((2, 3, 40, 40), 1))
    for shape, axis in shapes:
        x = (
            _quantize_inputs(rng, shape, in_dtype)
            if math.prod(shape) >= 45
            else rng.normal(0, 9, shape).astype(in_dtype)
        )
        c = shape[axis] if axis is not None else 1
        # zero points at both ends of the range (NaN then maps onto a bound) and inside it
        for z in (lo, hi, 0 if lo < 0 else 3, int(rng.integers(lo, hi)) if out_dtype != "int32" else 1000):
            s = np.float32(0.25) if axis is None else np.float32(rng.uniform(0.05, 2, c))
            zp = z if axis is None else np.full(c, z)
            q = quant.Quantizer(s, zp, out_dtype, axis)
            bound = q.bind(x.ndim, x.dtype)
            got, want = bound(x), q.exact(x)
            assert got.dtype == want.dtype == np.dtype(out_dtype) and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(quant.quantize(x, s, zp, out_dtype, axis), want)
            # the shortcut is taken where it applies: 8-bit outputs, and any float64 data
            assert (bound == q.exact) == ((out_dtype == "int32" and in_dtype != "float64") or x.ndim == 0)


def test_bound_quantizer_matches_the_scalar_reference_on_the_digits_input() -> None:
    """uint8 with z = 0 (the digits model's input): NaN and negatives meet the 0 bound first."""
    x = np.array([[[[0.5 / 255, 1.5 / 255, -1.0, np.nan, 2.0, 127.5 / 255, 1.0, -0.0]]]], dtype=np.float32)
    s = float(np.float32(1 / 255))
    got = quant.Quantizer(s, 0, "uint8").bind(4, np.float32)(x)
    assert got.reshape(-1).tolist() == [ref_quantize(float(v), s, 0, 0, 255) for v in x.reshape(-1)]


@pytest.mark.parametrize("in_dtype", ["uint8", "int8", "int32", "uint32", "int64", "uint64"])
def test_bound_dequantizer_matches_the_definition(in_dtype: str) -> None:
    rng = np.random.default_rng(RNG_SEED + 31)
    info = np.iinfo(in_dtype)
    for shape, axis in (((1, 512), None), ((2, 5, 4, 6), 1), ((3, 7), -1), ((), None)):
        q = rng.integers(info.min, info.max, shape, endpoint=True, dtype=in_dtype)
        c = shape[axis] if axis is not None else 1
        for z in (0, 3, -100, (1 << 23) + 1, 1 << 40):
            s = np.float32(0.013) if axis is None else np.float32(rng.uniform(1e-4, 2, c))
            zp = z if axis is None else np.arange(c) * z // max(c - 1, 1)
            d = quant.Dequantizer(s, zp, axis)
            got, want = d.bind(q.ndim, q.dtype)(q), d.exact(q)
            assert np.asarray(got).dtype == np.float32 and np.shape(got) == np.shape(want)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(quant.dequantize(q, s, zp, axis), want)


@pytest.mark.parametrize("out_dtype", ["uint8", "int8", "int32"])
def test_bound_requantizer_small_and_blocked_paths_match_int64_path(out_dtype: str) -> None:
    """The whole-array float64 path of small tensors, the blocked one of large tensors, and int64."""
    rng = np.random.default_rng(RNG_SEED + 32)
    lo, hi = RANGES[out_dtype]
    for shape, axis in (
        ((1, 16, 8, 8), 1),
        ((1, 32, 4, 4), 1),
        ((1, 10), None),
        ((1, 96, 14, 14), 1),
        ((2, 7, 7, 40), -1),
    ):
        c = shape[axis] if axis is not None else 1
        acc = rng.integers(-400000, 400000, shape).astype(np.int32)
        acc.reshape(-1)[:4] = [INT32_MIN, INT32_MAX, 0, -1]
        for z_in, z_out in ((0, 0), (7, lo), (-3, hi), (0, (lo + hi) // 2)):
            s_in = np.float32(rng.uniform(1e-5, 1e-3, c)) if axis is not None else np.float32(3e-4)
            r = quant.Requantizer(s_in, np.full(c, z_in) if axis is not None else z_in, 0.05, z_out, out_dtype, axis)
            bound = r.bind(acc.shape, acc.dtype)
            want = r.exact(acc)
            for got in (bound(acc), r._float(acc), r(acc)):
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_array_equal(got, want)
            if math.prod(shape) <= quant.REQUANTIZE_SMALL and out_dtype != "int32":
                assert bound not in (r._float, r.exact, r._dispatch)  # the small path
