"""Quantized arithmetic: the one definition every kernel and backend runtime follows.

Every step is specified exactly, in integer arithmetic, so that a native (C/C++)
runtime can reproduce it bit for bit. The int64 numpy implementations here follow
the definitions step by step; the faster paths (:class:`Requantizer`'s float64
path, :func:`pair_table` lookups, the bound paths of :class:`Quantizer` and
:class:`Dequantizer`) are taken only where they provably give the same bits, and
the tests compare them with the definitions as written.

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

import importlib
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from accel.errors import QuantizationError


def _clip_ufunc() -> Any:
    """numpy's clip ufunc itself (np.clip's Python wrapper costs four times the ufunc on a small array)."""
    for module in ("numpy._core.umath", "numpy.core.umath"):  # numpy 2, numpy 1
        try:
            return importlib.import_module(module).clip
        except (ImportError, AttributeError):
            continue
    return np.clip


_clip = _clip_ufunc()

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

#: Inputs of at most this many elements take the float64 path in whole-array operations on
#: fresh temporaries (measured faster than the blocked path up to ~2^17 elements).
REQUANTIZE_SMALL = 1 << 16

#: Inputs of at most this many elements get their per-channel multipliers repeated to the full shape.
REPEAT_CHANNELS_MAX = 1 << 13

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


class _BoundPerInput:
    """A kernel whose parameters are converted, and whose path is chosen, once per
    kind of input (a key such as rank or shape, and dtype), then reused."""

    def __init__(self) -> None:
        self._bound: dict[Any, Callable[[np.ndarray], np.ndarray]] = {}

    def _binding(self, *key: Any) -> Callable[[np.ndarray], np.ndarray]:
        fn = self._bound.get(key)
        if fn is None:
            fn = self._bound[key] = self._new_binding(*key)
        return fn

    def _new_binding(self, *key: Any) -> Callable[[np.ndarray], np.ndarray]:
        raise NotImplementedError


class _BoundPerRank(_BoundPerInput):
    """Bound per input rank and dtype (elementwise kernels with per-axis parameters)."""

    def __call__(self, x: Any) -> np.ndarray:
        x = np.asarray(x)
        return self.bind(x.ndim, x.dtype)(x)

    def bind(self, ndim: int, dtype: Any) -> Callable[[np.ndarray], np.ndarray]:
        """``self`` for inputs of rank ``ndim`` and dtype ``dtype``: parameters shaped and converted once."""
        return self._binding(ndim, np.dtype(dtype))


class Requantizer(_BoundPerInput):
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

    :meth:`bind` picks the path once per input shape and dtype where the dtype
    decides it; small tensors run the float64 path in a few whole-array
    operations (:meth:`_small_float`), large ones block by block (:meth:`_float`).
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
        super().__init__()

    # -- the two implementations ---------------------------------------------------

    def __call__(self, x: Any) -> np.ndarray:
        x = np.asarray(x)
        if x.dtype.kind not in "iu":
            x = x.astype(np.int64)
        return self.bind(x.shape, x.dtype)(x)

    def bind(self, shape: tuple[int, ...], dtype: Any) -> Callable[[np.ndarray], np.ndarray]:
        """``self`` for integer inputs of one shape and dtype, with the path chosen once where the
        dtype decides it (executors bind a node's requantizer to its input type)."""
        return self._binding(tuple(shape), np.dtype(dtype))

    def _new_binding(self, shape: tuple[int, ...], dt: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
        size = math.prod(shape)
        if not self._float_ok or size == 0:
            return self.exact
        if not (self._any_input and dt.itemsize <= 4) and dt.itemsize > 2:
            return self._dispatch  # 32/64-bit data the multipliers do not clear: its min/max tells
        if not self.float_exact(np.zeros(1, dt)):  # decided by the dtype alone here, not by the values
            return self.exact
        if size <= min(REQUANTIZE_SMALL, REQUANTIZE_BLOCK):
            return self._small_float(shape)
        return self._float

    def _dispatch(self, x: np.ndarray) -> np.ndarray:
        return self._float(x) if self.float_exact(x) else self.exact(x)

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

    def _small_float(self, shape: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray]:
        """The float64 path for inputs of ``shape`` small enough to be one block: the same
        arithmetic as :meth:`_float`, in a few whole-array operations on fresh temporaries
        (on a few thousand elements numpy's per-call overhead is most of the cost)."""
        ndim = len(shape)
        repeat = math.prod(shape) <= REPEAT_CHANNELS_MAX

        def full(v: np.ndarray) -> np.ndarray:
            # on small tensors, per-channel values repeated over the whole shape: broadcasting
            # them along short rows costs more than reading a same-shape array
            if v.ndim == 0:
                return v
            v = along_axis(v, self.axis, ndim)
            return np.ascontiguousarray(np.broadcast_to(v, shape)) if repeat else v

        mq = full(self._mq)
        z = full(self.z_in.astype(np.float64)) if np.any(self.z_in != 0) else None
        low, high, z_out, out_dtype = float(self.low), float(self.high), self.z_out, self.out_dtype
        signed = self.low < 0 < self.high
        shift_half = 0.5 if self.low >= 0 else -0.5
        int_dtype = np.int16 if self._small_int else np.int64

        def run(x: np.ndarray) -> np.ndarray:
            v = x.astype(np.float64, order="C")  # then in place: faster than a mixed-type ufunc
            if z is not None:
                v -= z
            v *= mq
            v += np.copysign(0.5, v) if signed else shift_half
            np.fmax(v, low, out=v)  # as maximum/minimum: v has no NaN
            np.fmin(v, high, out=v)
            if z_out == 0:
                return v.astype(out_dtype)  # truncates toward zero
            i = v.astype(int_dtype)
            i += z_out
            return i.astype(out_dtype)

        return run

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
    return Quantizer(scale, zero_point, dtype, axis)(x)


def dequantize(q: Any, scale: Any, zero_point: Any, axis: int | None = None) -> np.ndarray:
    """ONNX DequantizeLinear: ``float32(q − z) · s`` (float32); per-axis along ``axis``."""
    return Dequantizer(scale, zero_point, axis)(q)


#: float32 holds every integer of at most this magnitude.
_F32_INTS = 1 << 24
#: Arrays below this many elements are small: numpy's call overhead outweighs its loops.
_SMALL = 4096


class Quantizer(_BoundPerRank):
    """:func:`quantize` for fixed parameters, bound per input rank and dtype.

    The definition divides in the work dtype (float32, or float64 for float64
    data), rounds half to even, maps NaN to 0, clamps to ``[lo − z, hi − z]``
    in float64 and adds ``z`` in int64. When those bounds are integers the work
    dtype holds exactly (8-bit outputs, or any float64 data), clamping and
    adding ``z`` in the work dtype give the same values: the quotient is
    already a work-dtype value, every comparison with an exact bound is exact,
    and the clamped sum is an integer in ``[lo, hi]``. Int32 outputs of float32
    data clamp in float64 as written.
    """

    def __init__(self, scale: Any, zero_point: Any, dtype: Any, axis: int | None = None) -> None:
        self.scale = np.asarray(scale, dtype=np.float32)
        self.zero_point = np.asarray(zero_point, dtype=np.int64)
        self.axis = axis
        self.dtype = np.dtype(dtype)
        self.lo, self.hi = dtype_range(self.dtype)
        super().__init__()

    def exact(self, x: Any) -> np.ndarray:
        """The definition as written (module docstring), for any input."""
        x = np.asarray(x)
        work = np.float64 if x.dtype == np.float64 else np.float32
        s = along_axis(self.scale.astype(work), self.axis, x.ndim)
        z = along_axis(self.zero_point, self.axis, x.ndim)
        with np.errstate(invalid="ignore", over="ignore"):
            r = np.rint(x.astype(work, copy=False) / s).astype(np.float64)
        r = np.where(np.isnan(r), 0.0, r)
        # Clamp in float64 (exact for every int32 bound) before the integer cast.
        r = np.clip(r, self.lo - z, self.hi - z)
        return (r.astype(np.int64) + z).astype(self.dtype)

    def _new_binding(self, ndim: int, dt: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
        work = np.dtype(np.float64 if dt == np.float64 else np.float32)
        s = along_axis(self.scale.astype(work), self.axis, ndim)
        z = along_axis(self.zero_point, self.axis, ndim)
        lo_z, hi_z = self.lo - z, self.hi - z
        out_dtype = self.dtype
        exact = self.exact

        reach = max(int(np.abs(lo_z).max()), int(np.abs(hi_z).max()))
        if ndim == 0 or reach > (_F32_INTS if work == np.float32 else F64_EXACT_PRODUCT):
            return exact
        lo_w, hi_w = lo_z.astype(work), hi_z.astype(work)
        z_w = z.astype(work) if np.any(z != 0) else None
        convert = dt != work
        lo_zero, hi_zero = not np.any(lo_z != 0), not np.any(hi_z != 0)  # e.g. uint8 with z = 0

        def run(x: np.ndarray) -> np.ndarray:
            if not x.size:
                return exact(x)
            with np.errstate(invalid="ignore", over="ignore"):
                r = np.divide(x.astype(work) if convert else x, s)
            np.rint(r, out=r)
            # NaN maps to 0. fmax/fmin give the bound for NaN, which is 0 where the first bound
            # is; on large arrays they run 8x slower than a clip, so there one reduction finds
            # NaN (it propagates through the minimum), and one clip follows
            if r.size < _SMALL and lo_zero:
                np.fmin(np.fmax(r, lo_w, out=r), hi_w, out=r)
            elif r.size < _SMALL and hi_zero:
                np.fmax(np.fmin(r, hi_w, out=r), lo_w, out=r)
            else:
                if np.isnan(np.minimum.reduce(r, axis=None)):
                    r[np.isnan(r)] = 0
                _clip(r, lo_w, hi_w, out=r)
            if z_w is not None:
                r += z_w
            return r.astype(out_dtype)

        return run


class Dequantizer(_BoundPerRank):
    """:func:`dequantize` for fixed parameters, bound per input rank and dtype.

    The definition subtracts ``z`` in int64 and converts to float32. For data
    of at most 16 bits and ``|z| < 2^23`` the difference is an integer below
    2^24, which float32 holds: converting first and subtracting in float32
    gives the same value, and with ``z = 0`` (any integer dtype up to 32 bits)
    the conversion alone does.
    """

    def __init__(self, scale: Any, zero_point: Any, axis: int | None = None) -> None:
        self.scale = np.asarray(scale, dtype=np.float32)
        self.zero_point = np.asarray(zero_point, dtype=np.int64)
        self.axis = axis
        super().__init__()

    def exact(self, q: Any) -> np.ndarray:
        """The definition as written (module docstring), for any input."""
        q64 = np.asarray(q, dtype=np.int64)
        s = along_axis(self.scale, self.axis, q64.ndim)
        z = along_axis(self.zero_point, self.axis, q64.ndim)
        return ((q64 - z).astype(np.float32) * s).astype(np.float32)

    def _new_binding(self, ndim: int, dt: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
        s = along_axis(self.scale, self.axis, ndim)
        z = along_axis(self.zero_point, self.axis, ndim)
        definition = self.exact

        if ndim == 0 or dt.kind not in "iu" or dt.itemsize > 4:
            return definition
        if not np.any(z != 0):

            def scaled(q: np.ndarray) -> np.ndarray:
                return np.multiply(q, s, dtype=np.float32)

            return scaled
        if dt.itemsize > 2 or int(np.abs(z).max()) >= 1 << 23:
            return definition
        z32 = z.astype(np.float32)

        def centred(q: np.ndarray) -> np.ndarray:
            r = np.subtract(q, z32, dtype=np.float32)
            r *= s
            return r

        return centred
