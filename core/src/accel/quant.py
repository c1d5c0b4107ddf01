"""Quantized arithmetic: the one definition every kernel and backend runtime follows.

Every step is specified exactly, in integer arithmetic, so that a native (C/C++)
runtime can reproduce it bit for bit. The int64 numpy implementations here follow
the definitions step by step; the faster paths (:class:`Requantizer`'s float64
path, :func:`pair_table` lookups) are taken only where they provably give the
same bits, and the tests compare them with the int64 ones.

Notation: ``INT32_MIN = -2^31``, ``INT32_MAX = 2^31 - 1``; ``sat32(v)`` clamps to
``[INT32_MIN, INT32_MAX]``; ``[c]`` is 1 if ``c`` holds, else 0.

Fixed-point multipliers
    A real multiplier ``M > 0`` is encoded as ``(m, shift)`` with ``m`` a Q31
    int32 in ``[2^30, 2^31)`` and ``M ≈ m · 2^(shift − 31)``
    (:func:`quantize_multiplier`):

    1. ``M = q · 2^e`` with ``q ∈ [0.5, 1)`` (``frexp``, float64);
    2. ``m = floor(q · 2^31 + 0.5)`` (exact in float64); if ``m == 2^31`` then
       ``m = 2^30`` and ``e += 1``; ``shift = e``;
    3. ``shift < −31`` (``M < 2^−32``): encoded as ``(0, 0)``, the zero
       multiplier. For every int32 ``x``, ``|x · M| < 0.5``, so 0 *is* the
       correctly rounded product and the encoding loses nothing;
    4. ``shift > 31`` (``M ≥ ~2^31``, no int32 product can be meaningful): refused
       with :class:`QuantizationError`, as are ``M ≤ 0`` and non-finite ``M``.

    Real multipliers are always computed in float64 from the float32 scales
    stored in :class:`accel.ir.QuantParams` (e.g. ``float64(s_in) / float64(s_out)``).

MBQM(x, m, shift) — multiply by quantized multiplier, int32 → int32, ONE rounding
    ``m`` in ``[0, 2^31)``, ``shift`` in ``[−31, 31]`` (what :func:`quantize_multiplier`
    produces; anything else is refused). With ``p = sat32(x) · m`` (int64, exact:
    ``|p| ≤ 2^31 · (2^31 − 1) < 2^62``) and ``n = 31 − shift`` (``0 ≤ n ≤ 62``)::

        MBQM = sat32((p + 2^(n−1) − [p < 0]) >> n)    if n > 0   (>> arithmetic)
        MBQM = sat32(p)                               if n = 0

    i.e. the exact rational ``x · m · 2^(shift − 31)`` rounded to the nearest
    integer, ties away from zero, then saturated. So MBQM is the correctly
    rounded product ``x · M_q`` with ``M_q = m · 2^(shift − 31)``, exact up to
    the multiplier's 31-bit precision: ``|M_q − M| ≤ 2^−31 · M`` (``m ≠ 0``), so
    ``|MBQM − x · M| ≤ 1/2 + 2^−31 · |x · M|`` short of saturation (the zero
    multiplier too). Extremes: at ``n = 62`` (``shift = −31``) ``p + 2^61``
    still fits int64; at ``n = 0`` (``shift = 31``) nothing is rounded. A
    rounded result outside int32 (a positive shift with a large ``x``: up to
    ``|p| ≈ 2^62`` at ``n = 0``) saturates to INT32_MIN/INT32_MAX; it keeps its
    sign, so any 8-bit output saturates the same way.

    This deliberately departs from gemmlowp/TFLite, which round twice (SRDHM,
    the rounding doubling high multiply to the top 32 bits of ``2·x·m``, then
    RDBPOT, a rounding right shift by ``−shift``): the first rounding leaves the
    second only a few fraction bits for small right shifts, so the result can
    miss the nearest integer (``−26 · 0.4 = −10.4`` gives −11 there, −10 here)
    and, against ONNX Runtime's float rescale, shows as ±1 differences that
    compound through deep nets. DESIGN §8's "rounding doubling high multiply,
    rounding right shift" is realized here as that same high multiply and right
    shift with one combined rounding: a native runtime needs one 32×32→64
    multiply, an add and an arithmetic shift.

requantize(x) = ``sat_out(z_out + MBQM(sat32(x − z_in), m, shift))`` with
``(m, shift) = quantize_multiplier(s_in / s_out)``, per channel when ``s_in``
(and ``z_in``) are per-axis.

qnn.add, 20 bits of headroom (TFLite's uint8 add): ``t = 2 · max(s_a, s_b)``;
``a' = MBQM(sat32((a − z_a) · 2^20), s_a / t)``, likewise ``b'``; result
``sat_out(z_out + MBQM(sat32(a' + b'), t / (2^20 · s_out)))``. (For 8-bit inputs
no sat32 here ever bites: ``|a'|, |b'| < 2^27``.)

qnn.mul: ``sat_out(z_out + MBQM(sat32((a − z_a) · (b − z_b)), s_a · s_b / s_out))``.

quantize (ONNX QuantizeLinear): ``sat_out(round_half_even(x / s) + z)`` with the
division done in float32 for float16/float32 data (float64 for float64 data);
NaN maps to ``z``, ±inf saturates.

dequantize (ONNX DequantizeLinear): ``float32(q − z) · s`` in float32.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from accel.errors import QuantizationError

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1

#: Left shift applied to both inputs of qnn.add before rescaling (headroom bits).
ADD_LEFT_SHIFT = 20

#: Integer dtypes a quantized tensor may have, with their ranges.
QUANT_RANGES: dict[str, tuple[int, int]] = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "int32": (INT32_MIN, INT32_MAX),
}


def dtype_range(dtype: Any) -> tuple[int, int]:
    """(min, max) representable by a quantized dtype (uint8, int8, int32)."""
    name = np.dtype(dtype).name
    try:
        return QUANT_RANGES[name]
    except KeyError:
        raise QuantizationError(f"quantized dtype must be one of {', '.join(QUANT_RANGES)}, got {name}") from None


def saturate(x: np.ndarray, dtype: Any) -> np.ndarray:
    """Clamp integer values to ``dtype``'s range and cast (no wrap-around)."""
    lo, hi = dtype_range(dtype)
    return np.clip(x, lo, hi).astype(dtype)


