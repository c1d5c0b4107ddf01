"""Elementwise ops: reference kernels against ONNX Runtime single-node models, type rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ort_helpers import infer, ort_run, run_op

from accel.errors import TypeInferenceError
from accel.ir import QuantParams, TensorType
from accel.ops.elementwise import erf_erfc

RNG = np.random.default_rng(20240611)


def close(ours: np.ndarray, ref: np.ndarray, rtol: float = 1e-6, atol: float = 0.0) -> None:
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return np.asarray(RNG.standard_normal(shape) * scale, dtype=np.float32)


# -- binary ---------------------------------------------------------------------------

BINARY = {
    "add": "Add",
    "subtract": "Sub",
    "multiply": "Mul",
    "divide": "Div",
    "maximum": "Max",
    "minimum": "Min",
    "power": "Pow",
}
SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (3, 1)), ((1,), (2, 3)), ((2, 1, 4), (1, 3, 1)), ((), (5,)), ((4, 1), ())]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_float_broadcast(op: str, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    a, b = f32(*shapes[0], scale=3.0), f32(*shapes[1], scale=3.0)
    if op == "power":
        a = np.asarray(np.abs(a) + np.float32(0.1))
    if op == "divide":
        b = np.where(np.abs(b) < 0.1, np.float32(0.5), b)
    ours = run_op(op, [a, b])
    (ref,) = ort_run(BINARY[op], [a, b])
    close(ours, ref)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_integer(op: str, dtype: str) -> None:
    a = RNG.integers(-50, 50, size=(3, 4, 5)).astype(dtype)
    b = RNG.integers(-7, 8, size=(4, 1)).astype(dtype)
    if op == "divide":
        b[b == 0] = 3
    if op == "power":
        a = RNG.integers(-3, 4, size=(3, 4, 5)).astype(dtype)
        b = RNG.integers(-3, 6, size=(4, 1)).astype(dtype)
        a[0, 0, :3] = [1, -1, -1]  # exact results for negative exponents
        a[(a == 0) & (b < 0)] = 2  # 0 ** negative is undefined
    ours = run_op(op, [a, b])
    (ref,) = ort_run(BINARY[op], [a, b])
    assert ours.dtype == ref.dtype
    np.testing.assert_array_equal(ours, ref)


def test_integer_divide_truncates_toward_zero() -> None:
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1], np.int32)
    b = np.array([2, 2, -2, -2, 3, 3, 5, -1], np.int32)
    np.testing.assert_array_equal(run_op("divide", [a, b]), [3, -3, -3, 3, 2, -2, 0, -1])
    u = np.array([7, 200, 3], np.uint8)
    np.testing.assert_array_equal(run_op("divide", [u, np.array([2, 3, 4], np.uint8)]), [3, 66, 0])


def test_integer_power_negative_exponent() -> None:
    a = np.array([2, 1, -1, -1, 5, 3], np.int64)
    b = np.array([-1, -4, -3, -2, -1, 3], np.int64)
    np.testing.assert_array_equal(run_op("power", [a, b]), [0, 1, -1, 1, 0, 27])


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_max_min_uint8(op: str) -> None:
    a = RNG.integers(0, 256, size=(2, 5)).astype(np.uint8)
    b = RNG.integers(0, 256, size=(5,)).astype(np.uint8)
    (ref,) = ort_run(BINARY[op], [a, b], opset=13)
    np.testing.assert_array_equal(run_op(op, [a, b]), ref)


def test_binary_keeps_float_dtypes() -> None:
    for dtype in ("float16", "float64"):
        a, b = f32(3, 4).astype(dtype), f32(4).astype(dtype)
        for op in BINARY:
            arr = run_op(op, [np.abs(a) + 1, np.abs(b) + 1])
            assert arr.dtype == np.dtype(dtype)


def test_binary_refusals() -> None:
    t32 = TensorType((2, 3), "float32")
    with pytest.raises(TypeInferenceError, match="one dtype"):
        infer("add", [t32, TensorType((2, 3), "float16")])
    with pytest.raises(TypeInferenceError, match="do not broadcast"):
        infer("multiply", [t32, TensorType((4,), "float32")])
    with pytest.raises(TypeInferenceError, match="bool"):
        infer("add", [TensorType((2,), "bool"), TensorType((2,), "bool")])
    q = QuantParams(0.1, 128)
    u8 = TensorType((2, 3), "uint8", q)
    with pytest.raises(TypeInferenceError, match="qnn"):
        infer("multiply", [u8, u8])
    with pytest.raises(TypeInferenceError, match=r"qnn\.add"):
        infer("add", [u8, u8])
    with pytest.raises(TypeInferenceError, match="quantized differently"):
        infer("maximum", [u8, TensorType((2, 3), "uint8", QuantParams(0.2, 128))])
    with pytest.raises(TypeInferenceError, match="quantized differently"):
        infer("maximum", [u8, TensorType((3,), "uint8")])


def test_binary_quant_propagation() -> None:
    q = QuantParams(0.1, 3)
    (t,) = infer("maximum", [TensorType((2, 3), "uint8", q), TensorType((2, 3), "uint8", q)])
    assert t.quant == q
    acc = QuantParams([0.5, 0.25, 0.125], 0, axis=1)
    (t,) = infer("add", [TensorType((4, 3), "int32", acc), TensorType((4, 3), "int32", acc)])
    assert t.quant == acc
    # per-axis parameters follow their axis through broadcasting to a higher rank
    (t,) = infer(
        "add", [TensorType((2, 4, 3), "int32", QuantParams(acc.scale, 0, axis=2)), TensorType((4, 3), "int32", acc)]
    )
    assert t.quant == QuantParams(acc.scale, 0, axis=2)


# -- unary ----------------------------------------------------------------------------

UNARY = {"sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "abs": "Abs", "negative": "Neg", "nn.relu": "Relu"}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_float(op: str) -> None:
    x = np.concatenate([f32(1000, scale=4.0), np.linspace(-30, 30, 243, dtype=np.float32)]).reshape(-1, 11)
    if op == "exp":
        x = np.clip(x, -80, 80)
    (ref,) = ort_run(UNARY[op], [x])
    ours = run_op(op, [x])
    if op == "sigmoid":
        # ORT's MLAS logistic is a rational approximation with ~1e-7 absolute error,
        # which is large relative error for tiny outputs: check ours against the exact
        # value instead, and against ORT with that absolute slack.
        close(ours, ref, rtol=1e-6, atol=1e-7)
        exact = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
        close(ours, exact, rtol=1e-6)
    else:
        close(ours, ref)


def test_sqrt() -> None:
    x = np.abs(f32(7, 9, scale=10.0))
    (ref,) = ort_run("Sqrt", [x])
    close(run_op("sqrt", [x]), ref)
    assert np.isnan(run_op("sqrt", [np.array([-1.0], np.float32)])[0])


def test_erf_against_ort_and_math() -> None:
    x = np.concatenate(
        [
            f32(2000, scale=2.0),
            np.linspace(-7, 7, 1401, dtype=np.float32),
            np.array([0, -0.0, 1e-30, -1e-6, 0.84375, 1.25, 1 / 0.35, 6.0, 30.0, np.inf, -np.inf], np.float32),
        ]
    )
    (ref,) = ort_run("Erf", [x])
    ours = run_op("erf", [x])
    close(ours, ref, rtol=0, atol=1e-6)
    exact = np.array([math.erf(float(v)) for v in x])
    # float32 output of a below-one-double-ulp evaluation: correctly rounded or one ulp off
    assert np.max(np.abs(ours - exact) / np.maximum(np.abs(exact), 1e-38)) < 1.2e-7
    assert np.isnan(run_op("erf", [np.array([np.nan], np.float32)])[0])


def test_erf_erfc_float64_accuracy() -> None:
    x = np.concatenate([np.linspace(-27, 27, 20001), np.logspace(-300, 1, 301), -np.logspace(-300, 1, 301)])
    e, c = erf_erfc(x)
    ref_e = np.array([math.erf(v) for v in x])
    ref_c = np.array([math.erfc(v) for v in x])
    assert np.max(np.abs(e - ref_e) / np.maximum(np.abs(ref_e), 1e-300)) < 1e-15
    assert np.max(np.abs(c - ref_c) / np.maximum(ref_c, 1e-300)) < 1e-12


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate: str) -> None:
    x = np.concatenate([f32(3000, scale=3.0), np.linspace(-12, 12, 481, dtype=np.float32)]).reshape(-1, 1)
    (ref,) = ort_run("Gelu", [x], {"approximate": approximate}, opset=20)
    ours = run_op("nn.gelu", [x], {"approximate": approximate})
    close(ours, ref, rtol=0, atol=1e-6)
    xd = x.astype(np.float64)
    if approximate == "none":
        exact = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in xd.ravel()]).reshape(x.shape)
    else:
        exact = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd**3)))
    np.testing.assert_allclose(ours, exact.astype(np.float32), rtol=1.2e-7, atol=1e-37)


@pytest.mark.parametrize("alpha", [0.01, 0.2, 1.5])
def test_leaky_relu(alpha: float) -> None:
    x = f32(4, 5, 6, scale=5.0)
    (ref,) = ort_run("LeakyRelu", [x], {"alpha": alpha})
    close(run_op("nn.leaky_relu", [x], {"alpha": alpha}), ref)


@pytest.mark.parametrize(
    ("dtype", "lo", "hi"),
    [("float32", -1.5, 2.25), ("float32", 0.0, 6.0), ("int32", -20, 35), ("uint8", 10, 200), ("int8", -5, 5)],
)
def test_clip(dtype: str, lo: float, hi: float) -> None:
    if dtype == "float32":
        x = f32(3, 50, scale=4.0)
    else:
        info = np.iinfo(dtype)
        x = RNG.integers(max(info.min, -100), min(info.max, 250), size=(3, 50), endpoint=True).astype(dtype)
    bound = np.dtype(dtype).type
    (ref,) = ort_run("Clip", [x], consts=[np.array(bound(lo)), np.array(bound(hi))], opset=13)
    ours = run_op("clip", [x], {"a_min": lo, "a_max": hi})
    assert ours.dtype == ref.dtype
    np.testing.assert_array_equal(ours, ref)


def test_clip_integer_bounds_round_inward() -> None:
    x = np.arange(-5, 6, dtype=np.int16)
    out = run_op("clip", [x], {"a_min": -2.5, "a_max": 3.7})
    np.testing.assert_array_equal(out, np.clip(x, -2, 3))
    out = run_op("clip", [np.array([0, 255], np.uint8)], {"a_min": -1e9, "a_max": math.inf})
    np.testing.assert_array_equal(out, [0, 255])


def test_relu_and_clip_propagate_nan_like_onnxruntime() -> None:
    x = f32(4, 9, scale=5.0)
    x[0, :4] = [np.nan, -np.inf, np.inf, -0.0]
    (relu_ref,) = ort_run("Relu", [x])
    np.testing.assert_array_equal(run_op("nn.relu", [x]), relu_ref)
    (clip_ref,) = ort_run("Clip", [x], consts=[np.float32(0.0), np.float32(6.0)], opset=13)
    np.testing.assert_array_equal(run_op("clip", [x], {"a_min": 0.0, "a_max": 6.0}), clip_ref)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint8", "int32", "int64"])
def test_relu_and_clip_on_strided_views(dtype: str) -> None:
    """Non-contiguous inputs (transposed, sliced) give C-contiguous results of the input dtype."""
    base = (f32(6, 8, 10, scale=50.0) if np.dtype(dtype).kind == "f" else RNG.integers(-100, 100, (6, 8, 10))).astype(
        dtype
    )
    x = base.transpose(2, 0, 1)[:, ::2]
    # integer bounds round inward and saturate to the dtype
    lo = -7.5 if x.dtype.kind == "f" else (-7 if x.dtype.kind == "i" else 0)
    for op, attrs, want in [
        ("nn.relu", {}, np.maximum(x, np.zeros((), x.dtype))),
        ("clip", {"a_min": -7.5, "a_max": 20.0}, np.minimum(np.maximum(x, x.dtype.type(lo)), x.dtype.type(20))),
    ]:
        got = run_op(op, [x], attrs)
        assert got.flags.c_contiguous and got.dtype == x.dtype, op
        np.testing.assert_array_equal(got, want)


def test_quantized_relu_int8_negative_zero_point() -> None:
    x = np.array([-128, -9, -8, -7, 0, 127], np.int8)
    out = run_op("nn.relu", [x], quants=[QuantParams(0.1, -8)])
    np.testing.assert_array_equal(out, [-8, -8, -8, -7, 0, 127])


@pytest.mark.parametrize(("shape", "axis"), [((3, 17), -1), ((2, 5, 7), 1), ((4, 3, 2), 0), ((2, 3, 4, 5), 2)])
def test_softmax(shape: tuple[int, ...], axis: int) -> None:
    x = f32(*shape, scale=6.0)
    x.flat[0] = 80.0  # large logits would overflow a naive exp
    (ref,) = ort_run("Softmax", [x], {"axis": axis}, opset=13)
    close(run_op("nn.softmax", [x], {"axis": axis}), ref, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    ("shape", "axis"), [((1, 10), 1), ((1, 10), -1), ((2, 5, 7), 0), ((64, 1000), -1), ((0, 3), 1)]
)
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_softmax_bound_kernel_is_the_written_formula(shape: tuple[int, ...], axis: int, dtype: str) -> None:
    """The node-bound softmax (reductions called as ufuncs, in place) gives the formula's bits."""
    x = f32(*shape, scale=6.0).astype(dtype)
    work = x.astype(np.float32) if dtype == "float16" else x
    e = np.exp(work - np.max(work, axis=axis, keepdims=True))
    want = (e / np.sum(e, axis=axis, keepdims=True)).astype(dtype)
    got = run_op("nn.softmax", [x], {"axis": axis})
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_unary_keep_dtype(dtype: str) -> None:
    x = f32(4, 6, scale=3.0).astype(dtype)
    cases = [
        ("nn.relu", {}),
        ("nn.leaky_relu", {"alpha": 0.3}),
        ("clip", {"a_min": -1.0, "a_max": 1.0}),
        ("sigmoid", {}),
        ("tanh", {}),
        ("nn.gelu", {}),
        ("nn.gelu", {"approximate": "tanh"}),
        ("nn.softmax", {"axis": 0}),
        ("erf", {}),
        ("exp", {}),
        ("abs", {}),
        ("negative", {}),
    ]
    for op, attrs in cases:
        out = run_op(op, [x], attrs)
        assert out.dtype == np.dtype(dtype), op
    ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(run_op("sigmoid", [x]), ref, rtol=2e-3 if dtype == "float16" else 1e-15)


