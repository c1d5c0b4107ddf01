"""Elementwise ops: binary arithmetic, activations, softmax (see docs/ops.md).

Every kernel returns exactly the inferred dtype: numpy scalars built from
attributes (``alpha``, clip bounds) are cast to the data dtype first so that
type promotion never widens a float32 result to float64.

Quantized tensors: an op that is monotone and keeps the real-value mapping
(``maximum``/``minimum`` of equally quantized inputs, ``clip``, ``nn.relu``)
keeps its input's quantization; ``add``/``subtract`` keep it when both inputs
share one quantization with zero points 0 (int32 accumulators); every other op
refuses quantized inputs, which need the ``qnn.*`` ops or a dequantize first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from accel.errors import TypeInferenceError
from accel.ops.common import FLOAT_DTYPES, broadcast_shapes, expect, normalize_axis
from accel.ops.registry import REQUIRED, Affine, Layout, OpContext, Qdq, register_op
from accel.quant import along_axis
from accel.tensor_types import QuantParams, TensorType

# -- type-rule helpers ------------------------------------------------------------------


def _is_int(dtype: str) -> bool:
    return np.issubdtype(np.dtype(dtype), np.integer)


def _expect_float(x: TensorType, what: str = "input") -> None:
    expect(x.dtype in FLOAT_DTYPES, f"{what} is {x.dtype}, this op needs a float dtype ({', '.join(FLOAT_DTYPES)})")


def _expect_numeric(x: TensorType, what: str = "input") -> None:
    if x.dtype == "bool":
        raise TypeInferenceError(f"{what} is bool, this op needs a numeric dtype; cast it first")


def _expect_unquantized(x: TensorType, hint: str) -> None:
    if x.quant is not None:
        raise TypeInferenceError(f"input {x} is quantized; {hint}")


def _quant_in_frame(q: QuantParams | None, rank: int, out_rank: int) -> QuantParams | None:
    """``q`` re-expressed for a tensor broadcast from ``rank`` to ``out_rank`` dims."""
    if q is None or q.axis is None or rank == out_rank:
        return q
    return QuantParams(q.scale, q.zero_point, (q.axis % rank) + out_rank - rank)


# -- binary ops ---------------------------------------------------------------------


def _binary_rule(quant: str) -> Callable[..., TensorType]:
    """Type rule of a broadcasting binary op.

    ``quant``: ``"none"`` refuses quantized inputs, ``"same"`` needs equal
    quantization on both sides (kept), ``"zero_point0"`` additionally needs
    zero points of 0.
    """

    def infer(attrs: Any, a: TensorType, b: TensorType) -> TensorType:
        if a.dtype != b.dtype:
            raise TypeInferenceError(f"inputs are {a.dtype} and {b.dtype}; both must have one dtype (insert a cast)")
        _expect_numeric(a)
        shape = broadcast_shapes(a.shape, b.shape)
        if a.quant is None and b.quant is None:
            return TensorType(shape, a.dtype)
        if quant == "none":
            raise TypeInferenceError("quantized inputs need the qnn ops (qnn.add, qnn.mul) or a qnn.dequantize first")
        qa = _quant_in_frame(a.quant, a.rank, len(shape))
        qb = _quant_in_frame(b.quant, b.rank, len(shape))
        if not (qa is not None and qb is not None and qa == qb):
            raise TypeInferenceError(
                f"inputs are quantized differently ({a.quant!r} vs {b.quant!r}); requantize one side first"
            )
        assert qa is not None
        if quant == "zero_point0" and np.any(qa.zero_point):
            raise TypeInferenceError(
                f"quantized inputs with non-zero zero point ({qa!r}) cannot be added raw; use qnn.add"
            )
        return TensorType(shape, a.dtype, qa)

    return infer


def _register_binary(
    name: str,
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
    quant: str,
    doc: str,
    qnn: str | None = None,
    affine: Affine | None = None,
) -> None:
    def kernel(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(fn(a, b), dtype=ctx.out_types[0].dtype)

    kernel.__doc__ = doc
    register_op(
        name,
        infer=_binary_rule(quant),
        num_inputs=2,
        layout=Layout.ELEMENTWISE,
        qdq=Qdq.NONE if qnn is None else Qdq.INTEGER,
        qnn=qnn,
        affine=affine,
    )(kernel)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not _is_int(a.dtype.name):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.divide(a, b)
    # ONNX Div truncates toward zero; numpy's // floors. Division by zero gives 0
    # here (it is undefined in ONNX).
    with np.errstate(divide="ignore", over="ignore"):
        q = np.floor_divide(a, b)
        r = np.remainder(a, b)
    if np.issubdtype(a.dtype, np.signedinteger):
        q = q + ((r != 0) & ((a < 0) != (b < 0))).astype(q.dtype)
    return q


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not _is_int(a.dtype.name):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return np.power(a, b)
    if not np.issubdtype(b.dtype, np.signedinteger):
        return np.power(a, b)
    # numpy refuses negative integer exponents; ONNX Runtime computes
    # trunc(pow(a, b)) in floating point, i.e. 1 for a == 1, ±1 for a == -1,
    # 0 otherwise (0 ** negative is undefined; it gives 0 here).
    neg = b < 0
    out = np.power(a, np.where(neg, 0, b).astype(b.dtype))
    if np.any(neg):
        minus_one = np.where(b % 2 == 0, 1, -1).astype(a.dtype)
        small = np.where(a == 1, 1, np.where(a == -1, minus_one, 0)).astype(a.dtype)
        out = np.where(neg, small, out)
    return out


_register_binary("add", np.add, "zero_point0", "a + b, numpy broadcasting.", qnn="qnn.add", affine=Affine.SHIFT)
_register_binary("subtract", np.subtract, "zero_point0", "a - b, numpy broadcasting.")
_register_binary("multiply", np.multiply, "none", "a * b, numpy broadcasting.", qnn="qnn.mul", affine=Affine.SCALE)
_register_binary("divide", _divide, "none", "a / b; integer division truncates toward zero (ONNX Div).")
_register_binary("maximum", np.maximum, "same", "Elementwise max (NaN propagates).")
_register_binary("minimum", np.minimum, "same", "Elementwise min (NaN propagates).")
_register_binary("power", _power, "none", "a ** b; integer negative exponents truncate like ONNX Pow.")


# -- unary ops ----------------------------------------------------------------------


def _float_rule(attrs: Any, x: TensorType) -> TensorType:
    _expect_float(x)
    return x


def _numeric_rule(attrs: Any, x: TensorType) -> TensorType:
    _expect_numeric(x)
    _expect_unquantized(x, "dequantize it first")
    return x


def _relu_rule(attrs: Any, x: TensorType) -> TensorType:
    _expect_numeric(x)
    return x


@register_op("nn.relu", layout=Layout.ELEMENTWISE, qdq=Qdq.CLAMP, infer=_relu_rule)
def relu(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """max(x, 0); on quantized data max(q, zero_point), i.e. relu of the real values."""
    q = ctx.in_types[0].quant
    if q is not None and q.axis is not None:
        zp = along_axis(q.zero_point, q.axis, x.ndim)
        info = np.iinfo(x.dtype)
        return np.asarray(np.maximum(x, np.clip(zp, info.min, info.max).astype(x.dtype)))
    top = math.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).max
    floor = 0 if q is None else int(q.zero_point)
    lo, hi = _clip_bounds(x.dtype, floor, top)
    return _clip_into(x, lo, hi)


def _leaky_relu_rule(attrs: Any, x: TensorType) -> TensorType:
    _expect_float(x)
    alpha = attrs["alpha"]
    expect(
        isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and math.isfinite(alpha),
        f"alpha must be a finite number, got {alpha!r}",
    )
    return x


@register_op("nn.leaky_relu", layout=Layout.ELEMENTWISE, infer=_leaky_relu_rule, attrs={"alpha": 0.01})
def leaky_relu(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """x if x >= 0 else alpha * x."""
    alpha = np.asarray(ctx.attrs["alpha"], dtype=x.dtype)
    return np.where(x >= 0, x, x * alpha)


def _clip_rule(attrs: Any, x: TensorType) -> TensorType:
    _expect_numeric(x)
    lo, hi = attrs["a_min"], attrs["a_max"]
    for key, v in (("a_min", lo), ("a_max", hi)):
        expect(
            isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v),
            f"{key} must be a number, got {v!r}",
        )
    expect(lo <= hi, f"a_min {lo} is greater than a_max {hi}")
    return x


def _clip_bounds(dtype: np.dtype, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The bounds as scalars of ``dtype`` (integers: the tightest representable range)."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        lo_i = info.min if lo == -math.inf else max(info.min, min(info.max, math.ceil(lo)))
        hi_i = info.max if hi == math.inf else max(info.min, min(info.max, math.floor(hi)))
        return np.asarray(lo_i, dtype), np.asarray(hi_i, dtype)
    with np.errstate(over="ignore"):  # a bound beyond float16's range becomes ±inf
        return np.asarray(lo, dtype), np.asarray(hi, dtype)


def _clip_into(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``min(max(x, lo), hi)`` (NaN propagates) into a fresh C-contiguous array.

    One ``np.clip`` pass with both scalar bounds of ``x``'s dtype: numpy's clip
    loop runs at copy speed, while ``np.maximum``/``np.minimum`` (and clip with a
    ``None`` bound) take ~3x as long per pass on float32 (measured, numpy 2.4).
    """
    out = np.empty(x.shape, x.dtype)
    np.clip(x, lo, hi, out=out)
    return out