def _sat32(x: np.ndarray) -> np.ndarray:
    return np.clip(x, INT32_MIN, INT32_MAX)


def along_axis(v: Any, axis: int | None, ndim: int) -> np.ndarray:
    """Reshape a per-channel 1-D array so it broadcasts along ``axis`` of an ``ndim``-D array.

    Scalars (0-d or ``axis is None``) are returned unchanged.
    """
    v = np.asarray(v)
    if axis is None or v.ndim == 0:
        return v
    axis = axis % ndim
    shape = [1] * ndim
    shape[axis] = v.size
    return v.reshape(shape)


# -- fixed-point multipliers --------------------------------------------------------


def quantize_multiplier(real: float | np.ndarray) -> tuple[Any, Any]:
    """Encode ``real > 0`` as ``(m, shift)`` with ``real ≈ m · 2^(shift − 31)``.

    ``m`` is int32 in ``[2^30, 2^31)`` (or 0 for ``real < 2^-32``, see the module
    docstring), ``shift`` int32 in ``[-31, 31]``; a positive shift is a left shift.
    Scalars give ``np.int32`` scalars, arrays give int32 arrays of the same shape.
    """
    r = np.asarray(real, dtype=np.float64)
    if not np.all(np.isfinite(r)) or np.any(r <= 0):
        bad = r[~(np.isfinite(r) & (r > 0))].reshape(-1)[:3].tolist()
        raise QuantizationError(f"a real multiplier must be finite and > 0, got {bad} (check the quantization scales)")
    q, e = np.frexp(r)
    m = np.floor(q * float(1 << 31) + 0.5).astype(np.int64)
    carry = m == (1 << 31)
    m = np.where(carry, 1 << 30, m)
    shift = e.astype(np.int64) + carry
    if np.any(shift > 31):
        big = r[shift > 31].reshape(-1)[:3].tolist()
        raise QuantizationError(
            f"real multiplier {big} is too large for a fixed-point int32 multiplier (must be < 2^31); "
            "check the quantization scales"
        )
    tiny = shift < -31
    m = np.where(tiny, 0, m).astype(np.int32)
    shift = np.where(tiny, 0, shift).astype(np.int32)
    if r.ndim == 0:
        return m[()], shift[()]
    return m, shift