def test_integer_unary() -> None:
    x = np.array([[-128, -3, 0, 5, 127]], np.int8)
    np.testing.assert_array_equal(run_op("nn.relu", [x]), [[0, 0, 0, 5, 127]])
    np.testing.assert_array_equal(run_op("abs", [x[:, 1:]]), [[3, 0, 5, 127]])
    np.testing.assert_array_equal(run_op("negative", [x[:, 1:]]), [[3, 0, -5, -127]])


def test_sigmoid_extremes() -> None:
    x = np.array([-np.inf, -200, -88, 0, 88, 200, np.inf], np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        out = run_op("sigmoid", [x])
    ref = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_quantized_relu_clamps_at_zero_point() -> None:
    q = QuantParams(0.05, 128)
    x = np.array([0, 100, 128, 129, 255], np.uint8)
    out = run_op("nn.relu", [x], quants=[q])
    np.testing.assert_array_equal(out, [128, 128, 128, 129, 255])
    # relu of the real values, per channel
    qa = QuantParams([0.1, 0.2], [-3, 4], axis=0)
    y = np.array([[-5, -3, 2], [0, 4, 9]], np.int8)
    np.testing.assert_array_equal(run_op("nn.relu", [y], quants=[qa]), [[-3, -3, 2], [4, 4, 9]])
    (t,) = infer("nn.relu", [TensorType((2, 3), "int8", qa)])
    assert t.quant == qa
    (t,) = infer("clip", [TensorType((5,), "uint8", q)], {"a_min": 128, "a_max": 250})
    assert t.quant == q


def test_unary_refusals() -> None:
    i32 = TensorType((3,), "int32")
    for op in ("sigmoid", "tanh", "sqrt", "erf", "exp", "nn.gelu", "nn.softmax", "nn.leaky_relu"):
        with pytest.raises(TypeInferenceError, match="float"):
            infer(op, [i32])
    with pytest.raises(TypeInferenceError, match="signed"):
        infer("negative", [TensorType((3,), "uint8")])
    with pytest.raises(TypeInferenceError, match="dequantize"):
        infer("abs", [TensorType((3,), "int8", QuantParams(0.1, 0))])
    f = TensorType((3, 4), "float32")
    with pytest.raises(TypeInferenceError, match="a_min"):
        infer("clip", [f], {"a_min": 2.0, "a_max": 1.0})
    with pytest.raises(TypeInferenceError, match="missing required attribute 'a_max'"):
        infer("clip", [f], {"a_min": 0.0})
    with pytest.raises(TypeInferenceError, match="approximate"):
        infer("nn.gelu", [f], {"approximate": "fast"})
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer("nn.softmax", [f], {"axis": 2})
    with pytest.raises(TypeInferenceError, match="alpha"):
        infer("nn.leaky_relu", [f], {"alpha": float("nan")})


def test_scalar_inputs_give_arrays() -> None:
    """0-d inputs yield 0-d ndarrays (never numpy scalars) of the inferred dtype."""
    x = np.array(0.7, np.float32)
    unary = [
        ("nn.relu", {}),
        ("nn.leaky_relu", {}),
        ("clip", {"a_min": 0.0, "a_max": 0.5}),
        ("sigmoid", {}),
        ("tanh", {}),
        ("sqrt", {}),
        ("exp", {}),
        ("erf", {}),
        ("abs", {}),
        ("negative", {}),
        ("nn.gelu", {}),
    ]
    for op, attrs in unary:
        out = run_op(op, [x], attrs)
        assert isinstance(out, np.ndarray) and out.shape == (), op
    for op in BINARY:
        for a in (x, np.array(3, np.int32)):
            out = run_op(op, [a, a])
            assert isinstance(out, np.ndarray) and out.shape == (), op
    out = run_op("clip", [np.array([0.5, 6e4], np.float16)], {"a_min": -1e10, "a_max": 1e10})
    np.testing.assert_array_equal(out, np.array([0.5, 6e4], np.float16))