@register_op(
    "clip", layout=Layout.ELEMENTWISE, qdq=Qdq.CLAMP, infer=_clip_rule, attrs={"a_min": REQUIRED, "a_max": REQUIRED}
)
def clip(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """min(max(x, a_min), a_max); on quantized data the bounds are stored (integer) values."""
    lo, hi = _clip_bounds(x.dtype, ctx.attrs["a_min"], ctx.attrs["a_max"])
    return _clip_into(x, lo, hi)


@register_op("sigmoid", layout=Layout.ELEMENTWISE, infer=_float_rule)
def sigmoid(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), evaluated as e / (1 + e) with e = exp(-|x|) so nothing overflows."""
    e = np.exp(-np.abs(x))
    one = np.ones((), x.dtype)
    return np.where(x >= 0, one / (one + e), e / (one + e)).astype(x.dtype, copy=False)


@register_op("tanh", layout=Layout.ELEMENTWISE, infer=_float_rule)
def tanh(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """Hyperbolic tangent."""
    return np.asarray(np.tanh(x))


@register_op("sqrt", layout=Layout.ELEMENTWISE, infer=_float_rule)
def sqrt(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """Square root (NaN for negative inputs, as ONNX Sqrt)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(np.sqrt(x))


@register_op("exp", layout=Layout.ELEMENTWISE, infer=_float_rule)
def exp(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """e ** x."""
    with np.errstate(over="ignore"):
        return np.asarray(np.exp(x))


@register_op("abs", layout=Layout.ELEMENTWISE, infer=_numeric_rule)
def abs_(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """|x| (integers wrap at the minimum like numpy and ONNX Abs)."""
    return np.asarray(np.abs(x))


def _negative_rule(attrs: Any, x: TensorType) -> TensorType:
    _numeric_rule(attrs, x)
    expect(
        not np.issubdtype(np.dtype(x.dtype), np.unsignedinteger),
        f"input is {x.dtype}; negative needs a signed or float dtype",
    )
    return x


@register_op("negative", layout=Layout.ELEMENTWISE, infer=_negative_rule)
def negative(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """-x."""
    return np.asarray(np.negative(x))


# -- erf ----------------------------------------------------------------------------
#
# Rational approximations of Sun Microsystems' fdlibm s_erf.c (1993; the erf/erfc
# of FreeBSD msun, musl and glibc), accurate to below one double ulp. Evaluated in
# float64, they give correctly rounded float32 results. Intervals on |x|:
#   [0, 0.84375)        erf(x)  = x + x * P(x^2) / Q(x^2)
#   [0.84375, 1.25)     erf(x)  = ERX + P(s) / Q(s),               s = |x| - 1
#   [1.25, 1/0.35)      erfc(x) = exp(-x^2 - 0.5625 + R(u) / S(u)) / x,  u = 1 / x^2
#   [1/0.35, inf)       erfc(x) likewise with a second pair (R, S)
# Polynomial coefficients are listed from the constant term up.

# fmt: off
_ERX = 8.45062911510467529297e-01
_ERF_P = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
          -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_ERF_Q = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
          1.32494738004321644526e-04, -3.96022827877536812320e-06)
_ERF_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
           3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
           -2.16637559486879084300e-03)
_ERF_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
           1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_ERFC_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e01,
            -6.23753324503260060396e01, -1.62396669462573470355e02, -1.84605092906711035994e02,
            -8.12874355063065934246e01, -9.81432934416914548592e00)
_ERFC_SA = (1.0, 1.96512716674392571292e01, 1.37657754143519042600e02, 4.34565877475229228821e02,
            6.45387271733267880336e02, 4.29008140027567833386e02, 1.08635005541779435134e02,
            6.57024977031928170135e00, -6.04244152148580987438e-02)
_ERFC_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e01,
            -1.60636384855821916062e02, -6.37566443368389627722e02, -1.02509513161107724954e03,
            -4.83519191608651397019e02)