def _checked_multiplier(m: Any, shift: Any) -> tuple[np.ndarray, np.ndarray]:
    """``m`` and ``shift`` as int64 arrays, refused unless ``m`` is in [0, 2^31) and ``shift`` in [-31, 31]."""
    m64 = np.asarray(m, dtype=np.int64)
    s64 = np.asarray(shift, dtype=np.int64)
    if np.any((m64 < 0) | (m64 > INT32_MAX)) or np.any((s64 < -31) | (s64 > 31)):
        raise QuantizationError(
            "a fixed-point multiplier needs m in [0, 2^31) and shift in [-31, 31] (use quantize_multiplier)"
        )
    return m64, s64


def multiply_by_quantized_multiplier(x: Any, m: Any, shift: Any, axis: int | None = None) -> np.ndarray:
    """MBQM: ``x · m · 2^(shift − 31)`` rounded once (ties away from zero), saturated to int32.

    ``x`` is saturated to int32 first; per-channel ``m``/``shift`` (1-D) broadcast
    along ``axis``. See the module docstring for the exact definition.
    """
    m64, s64 = _checked_multiplier(m, shift)
    x64 = _sat32(np.asarray(x, dtype=np.int64))
    m64 = along_axis(m64, axis, x64.ndim)
    n = 31 - along_axis(s64, axis, x64.ndim)
    p = x64 * m64  # exact: |p| <= 2^31 · (2^31 − 1) < 2^62
    half = np.left_shift(np.int64(1), n) >> 1  # 2^(n−1), and 0 when n = 0 (nothing to round)
    # Arithmetic shift floors; the −1 for negative p turns "half up" into "half away from zero".
    y = (p + half - ((p < 0) & (n > 0))) >> n
    return _sat32(y).astype(np.int32)


# -- tensor-level operations --------------------------------------------------------


def requantize(
    x: Any,
    in_scale: Any,
    in_zero_point: Any,
    out_scale: Any,
    out_zero_point: Any,
    out_dtype: Any,
    axis: int | None = None,
) -> np.ndarray:
    """``sat(z_out + MBQM(sat32(x − z_in), s_in/s_out))``; ``s_in``, ``z_in`` may be per-channel on ``axis``."""
    return Requantizer(in_scale, in_zero_point, out_scale, out_zero_point, out_dtype, axis)(x)


#: The float64 requantize is exact while ``|x − z_in| · m`` stays below this (see :class:`Requantizer`).
F64_EXACT_PRODUCT = 1 << 52

#: Elements per block of the float64 requantize: its temporaries stay in cache
#: (measured best at 2^17 on the project's machines: 2^13 is dominated by call
#: overhead, unblocked tensors of a few MiB run ~2.5x slower).
REQUANTIZE_BLOCK = 1 << 17

#: Per-channel rows shorter than this are scaled column-wise (multipliers repeated along the row).
_MIN_ROW = 16

_SIGN_BIT = np.int64(-(1 << 63))
_HALF_BITS = np.float64(0.5).view(np.int64)
_work = threading.local()


def _work_buffers(n: int, int_dtype: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-thread reusable float64, float64 and integer buffers of ``n`` elements (contents undefined)."""
    bufs = _work.__dict__
    key = np.dtype(int_dtype).name
    got = bufs.get(key)
    if got is None or got[0].size < n:
        got = (np.empty(n), np.empty(n), np.empty(n, int_dtype))
        bufs[key] = got
    return got


class Requantizer:
    """:func:`requantize` for fixed parameters: multipliers encoded once, then applied to any array.

    Two implementations of the one definition:

    - :meth:`exact`, int64 arithmetic following the module docstring step by step;
    - a float64 one, taken when it provably gives the same result. With
      ``n = 31 − shift``, where ``|x − z_in| · m < 2^52``, ``y = (x − z_in) ·
      (m · 2^−n)`` is the exact rational ``P · 2^−n`` (``|P| < 2^52``, and
      ``m · 2^−n`` is a float64), and so is ``y ± 1/2`` (``|P| + 2^(n−1)`` has at
      most 53 significant bits for ``n ≤ 53``; for ``n > 53``, ``|y| < 1/4`` and
      the rounded sum stays strictly between 0 and 1 in magnitude). Truncating
      ``y + copysign(1/2, y)`` is round-half-away-from-zero of the exact product,
      as MBQM is. Saturation (to int32, then to the output range after adding
      ``z_out``) is one clamp of ``y ± 1/2`` to ``[max(INT32_MIN, lo − z_out),
      min(INT32_MAX, hi − z_out)]``: clamping to integer bounds commutes with
      truncation. When that range starts at 0 or above (e.g. uint8 with
      ``z_out = 0``), every negative ``y`` clamps to its start either way, so
      ``y + 1/2`` replaces the sign-dependent half.

      Elements past that bound have ``|y| ≥ 2^(52 − n)``: when this is at least
      twice the clamp's reach (8-bit outputs and ``shift ≥ −12``: the usual
      case), they saturate in float64 exactly as in the definition (only their
      sign matters, and the product is off by a relative 2^−53 at most), so any
      input of at most 32 bits qualifies. Otherwise the path is taken when the
      data's ``min``/``max`` (or its 8/16-bit dtype) keeps every element within
      the bound.
    """

    def __init__(
        self,
        in_scale: Any,
        in_zero_point: Any,
        out_scale: Any,
        out_zero_point: Any,
        out_dtype: Any,
        axis: int | None = None,
    ) -> None:
        s_in = np.asarray(in_scale, dtype=np.float32).astype(np.float64)
        s_out = np.asarray(out_scale, dtype=np.float32).astype(np.float64)
        if s_out.size != 1:
            raise QuantizationError("requantize takes one output scale (per-tensor output)")
        m, shift = quantize_multiplier(s_in / s_out.reshape(()))
        self._setup(m, shift, in_zero_point, out_zero_point, out_dtype, axis)

    @classmethod
    def from_multiplier(
        cls, m: Any, shift: Any, in_zero_point: Any, out_zero_point: Any, out_dtype: Any, axis: int | None = None
    ) -> Requantizer:
        """``sat(z_out + MBQM(sat32(x − z_in), m, shift))`` for an already encoded multiplier (per channel on ``axis``)."""
        m64, s64 = _checked_multiplier(m, shift)
        self = cls.__new__(cls)
        self._setup(m64, s64, in_zero_point, out_zero_point, out_dtype, axis)
        return self

    def _setup(
        self, m: Any, shift: Any, in_zero_point: Any, out_zero_point: Any, out_dtype: Any, axis: int | None
    ) -> None:
        z_in = np.asarray(in_zero_point, dtype=np.int64)
        if axis is None:
            m, shift = np.asarray(m).reshape(()), np.asarray(shift).reshape(())
            if z_in.size == 1:
                z_in = z_in.reshape(())
        self.m = np.asarray(m, dtype=np.int64)
        self.shift = np.asarray(shift, dtype=np.int64)
        self.z_in = z_in
        self.axis = axis
        self.out_dtype = np.dtype(out_dtype)
        self.z_out = int(np.asarray(out_zero_point).reshape(()))
        lo, hi = dtype_range(self.out_dtype)
        self.low = max(INT32_MIN, lo - self.z_out)  # the clamp of the rounded product, before + z_out
        self.high = min(INT32_MAX, hi - self.z_out)
        self._mq = np.ldexp(self.m.astype(np.float64), self.shift - 31)  # m · 2^(shift − 31), exact
        self._m_max = int(self.m.max()) if self.m.size else 0
        self._z_lo = int(z_in.min()) if z_in.size else 0
        self._z_hi = int(z_in.max()) if z_in.size else 0
        # the float path handles per-tensor or per-`axis` parameters only (not a vector z_in without an axis)
        self._float_ok = axis is not None or z_in.ndim == 0
        # Elements past the exact bound (|x − z_in| · m >= 2^52) have |y| >= 2^(52 − n); if that
        # is beyond the output clamp by a margin, the float64 path clamps them exactly like the
        # definition (their sign is exact, the relative error ~2^−52) and needs no scan of the data.
        n_max = int((31 - self.shift[self.m != 0]).max(initial=0))
        self._any_input = 2.0 ** (52 - n_max) >= 2 * (max(abs(self.low), abs(self.high)) + 1)
        self._small_int = self.out_dtype.itemsize < 4
        self._layouts: dict[tuple[int, ...], tuple[int, int, bool, np.ndarray, np.ndarray | None]] = {}

    # -- the two implementations ---------------------------------------------------

    def __call__(self, x: Any) -> np.ndarray:
        x = np.asarray(x)
        if x.dtype.kind not in "iu":
            x = x.astype(np.int64)
        if self.float_exact(x):
            return self._float(x)
        return self.exact(x)

    def exact(self, x: Any) -> np.ndarray:
        """The definition in int64 arithmetic, for any integer input."""
        x64 = np.asarray(x, dtype=np.int64)
        z_in = along_axis(self.z_in, self.axis, x64.ndim)
        y = multiply_by_quantized_multiplier(_sat32(x64 - z_in), self.m, self.shift, self.axis)
        return saturate(y.astype(np.int64) + self.z_out, self.out_dtype)

    def float_exact(self, x: np.ndarray) -> bool:
        """Whether the float64 path gives the definition's result for integer array ``x``."""
        if not self._float_ok or x.size == 0:
            return False
        if self._any_input and x.dtype.itemsize <= 4:
            return True
        if x.dtype.itemsize <= 2:
            info = np.iinfo(x.dtype)
            x_lo, x_hi = int(info.min), int(info.max)
        else:
            x_lo, x_hi = int(x.min()), int(x.max())
        reach = max(x_hi - self._z_lo, self._z_hi - x_lo, 0)
        return reach * self._m_max < F64_EXACT_PRODUCT

    def _float(self, x: np.ndarray) -> np.ndarray:
        """The float64 path (see the class docstring), block by block so the temporaries stay in cache."""
        x = np.ascontiguousarray(x)
        out = np.empty(x.shape, self.out_dtype)
        rows, cols, per_row, mq, z_in = self._layout(x.shape)
        x2, o2 = x.reshape(rows, cols), out.reshape(rows, cols)
        cb = min(cols, REQUANTIZE_BLOCK)
        rb = max(1, REQUANTIZE_BLOCK // cb)
        vbuf, hbuf, ibuf = _work_buffers(rb * cb, np.int16 if self._small_int else np.int64)
        low, high, z_out = float(self.low), float(self.high), self.z_out
        signed = self.low < 0 < self.high
        shift_half = 0.5 if self.low >= 0 else -0.5  # when every value of one sign clamps anyway
        for r0 in range(0, rows, rb):
            r1 = min(rows, r0 + rb)
            for c0 in range(0, cols, cb):
                c1 = min(cols, c0 + cb)
                shape = (r1 - r0, c1 - c0)
                n = shape[0] * shape[1]
                v, h, i = vbuf[:n].reshape(shape), hbuf[:n].reshape(shape), ibuf[:n].reshape(shape)
                if mq.ndim == 2:
                    mb = mq[r0:r1] if per_row else mq[:, c0:c1]
                    zb = None if z_in is None else (z_in[r0:r1] if per_row else z_in[:, c0:c1])
                else:
                    mb, zb = mq, z_in
                xb = x2[r0:r1, c0:c1]
                if zb is None:
                    np.copyto(v, xb)  # then multiply in place: faster than a mixed-type multiply
                else:
                    np.subtract(xb, zb, out=v)
                v *= mb
                if signed:  # v += copysign(0.5, v), with integer ops on the bits (faster than copysign)
                    h64 = h.view(np.int64)
                    np.bitwise_and(v.view(np.int64), _SIGN_BIT, out=h64)
                    np.bitwise_or(h64, _HALF_BITS, out=h64)
                    v += h
                else:
                    v += shift_half
                np.clip(v, low, high, out=v)
                ob = o2[r0:r1, c0:c1]
                if z_out == 0:
                    np.copyto(ob, v, casting="unsafe")  # truncates toward zero
                else:
                    np.copyto(i, v, casting="unsafe")
                    np.add(i, z_out, out=ob, casting="unsafe")
        return out

    def _layout(self, shape: tuple[int, ...]) -> tuple[int, int, bool, np.ndarray, np.ndarray | None]:
        """``x`` as ``rows × cols``, and its multipliers (zero points: ``None`` when all 0) per row or per column."""
        got = self._layouts.get(shape)
        if got is None:
            got = self._layouts[shape] = self._new_layout(shape)
        return got

    def _new_layout(self, shape: tuple[int, ...]) -> tuple[int, int, bool, np.ndarray, np.ndarray | None]:
        size = int(np.prod(shape, dtype=np.int64))
        z_any = bool(np.any(self.z_in != 0))
        mq: np.ndarray
        z: np.ndarray | None
        if self.axis is None or (self._mq.ndim == 0 and self.z_in.ndim == 0):
            mq = self._mq.reshape(())
            z = self.z_in.astype(np.float64).reshape(()) if z_any else None
            return 1, size, False, mq, z
        axis = self.axis % len(shape)
        c = shape[axis]
        outer = int(np.prod(shape[:axis], dtype=np.int64))
        inner = int(np.prod(shape[axis + 1 :], dtype=np.int64))
        zc = np.broadcast_to(self.z_in, (c,)).astype(np.float64) if z_any else None
        mqc = np.broadcast_to(self._mq, (c,))
        if inner >= _MIN_ROW:
            mq = np.tile(mqc, outer).reshape(-1, 1)
            z = None if zc is None else np.tile(zc, outer).reshape(-1, 1)
            return outer * c, inner, True, mq, z
        mq = np.repeat(mqc, inner).reshape(1, -1)
        z = None if zc is None else np.repeat(zc, inner).reshape(1, -1)
        return outer, c * inner, False, mq, z


def add_multipliers(s_a: float, s_b: float, s_out: float) -> tuple[tuple[Any, Any], tuple[Any, Any], tuple[Any, Any]]:
    """The three ``(m, shift)`` pairs of qnn.add: input a, input b, output."""
    s_a, s_b, s_out = (float(np.float32(s)) for s in (s_a, s_b, s_out))
    t = 2.0 * max(s_a, s_b)
    return (
        quantize_multiplier(s_a / t),
        quantize_multiplier(s_b / t),
        quantize_multiplier(t / (float(1 << ADD_LEFT_SHIFT) * s_out)),
    )


def quantized_add(
    a: Any, s_a: float, z_a: int, b: Any, s_b: float, z_b: int, s_out: float, z_out: int, out_dtype: Any
) -> np.ndarray:
    """qnn.add of per-tensor quantized ``a`` and ``b`` (broadcasting), see the module docstring."""
    (ma, sa), (mb, sb), (mo, so) = add_multipliers(s_a, s_b, s_out)
    a64 = (np.asarray(a, dtype=np.int64) - int(z_a)) << ADD_LEFT_SHIFT
    b64 = (np.asarray(b, dtype=np.int64) - int(z_b)) << ADD_LEFT_SHIFT
    total = multiply_by_quantized_multiplier(_sat32(a64), ma, sa).astype(np.int64) + multiply_by_quantized_multiplier(
        _sat32(b64), mb, sb
    )
    y = multiply_by_quantized_multiplier(_sat32(total), mo, so)
    return saturate(y.astype(np.int64) + int(z_out), out_dtype)


def quantized_mul(
    a: Any, s_a: float, z_a: int, b: Any, s_b: float, z_b: int, s_out: float, z_out: int, out_dtype: Any
) -> np.ndarray:
    """qnn.mul of per-tensor quantized ``a`` and ``b`` (broadcasting), see the module docstring."""
    s_a, s_b, s_out = (float(np.float32(s)) for s in (s_a, s_b, s_out))
    m, shift = quantize_multiplier(s_a * s_b / s_out)
    prod = (np.asarray(a, dtype=np.int64) - int(z_a)) * (np.asarray(b, dtype=np.int64) - int(z_b))
    y = multiply_by_quantized_multiplier(_sat32(prod), m, shift)
    return saturate(y.astype(np.int64) + int(z_out), out_dtype)


def pair_table(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], dtype: Any) -> np.ndarray:
    """``fn`` evaluated on every pair of 8-bit values: ``table[(bits(a) << 8) | bits(b)] = fn(a, b)``.

    ``bits`` is the value's uint8 bit pattern. A binary op on 8-bit data (qnn.add,
    qnn.mul) has only 2^16 distinct inputs: tabulating the definition once makes
    every later evaluation a lookup (:func:`lookup_pairs`), identical by construction.
    """
    dt = np.dtype(dtype)
    if dt.itemsize != 1 or dt.kind not in "iu":
        raise QuantizationError(f"pair tables are for 8-bit data (uint8, int8), got {dt.name}")
    values = np.arange(256, dtype=np.uint8).view(dt)
    return np.ascontiguousarray(fn(values[:, None], values[None, :])).reshape(1 << 16)