_ERFC_SB = (1.0, 3.03380607434824582924e01, 3.25792512996573918826e02, 1.53672958608443695994e03,
            3.19985821950859553908e03, 2.55305040643316442583e03, 4.74528541206955367215e02,
            -2.24409524465858183362e01)
# fmt: on


def _poly(coeffs: tuple[float, ...], t: np.ndarray) -> np.ndarray:
    """Horner evaluation of sum(coeffs[i] * t**i)."""
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc = acc * t + c
    return acc


def erf_erfc(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(erf(x), erfc(x)) in float64, both accurate to about one double ulp.

    erfc is returned directly (not as 1 - erf) so that tails keep their
    relative accuracy, which GELU's exact form needs for large negative x.
    """
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    sign = np.where(x < 0, -1.0, 1.0)
    erf = np.empty_like(x)
    erfc = np.empty_like(x)

    small = ax < 0.84375
    mid = (ax >= 0.84375) & (ax < 1.25)
    # Everything else, NaN included, takes the tail formula (NaN stays NaN).
    tail = ~(small | mid)

    xs = x[small]
    z = xs * xs
    e = xs + xs * (_poly(_ERF_P, z) / _poly(_ERF_Q, z))
    erf[small] = e
    erfc[small] = 1.0 - e

    s = ax[mid] - 1.0
    e = _ERX + _poly(_ERF_PA, s) / _poly(_ERF_QA, s)
    sg = sign[mid]
    erf[mid] = sg * e
    erfc[mid] = np.where(sg > 0, 1.0 - e, 1.0 + e)

    at = ax[tail]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        u = 1.0 / (at * at)
        near = at < 1.0 / 0.35
        ratio = np.where(near, _poly(_ERFC_RA, u) / _poly(_ERFC_SA, u), _poly(_ERFC_RB, u) / _poly(_ERFC_SB, u))
        r = np.exp(-at * at - 0.5625 + ratio) / at  # erfc(|x|)
    r = np.where(np.isinf(at), 0.0, r)
    sg = sign[tail]
    erf[tail] = sg * (1.0 - r)
    erfc[tail] = np.where(sg > 0, r, 2.0 - r)
    return erf, erfc


@register_op("erf", layout=Layout.ELEMENTWISE, infer=_float_rule)
def erf(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """Gauss error function (fdlibm rational approximations in float64, rounded back)."""
    return np.asarray(erf_erfc(x)[0], dtype=x.dtype)


def _gelu_rule(attrs: Any, x: TensorType) -> TensorType:
    _expect_float(x)
    expect(
        attrs["approximate"] in ("none", "tanh"), f"approximate must be 'none' or 'tanh', got {attrs['approximate']!r}"
    )
    return x


@register_op("nn.gelu", layout=Layout.ELEMENTWISE, infer=_gelu_rule, attrs={"approximate": "none"})
def gelu(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """ONNX Gelu: x * Phi(x), exact (erf) or with the tanh approximation; float64 inside."""
    xd = x.astype(np.float64)
    if ctx.attrs["approximate"] == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (xd + 0.044715 * xd * xd * xd)
        out = 0.5 * xd * (1.0 + np.tanh(inner))
    else:
        # 1 + erf(x / sqrt2) == erfc(-x / sqrt2), which stays accurate for x << 0.
        out = 0.5 * xd * erf_erfc(-xd * math.sqrt(0.5))[1]
    return np.asarray(out, dtype=x.dtype)


def _softmax_rule(attrs: Any, x: TensorType) -> TensorType:
    _expect_float(x)
    expect(
        isinstance(attrs["axis"], int) and not isinstance(attrs["axis"], bool),
        f"axis must be an integer, got {attrs['axis']!r}",
    )
    expect(x.rank >= 1, "softmax needs an input of rank >= 1")
    normalize_axis(attrs["axis"], x.rank)
    return x


def _prepare_softmax(ctx: OpContext) -> Callable[[np.ndarray], np.ndarray]:
    """Axis and work dtype once per node; ``np.max``/``np.sum`` are these same ufunc reductions
    behind a Python wrapper that costs as much as the arithmetic on small tensors."""
    t = ctx.in_types[0]
    if t.size == 0:
        return lambda x: x.copy()
    axis = normalize_axis(ctx.attrs["axis"], t.rank)
    dtype = t.np_dtype
    widen = dtype == np.float16

    def run(x: np.ndarray) -> np.ndarray:
        work = x.astype(np.float32) if widen else x
        e = np.subtract(work, np.maximum.reduce(work, axis=axis, keepdims=True))
        np.exp(e, out=e)
        e /= np.add.reduce(e, axis=axis, keepdims=True)
        return e.astype(dtype, copy=False)

    return run


@register_op("nn.softmax", layout=Layout.AXIS, infer=_softmax_rule, attrs={"axis": -1}, prepare=_prepare_softmax)
def softmax(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along ``axis`` (float16 is computed in float32)."""
    return _prepare_softmax(ctx)(x)


# -- comparisons, logic, selection, mod, rounding ----------------------------------------


def _compare_rule(attrs: Any, a: TensorType, b: TensorType) -> TensorType:
    expect(a.dtype == b.dtype, f"inputs are {a.dtype} and {b.dtype}; both must have one dtype (insert a cast)")
    _expect_unquantized(a, "dequantize it first")
    _expect_unquantized(b, "dequantize it first")
    return TensorType(broadcast_shapes(a.shape, b.shape), "bool")


def _register_compare(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], doc: str) -> None:
    def kernel(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(fn(a, b), dtype=np.bool_)

    kernel.__doc__ = doc
    register_op(name, layout=Layout.ELEMENTWISE, infer=_compare_rule, num_inputs=2)(kernel)


_register_compare("equal", np.equal, "a == b as bool, numpy broadcasting.")
_register_compare("less", np.less, "a < b as bool, numpy broadcasting (NaN compares false).")
_register_compare("less_equal", np.less_equal, "a <= b as bool, numpy broadcasting.")
_register_compare("greater", np.greater, "a > b as bool, numpy broadcasting.")
_register_compare("greater_equal", np.greater_equal, "a >= b as bool, numpy broadcasting.")


def _logical_rule(attrs: Any, a: TensorType, b: TensorType | None = None) -> TensorType:
    for t in (a, b):
        if t is not None:
            expect(t.dtype == "bool", f"input is {t.dtype}; logical ops take bool (compare or cast first)")
    return TensorType(a.shape if b is None else broadcast_shapes(a.shape, b.shape), "bool")


def _register_logical(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], doc: str) -> None:
    def kernel(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(fn(a, b))

    kernel.__doc__ = doc
    register_op(name, layout=Layout.ELEMENTWISE, infer=_logical_rule, num_inputs=2)(kernel)


_register_logical("logical_and", np.logical_and, "a and b on bool tensors, numpy broadcasting.")
_register_logical("logical_or", np.logical_or, "a or b on bool tensors, numpy broadcasting.")
_register_logical("logical_xor", np.logical_xor, "a xor b on bool tensors, numpy broadcasting.")


@register_op("logical_not", layout=Layout.ELEMENTWISE, infer=_logical_rule)
def logical_not(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """not x on a bool tensor."""
    return np.asarray(np.logical_not(x))


def _where_rule(attrs: Any, c: TensorType, a: TensorType, b: TensorType) -> TensorType:
    expect(c.dtype == "bool", f"the condition is {c.dtype}; it must be bool")
    expect(a.dtype == b.dtype, f"the branches are {a.dtype} and {b.dtype}; both must have one dtype")
    _expect_unquantized(a, "dequantize it first")
    _expect_unquantized(b, "dequantize it first")
    return TensorType(broadcast_shapes(c.shape, broadcast_shapes(a.shape, b.shape)), a.dtype)


@register_op("where", layout=Layout.ELEMENTWISE, infer=_where_rule, num_inputs=3)
def where(ctx: OpContext, c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a where c else b, numpy broadcasting over all three."""
    return np.asarray(np.where(c, a, b), dtype=ctx.out_types[0].dtype)


@register_op("mod", layout=Layout.ELEMENTWISE, infer=_binary_rule("none"), num_inputs=2, attrs={"fmod": False})
def mod(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Remainder. fmod=0: the sign of the divisor, like Python's %; fmod=1: the sign of the
    dividend, like C fmod. A zero integer divisor gives 0 (undefined in ONNX)."""
    dtype = ctx.out_types[0].dtype
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.fmod(a, b) if ctx.attrs["fmod"] else np.mod(a, b)
    return np.asarray(r, dtype=dtype)


def _round_rule(attrs: Any, x: TensorType) -> TensorType:
    _expect_float(x)
    _expect_unquantized(x, "dequantize it first")
    return x


@register_op("floor", layout=Layout.ELEMENTWISE, infer=_round_rule)
def floor(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """The largest integer <= x (NaN and infinities unchanged)."""
    return np.asarray(np.floor(x))


@register_op("ceil", layout=Layout.ELEMENTWISE, infer=_round_rule)
def ceil(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """The smallest integer >= x (NaN and infinities unchanged)."""
    return np.asarray(np.ceil(x))