def lookup_pairs(table: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``fn(a, b)`` (broadcasting) from ``table = pair_table(fn, dtype)``; ``a``, ``b`` of that 8-bit dtype."""
    a8, b8 = np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8)
    idx = np.left_shift(a8, 8, dtype=np.uint16)
    if idx.shape == np.broadcast_shapes(a8.shape, b8.shape):
        idx |= b8
    else:
        idx = np.bitwise_or(idx, b8, dtype=np.uint16)
    return np.asarray(table.take(idx))  # an array also for 0-d inputs (take gives a scalar)


def quantize(x: Any, scale: Any, zero_point: Any, dtype: Any, axis: int | None = None) -> np.ndarray:
    """ONNX QuantizeLinear: ``sat(round_half_even(x / s) + z)``; per-axis along ``axis``."""
    x = np.asarray(x)
    work = np.float64 if x.dtype == np.float64 else np.float32
    xf = x.astype(work, copy=False)
    s = along_axis(np.asarray(scale, dtype=np.float32).astype(work), axis, xf.ndim)
    z = along_axis(np.asarray(zero_point, dtype=np.int64), axis, xf.ndim)
    lo, hi = dtype_range(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        r = np.rint(xf / s).astype(np.float64)
    r = np.where(np.isnan(r), 0.0, r)
    # Clamp in float64 (exact for every int32 bound) before the integer cast.
    r = np.clip(r, lo - z, hi - z)
    return (r.astype(np.int64) + z).astype(dtype)


def dequantize(q: Any, scale: Any, zero_point: Any, axis: int | None = None) -> np.ndarray:
    """ONNX DequantizeLinear: ``float32(q − z) · s`` (float32); per-axis along ``axis``."""
    q64 = np.asarray(q, dtype=np.int64)
    s = along_axis(np.asarray(scale, dtype=np.float32), axis, q64.ndim)
    z = along_axis(np.asarray(zero_point, dtype=np.int64), axis, q64.ndim)
    return ((q64 - z).astype(np.float32) * s).astype(np.float32)
