"""The nn op family against ONNX Runtime single-node models, layouts, type rules and MAC counts."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import ort_helpers  # skips this module where onnxruntime is missing
import pytest

from accel.errors import TypeInferenceError
from accel.ir import Graph, QuantParams, TensorType, Value
from accel.ops import nn
from accel.ops.registry import OpContext, get_op, infer_node_types

OPSET = 19
RTOL = 1e-5


# --------------------------------------------------------------------------------------
# harness


def ort_run(op_type: str, inputs: Sequence[np.ndarray], **attrs: Any) -> np.ndarray:
    """Run one ONNX node at ``OPSET`` on ONNX Runtime; its single output."""
    return ort_helpers.ort_run(op_type, inputs, attrs, opset=OPSET)[0]


def run_op(
    op: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any] | None = None, consts: Sequence[int] = ()
) -> np.ndarray:
    """Infer the node's type, bind its kernel (``prepare`` when it has one) and run it.

    Inputs listed in ``consts`` are passed as constants (weights get pre-packed).
    Also runs the plain kernel and checks both agree, and that the result has
    exactly the inferred type.
    """
    types = [TensorType.of(a) for a in inputs]
    full, out_types = infer_node_types(op, types, attrs)
    opdef = get_op(op)
    ctx = OpContext(
        op, full, tuple(types), tuple(out_types), tuple(a if i in consts else None for i, a in enumerate(inputs))
    )
    got = opdef.bind(ctx)(*inputs)
    assert got.dtype == out_types[0].np_dtype and got.shape == out_types[0].shape
    assert got.flags.c_contiguous
    plain = opdef.kernel(ctx, *inputs)
    np.testing.assert_array_equal(plain, got)
    return got


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float = RTOL) -> None:
    """Normwise relative error ``max|got - want| / max|want|`` within ``rtol``."""
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(float(np.max(np.abs(want))), 1e-30) if want.size else 1.0
    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) / scale if want.size else 0.0
    assert err <= rtol, f"relative error {err:.3g} > {rtol}"


def rand(rng: np.random.Generator, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def round_half_away(v: np.ndarray) -> np.ndarray:
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


# --------------------------------------------------------------------------------------
# nn.conv2d

# (N, C, H, W, O, (kh, kw), strides, padding (t, l, b, r), dilation, groups)
CONV_CASES = [
    pytest.param(1, 8, 10, 9, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, id="3x3-pad1"),
    pytest.param(1, 32, 10, 9, 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, id="3x3-32ch"),
    pytest.param(2, 32, 8, 9, 24, (3, 3), (1, 2), (0, 0, 0, 0), (1, 1), 1, id="3x3-32ch-nopad"),
    pytest.param(2, 16, 9, 11, 8, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, id="1x1"),
    pytest.param(1, 16, 9, 11, 8, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1, id="1x1-stride2"),
    pytest.param(1, 16, 6, 7, 8, (1, 1), (1, 1), (1, 0, 0, 2), (1, 1), 1, id="1x1-padded"),
    pytest.param(1, 3, 23, 21, 8, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1, id="7x7-stem"),
    pytest.param(1, 8, 12, 13, 6, (3, 3), (2, 1), (0, 1, 2, 1), (1, 1), 1, id="asym-pad-stride"),
    pytest.param(2, 20, 12, 13, 6, (3, 2), (1, 2), (2, 0, 1, 3), (1, 1), 1, id="asym-20ch"),
    pytest.param(1, 8, 15, 14, 4, (3, 3), (1, 1), (2, 2, 2, 2), (2, 3), 1, id="dilation"),
    pytest.param(1, 32, 15, 14, 4, (3, 3), (2, 1), (1, 2, 0, 1), (2, 2), 1, id="dilation-stride-32ch"),
    pytest.param(1, 8, 7, 7, 12, (3, 5), (1, 1), (0, 0, 0, 0), (1, 1), 1, id="3x5-nopad"),
    pytest.param(2, 8, 9, 10, 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2, id="groups2"),
    pytest.param(1, 64, 9, 10, 32, (3, 3), (2, 2), (1, 0, 1, 1), (1, 1), 4, id="groups4-16ch"),
    pytest.param(1, 12, 8, 8, 6, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 3, id="1x1-groups3"),
    pytest.param(2, 8, 11, 10, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8, id="depthwise"),
    pytest.param(1, 6, 11, 10, 12, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 6, id="depthwise-mult2"),
    pytest.param(1, 8, 13, 12, 8, (5, 3), (2, 1), (2, 1, 3, 0), (2, 2), 8, id="depthwise-dil-asym"),
    pytest.param(2, 5, 6, 6, 7, (6, 6), (1, 1), (0, 0, 0, 0), (1, 1), 1, id="kernel-covers-input"),
]


def _conv_attrs(strides, padding, dilation, groups, **layouts: str) -> dict[str, Any]:
    return {"strides": strides, "padding": padding, "dilation": dilation, "groups": groups, **layouts}


@pytest.mark.parametrize("n, c, h, w, o, k, strides, padding, dilation, groups", CONV_CASES)
def test_conv2d_matches_onnxruntime(rng, n, c, h, w, o, k, strides, padding, dilation, groups):
    x = rand(rng, n, c, h, w)
    wt = rand(rng, o, c // groups, *k)
    want = ort_run("Conv", [x, wt], strides=strides, pads=padding, dilations=dilation, group=groups)
    attrs = _conv_attrs(strides, padding, dilation, groups)
    assert_close(run_op("nn.conv2d", [x, wt], attrs, consts=(1,)), want)
    assert_close(run_op("nn.conv2d", [x, wt], attrs), want)


LAYOUT_CASES = [
    (1, 8, 9, 10, 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (2, 24, 9, 8, 12, (3, 2), (2, 1), (0, 1, 2, 1), (2, 1), 1),
    (1, 32, 7, 9, 16, (3, 3), (1, 2), (1, 1, 1, 1), (1, 1), 2),
    (2, 64, 7, 6, 16, (3, 3), (1, 1), (1, 0, 0, 1), (1, 1), 4),
    (2, 12, 7, 9, 6, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 3),
    (1, 16, 6, 6, 8, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    (1, 6, 9, 8, 12, (3, 3), (2, 1), (1, 0, 1, 2), (1, 2), 6),
    (2, 8, 9, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8),
]


@pytest.mark.parametrize("n, c, h, w, o, k, strides, padding, dilation, groups", LAYOUT_CASES)
def test_conv2d_layouts_agree(rng, n, c, h, w, o, k, strides, padding, dilation, groups):
    x = rand(rng, n, c, h, w)
    wt = rand(rng, o, c // groups, *k)
    attrs = _conv_attrs(strides, padding, dilation, groups)
    ref = run_op("nn.conv2d", [x, wt], attrs, consts=(1,))
    for data_layout, kernel_layout in itertools.product(nn.DATA_LAYOUTS, nn.KERNEL_LAYOUTS):
        xl = np.ascontiguousarray(x.transpose(["NCHW".index(a) for a in data_layout]))
        wl = np.ascontiguousarray(wt.transpose(["OIHW".index(a) for a in kernel_layout]))
        la = dict(attrs, data_layout=data_layout, kernel_layout=kernel_layout)
        for consts in ((1,), ()):
            got = run_op("nn.conv2d", [xl, wl], la, consts=consts)
            back = got.transpose([data_layout.index(a) for a in "NCHW"])
            assert_close(back, ref)


def test_conv2d_accepts_non_contiguous_data(rng):
    x = rand(rng, 1, 9, 12, 32).transpose(0, 3, 1, 2)  # NCHW view of NHWC memory
    wt = rand(rng, 8, 32, 3, 3)
    want = ort_run("Conv", [np.ascontiguousarray(x), wt], pads=[1, 1, 1, 1])
    assert_close(run_op("nn.conv2d", [x, wt], {"padding": (1, 1, 1, 1)}, consts=(1,)), want)


def _direct_conv_int(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Independent integer reference (NCHW/OIHW, groups 1): a loop over kernel taps with einsum."""
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, _, kh, kw = w.shape
    oh = (xp.shape[2] - kh) // stride + 1
    ow = (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            tap = xp[:, :, i : i + stride * (oh - 1) + 1 : stride, j : j + stride * (ow - 1) + 1 : stride]
            out += np.einsum("nchw,oc->nohw", tap, w[:, :, i, j].astype(np.int64))
    return out


def test_build_conv2d_is_exact_on_integers_in_float64(rng):
    """qnn's use: zero-point-subtracted integers in float64 come out exact."""
    x = rng.integers(-128, 128, (2, 16, 9, 9)).astype(np.int64)
    w = rng.integers(-127, 128, (8, 16, 3, 3)).astype(np.int64)
    want = _direct_conv_int(x, w, stride=2, pad=1)
    attrs = {"strides": (2, 2), "padding": (1, 1, 1, 1)}
    f = nn.build_conv2d(attrs, x.shape, w.shape, np.dtype(np.float64), weight=w.astype(np.float64))
    np.testing.assert_array_equal(f(x.astype(np.float64), None), want.astype(np.float64))
    g = nn.build_conv2d(attrs, x.shape, w.shape, np.dtype(np.float64))
    np.testing.assert_array_equal(g(x.astype(np.float64), w.astype(np.float64)), want.astype(np.float64))
    # the integer nn.conv2d (numpy integer matmul, not BLAS) agrees
    got = run_op("nn.conv2d", [x.astype(np.int32), w.astype(np.int32)], attrs, consts=(1,))
    np.testing.assert_array_equal(got, want.astype(np.int32))


def test_build_conv2d_depthwise_nhwc_exact_in_float64(rng):
    x = rng.integers(-128, 128, (1, 7, 8, 6)).astype(np.float64)  # NHWC
    w = rng.integers(-127, 128, (3, 3, 1, 6)).astype(np.float64)  # HWIO, depthwise
    attrs = {"padding": (1, 1, 1, 1), "groups": 6, "data_layout": "NHWC", "kernel_layout": "HWIO"}
    got = nn.build_conv2d(attrs, x.shape, w.shape, np.dtype(np.float64), weight=w)(x, None)
    want = np.stack(
        [
            _direct_conv_int(x[None, ..., c].transpose(1, 0, 2, 3), w[None, None, :, :, 0, c], 1, 1)[0, 0]
            for c in range(6)
        ],
        axis=-1,
    )[None]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "op, x_shape, w_shape, attrs",
    [
        ("nn.conv2d", (1, 32, 9, 9), (16, 32, 3, 3), {"padding": (1, 1, 1, 1)}),
        (
            "nn.conv2d",
            (1, 9, 9, 32),
            (3, 3, 32, 16),
            {"padding": (1, 1, 1, 1), "data_layout": "NHWC", "kernel_layout": "HWIO"},
        ),
        ("nn.conv2d", (1, 8, 9, 9), (8, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 8, "strides": (2, 2)}),
        ("nn.conv2d", (1, 8, 9, 9), (8, 1, 1, 1), {"groups": 8}),
        ("nn.conv2d_transpose", (1, 8, 5, 5), (8, 4, 3, 3), {"strides": (2, 2)}),
    ],
)
def test_kernel_outputs_do_not_alias_scratch_memory(rng, op, x_shape, w_shape, attrs):
    """Kernels reuse per-thread scratch buffers: a result must survive the next call."""
    x1, x2, w = rand(rng, *x_shape), rand(rng, *x_shape), rand(rng, *w_shape)
    first = run_op(op, [x1, w], attrs, consts=(1,))
    kept = first.copy()
    run_op(op, [x2, w], attrs, consts=(1,))
    np.testing.assert_array_equal(first, kept)


def test_conv2d_runs_concurrently(rng):
    """One bound kernel run from two threads at once gives the serial results (scratch is per thread)."""
    from concurrent.futures import ThreadPoolExecutor

    cases = [
        ((1, 32, 12, 12), (16, 32, 3, 3), {"padding": (1, 1, 1, 1)}),
        ((1, 16, 20, 20), (16, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 16}),
        ((2, 8, 15, 15), (24, 8, 5, 5), {"padding": (2, 2, 2, 2), "strides": (2, 2)}),
    ]
    jobs = []
    for x_shape, w_shape, attrs in cases:
        x, w = rand(rng, *x_shape), rand(rng, *w_shape)
        types = [TensorType.of(x), TensorType.of(w)]
        full, outs = infer_node_types("nn.conv2d", types, attrs)
        fn = get_op("nn.conv2d").bind(OpContext("nn.conv2d", full, tuple(types), tuple(outs), (None, w)))
        jobs.append((fn, x, w))
    serial = [fn(x, w) for fn, x, w in jobs]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda j: j[0](j[1], j[2]), jobs * 20))
    for i, got in enumerate(results):
        np.testing.assert_array_equal(got, serial[i % len(jobs)])


def test_conv2d_float16(rng):
    x = rand(rng, 1, 16, 8, 8)
    wt = rand(rng, 8, 16, 3, 3) * 0.1
    want = ort_run("Conv", [x, wt], pads=[1, 1, 1, 1])
    got = run_op("nn.conv2d", [x.astype(np.float16), wt.astype(np.float16)], {"padding": (1, 1, 1, 1)}, consts=(1,))
    assert got.dtype == np.float16
    assert_close(got, want, rtol=5e-3)


# --------------------------------------------------------------------------------------
# depthwise nn.conv2d (NCHW: stride phases, tap columns, one batched matmul per block)

# (N, C, H, W, channel multiplier, (kh, kw), strides, padding, dilation)
DEPTHWISE_CASES = [
    pytest.param(1, 6, 13, 11, 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), id="stride2-odd-sizes"),
    pytest.param(2, 5, 12, 14, 1, (3, 3), (2, 2), (0, 1, 1, 0), (1, 1), id="stride2-asym-pad-batch2"),
    pytest.param(1, 4, 17, 16, 2, (5, 5), (3, 2), (2, 0, 1, 3), (2, 1), id="stride3-dilation-mult2"),
    pytest.param(1, 4, 15, 15, 1, (3, 3), (2, 2), (2, 2, 2, 2), (2, 2), id="dilation-equals-stride"),
    pytest.param(1, 3, 16, 17, 1, (3, 4), (2, 3), (1, 2, 1, 1), (3, 2), id="dilation-stride-coprime"),
    pytest.param(3, 4, 4, 5, 3, (3, 3), (1, 1), (4, 3, 4, 4), (1, 1), id="pad-beyond-kernel-mult3"),
    pytest.param(1, 6, 9, 8, 1, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), id="1x1-stride2"),
    pytest.param(1, 5, 7, 7, 1, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1), id="7x7-same"),
    pytest.param(1, 4, 9, 6, 1, (2, 3), (1, 1), (0, 0, 0, 0), (1, 1), id="unpadded"),
    pytest.param(2, 3, 21, 40, 1, (3, 3), (1, 1), (1, 2, 0, 1), (1, 1), id="wide-map-border-padding"),
    pytest.param(1, 2, 19, 70, 2, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), id="wide-map-stride2"),
]


@pytest.mark.parametrize("n, c, h, w, mult, k, strides, padding, dilation", DEPTHWISE_CASES)
def test_depthwise_conv2d_matches_onnxruntime(rng, n, c, h, w, mult, k, strides, padding, dilation):
    x = rand(rng, n, c, h, w)
    wt = rand(rng, c * mult, 1, *k)
    want = ort_run("Conv", [x, wt], strides=strides, pads=padding, dilations=dilation, group=c)
    attrs = _conv_attrs(strides, padding, dilation, c)
    assert_close(run_op("nn.conv2d", [x, wt], attrs, consts=(1,)), want)
    assert_close(run_op("nn.conv2d", [x, wt], attrs), want)


@pytest.mark.parametrize("block_bytes", [1, 6000])
def test_depthwise_conv2d_channel_blocks(rng, monkeypatch, block_bytes):
    """Gathering in blocks of one or a few channels (block edges inside the batch) changes nothing."""
    x = rand(rng, 2, 7, 10, 9)
    wt = rand(rng, 14, 1, 3, 3)
    attrs = _conv_attrs((2, 1), (1, 1, 0, 1), (1, 1), 7)
    want = ort_run("Conv", [x, wt], strides=(2, 1), pads=(1, 1, 0, 1), group=7)
    monkeypatch.setattr(nn, "DEPTHWISE_COLS_BYTES", block_bytes)
    assert_close(run_op("nn.conv2d", [x, wt], attrs, consts=(1,)), want)


def _direct_depthwise_int(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Independent integer reference for NCHW depthwise (weight [C*mult, 1, kh, kw]), one channel at a time."""
    c, mult = x.shape[1], w.shape[0] // x.shape[1]
    outs = [
        _direct_conv_int(x[:, ch : ch + 1], w[ch * mult : (ch + 1) * mult], stride=stride, pad=pad) for ch in range(c)
    ]
    return np.concatenate(outs, axis=1)


def test_build_conv2d_depthwise_nchw_exact_on_integers(rng):
    """qnn's use of the depthwise kernel: integers in float64 (and int32 nn.conv2d) come out exact."""
    x = rng.integers(-128, 128, (2, 6, 11, 10)).astype(np.int64)
    w = rng.integers(-127, 128, (12, 1, 3, 3)).astype(np.int64)
    want = _direct_depthwise_int(x, w, stride=2, pad=1)
    attrs = {"strides": (2, 2), "padding": (1, 1, 1, 1), "groups": 6}
    f = nn.build_conv2d(attrs, x.shape, w.shape, np.dtype(np.float64), weight=w.astype(np.float64))
    np.testing.assert_array_equal(f(x.astype(np.float64), None), want.astype(np.float64))
    got = run_op("nn.conv2d", [x.astype(np.int32), w.astype(np.int32)], attrs, consts=(1,))
    np.testing.assert_array_equal(got, want.astype(np.int32))


def test_depthwise_conv2d_non_contiguous_and_float16(rng):
    x = rand(rng, 1, 10, 9, 8).transpose(0, 3, 1, 2)  # NCHW view of NHWC memory
    wt = rand(rng, 8, 1, 3, 3)
    attrs = _conv_attrs((1, 1), (1, 1, 1, 1), (1, 1), 8)
    want = ort_run("Conv", [np.ascontiguousarray(x), wt], pads=[1, 1, 1, 1], group=8)
    assert_close(run_op("nn.conv2d", [x, wt], attrs, consts=(1,)), want)
    got = run_op("nn.conv2d", [x.astype(np.float16), wt.astype(np.float16)], attrs, consts=(1,))
    assert got.dtype == np.float16
    assert_close(got, want, rtol=5e-3)


# --------------------------------------------------------------------------------------
# nn.conv2d_transpose

# (N, C_in, H, W, O per group, (kh, kw), strides, padding, output_padding, dilation, groups)
CONVT_CASES = [
    pytest.param(1, 4, 5, 6, 3, (3, 3), (1, 1), (0, 0, 0, 0), (0, 0), (1, 1), 1, id="basic"),
    pytest.param(2, 4, 5, 6, 3, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1, id="stride2-outpad"),
    pytest.param(1, 8, 4, 5, 6, (4, 4), (2, 2), (1, 1, 1, 1), (0, 0), (1, 1), 1, id="upsample-4x4s2"),
    pytest.param(1, 6, 5, 4, 2, (3, 2), (2, 3), (1, 0, 2, 1), (1, 2), (1, 1), 3, id="groups3-asym"),
    pytest.param(2, 4, 5, 5, 3, (3, 3), (1, 1), (1, 2, 0, 1), (0, 0), (2, 2), 2, id="dilation-groups2"),
    pytest.param(1, 3, 4, 4, 5, (2, 2), (3, 3), (0, 0, 0, 0), (2, 1), (1, 1), 1, id="stride-gt-kernel"),
    pytest.param(1, 32, 4, 4, 16, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1, id="32ch"),
]


@pytest.mark.parametrize("n, c, h, w, og, k, strides, padding, output_padding, dilation, groups", CONVT_CASES)
def test_conv2d_transpose_matches_onnxruntime(
    rng, n, c, h, w, og, k, strides, padding, output_padding, dilation, groups
):
    x = rand(rng, n, c, h, w)
    wt = rand(rng, c, og, *k)  # IOHW as ONNX
    want = ort_run(
        "ConvTranspose",
        [x, wt],
        strides=strides,
        pads=padding,
        output_padding=output_padding,
        dilations=dilation,
        group=groups,
    )
    attrs = {
        "strides": strides,
        "padding": padding,
        "output_padding": output_padding,
        "dilation": dilation,
        "groups": groups,
    }
    assert_close(run_op("nn.conv2d_transpose", [x, wt], attrs, consts=(1,)), want)
    assert_close(run_op("nn.conv2d_transpose", [x, wt], attrs), want)
    # NHWC data and the OHWI kernel layout give the same result
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    wl = np.ascontiguousarray(wt.transpose(1, 2, 3, 0))
    la = dict(attrs, data_layout="NHWC", kernel_layout="OHWI")
    assert_close(run_op("nn.conv2d_transpose", [xl, wl], la, consts=(1,)).transpose(0, 3, 1, 2), want)


def test_conv2d_transpose_is_adjoint_of_conv2d(rng):
    """<conv(x), y> == <x, conv_transpose(y)> for the same weight, strides and padding."""
    attrs = {"strides": (2, 2), "padding": (1, 1, 1, 1), "dilation": (1, 2)}
    x = rng.standard_normal((1, 4, 9, 9))
    w = rng.standard_normal((6, 4, 3, 3))  # OIHW for conv = IOHW [C_in=6, og=4] for the transpose
    y_shape = nn.conv2d_geometry(attrs, x.shape, w.shape).out_shape
    y = rng.standard_normal(y_shape)
    conv = nn.build_conv2d(attrs, x.shape, w.shape, np.dtype(np.float64), weight=w)
    geom_t = nn.conv2d_transpose_geometry(attrs, y.shape, w.shape)
    op = (x.shape[2] - geom_t.oh, x.shape[3] - geom_t.ow)
    convt = nn.build_conv2d_transpose(dict(attrs, output_padding=op), y.shape, w.shape, np.dtype(np.float64), weight=w)
    lhs = float(np.sum(conv(x, None) * y))
    rhs = float(np.sum(x * convt(y, None)))
    assert abs(lhs - rhs) <= 1e-9 * max(1.0, abs(lhs))


# --------------------------------------------------------------------------------------
# nn.dense, nn.batch_matmul


def test_dense_matches_gemm(rng):
    x, w = rand(rng, 5, 17), rand(rng, 9, 17)
    want = ort_run("Gemm", [x, w], transB=1)
    assert_close(run_op("nn.dense", [x, w], consts=(1,)), want)
    assert_close(run_op("nn.dense", [x, w]), want)


def test_dense_batched_data_matches_matmul(rng):
    x, w = rand(rng, 2, 3, 17), rand(rng, 9, 17)
    want = ort_run("MatMul", [x, np.ascontiguousarray(w.T)])
    assert_close(run_op("nn.dense", [x, w], consts=(1,)), want)
    v = rand(rng, 17)
    assert_close(run_op("nn.dense", [v, w]), w @ v)


def test_build_dense_prepacks(rng):
    x, w = rand(rng, 4, 8).astype(np.float64), rand(rng, 3, 8).astype(np.float64)
    f = nn.build_dense(x.shape, w.shape, np.dtype(np.float64), weight=w)
    np.testing.assert_allclose(f(x, None), x @ w.T, rtol=1e-12)
    g = nn.build_dense(x.shape, w.shape, np.dtype(np.float64))
    np.testing.assert_allclose(g(x, w), x @ w.T, rtol=1e-12)


@pytest.mark.parametrize(
    "a_shape, b_shape, ta, tb",
    [
        ((3, 4, 5), (3, 6, 5), False, True),
        ((3, 4, 5), (3, 5, 6), False, False),
        ((1, 4, 5), (3, 6, 5), False, True),
        ((3, 5, 4), (1, 5, 6), True, False),
        ((2, 5, 4), (2, 6, 5), True, True),
    ],
)
def test_batch_matmul_matches_matmul(rng, a_shape, b_shape, ta, tb):
    a, b = rand(rng, *a_shape), rand(rng, *b_shape)
    a_mm = np.ascontiguousarray(a.transpose(0, 2, 1)) if ta else a
    b_mm = np.ascontiguousarray(b.transpose(0, 2, 1)) if tb else b
    want = ort_run("MatMul", [a_mm, b_mm])
    assert_close(run_op("nn.batch_matmul", [a, b], {"transpose_a": ta, "transpose_b": tb}), want)


# --------------------------------------------------------------------------------------
# nn.bias_add, nn.batch_norm, nn.instance_norm


def test_bias_add(rng):
    x, b = rand(rng, 2, 5, 3, 4), rand(rng, 5)
    want = ort_run("Add", [x, b.reshape(5, 1, 1)])
    assert_close(run_op("nn.bias_add", [x, b]), want)
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    assert_close(run_op("nn.bias_add", [xl, b], {"axis": -1}), np.ascontiguousarray(want.transpose(0, 2, 3, 1)))


def test_bias_add_int32_accumulator_keeps_quant(rng):
    acc = rng.integers(-(2**20), 2**20, (1, 4, 3, 3)).astype(np.int32)
    bias = rng.integers(-1000, 1000, 4).astype(np.int32)
    q = QuantParams(0.02, 0)
    t_acc = TensorType(acc.shape, "int32", q)
    _, (out,) = infer_node_types("nn.bias_add", [t_acc, TensorType.of(bias)], None)
    assert out.quant == q
    got = run_op("nn.bias_add", [acc, bias])
    np.testing.assert_array_equal(got, acc + bias.reshape(4, 1, 1))


@pytest.mark.parametrize("shape", [(2, 6, 5, 4), (3, 6, 7), (4, 6)])
def test_batch_norm_matches_onnxruntime(rng, shape):
    x = rand(rng, *shape)
    c = shape[1]
    gamma, beta, mean = rand(rng, c), rand(rng, c), rand(rng, c)
    var = rng.uniform(0.1, 2.0, c).astype(np.float32)
    want = ort_run("BatchNormalization", [x, gamma, beta, mean, var], epsilon=1e-3)
    assert_close(run_op("nn.batch_norm", [x, gamma, beta, mean, var], {"epsilon": 1e-3}), want)
    if len(shape) == 4:
        xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        got = run_op("nn.batch_norm", [xl, gamma, beta, mean, var], {"epsilon": 1e-3, "axis": 3})
        assert_close(got.transpose(0, 3, 1, 2), want)


@pytest.mark.parametrize("shape", [(2, 5, 6, 7), (3, 4, 9)])
def test_instance_norm_matches_onnxruntime(rng, shape):
    x = rand(rng, *shape) * 3 + 1
    c = shape[1]
    gamma, beta = rand(rng, c), rand(rng, c)
    want = ort_run("InstanceNormalization", [x, gamma, beta], epsilon=1e-5)
    assert_close(run_op("nn.instance_norm", [x, gamma, beta]), want)
    xl = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    got = run_op("nn.instance_norm", [xl, gamma, beta], {"axis": -1})
    assert_close(np.moveaxis(got, -1, 1), want)


# --------------------------------------------------------------------------------------
# pooling

# ((kh, kw), strides, padding, dilation, ceil_mode), on a 2x3x11x10 input
POOL_CASES = [
    pytest.param((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, id="resnet-3x3s2p1"),
    pytest.param((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, id="2x2s2"),
    pytest.param((3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True, id="ceil"),
    pytest.param((3, 2), (2, 3), (1, 0, 2, 1), (1, 1), True, id="ceil-asym-pad"),
    pytest.param((2, 2), (3, 3), (1, 1, 1, 1), (1, 1), True, id="ceil-drops-last"),
    pytest.param((3, 3), (1, 2), (2, 1, 2, 1), (2, 2), False, id="dilation"),
    pytest.param((2, 3), (2, 2), (1, 1, 0, 1), (2, 1), True, id="dilation-ceil"),
    pytest.param((5, 4), (1, 1), (0, 2, 1, 0), (1, 1), False, id="5x4-s1"),
    pytest.param((1, 1), (2, 2), (0, 0, 0, 0), (1, 1), False, id="1x1s2"),
]


def _pool_attrs(k, strides, padding, dilation, ceil_mode, **extra: Any) -> dict[str, Any]:
    return {
        "pool_size": k,
        "strides": strides,
        "padding": padding,
        "dilation": dilation,
        "ceil_mode": ceil_mode,
        **extra,
    }


def _ort_pool(op_type: str, x: np.ndarray, k, strides, padding, dilation, ceil_mode, **extra: Any) -> np.ndarray:
    return ort_run(
        op_type,
        [x],
        kernel_shape=k,
        strides=strides,
        pads=padding,
        dilations=dilation,
        ceil_mode=int(ceil_mode),
        **extra,
    )


def _nhwc_roundtrip(op: str, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    return run_op(op, [xl], dict(attrs, layout="NHWC")).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("k, strides, padding, dilation, ceil_mode", POOL_CASES)
def test_max_pool2d_matches_onnxruntime(rng, k, strides, padding, dilation, ceil_mode):
    x = rand(rng, 2, 3, 11, 10)
    want = _ort_pool("MaxPool", x, k, strides, padding, dilation, ceil_mode)
    attrs = _pool_attrs(k, strides, padding, dilation, ceil_mode)
    np.testing.assert_array_equal(run_op("nn.max_pool2d", [x], attrs), want)
    np.testing.assert_array_equal(_nhwc_roundtrip("nn.max_pool2d", x, attrs), want)
    # integer (quantized) data: padding never wins, even against the dtype's minimum
    for dtype in (np.uint8, np.int8):
        info = np.iinfo(dtype)
        xi = rng.integers(info.min, info.max, x.shape, endpoint=True).astype(dtype)
        xi[0, 0] = info.min
        want_i = _ort_pool("MaxPool", xi, k, strides, padding, dilation, ceil_mode)
        np.testing.assert_array_equal(run_op("nn.max_pool2d", [xi], attrs), want_i)


def test_max_pool2d_wide_map_matches_onnxruntime(rng):
    """A map wide enough that only the border of the stride phases is padded (not the whole)."""
    x = rand(rng, 2, 3, 21, 75)
    want = _ort_pool("MaxPool", x, (3, 3), (1, 2), (1, 1, 2, 1), (1, 1), True)
    got = run_op("nn.max_pool2d", [x], _pool_attrs((3, 3), (1, 2), (1, 1, 2, 1), (1, 1), True))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("k, strides, padding, dilation, ceil_mode", POOL_CASES)
def test_avg_pool2d_matches_onnxruntime(rng, k, strides, padding, dilation, ceil_mode, count_include_pad):
    x = rand(rng, 2, 3, 11, 10)
    want = _ort_pool(
        "AveragePool", x, k, strides, padding, dilation, ceil_mode, count_include_pad=int(count_include_pad)
    )
    attrs = _pool_attrs(k, strides, padding, dilation, ceil_mode, count_include_pad=count_include_pad)
    assert_close(run_op("nn.avg_pool2d", [x], attrs), want)
    assert_close(_nhwc_roundtrip("nn.avg_pool2d", x, attrs), want)
    # integers: the float average (exact in float64) rounded half away from zero
    for dtype in (np.uint8, np.int8, np.int32):
        lo, hi = (-(2**20), 2**20) if dtype == np.int32 else (np.iinfo(dtype).min, np.iinfo(dtype).max)
        xi = rng.integers(lo, hi, x.shape, endpoint=True).astype(dtype)
        exact = run_op("nn.avg_pool2d", [xi.astype(np.float64)], attrs)
        got = run_op("nn.avg_pool2d", [xi], attrs)
        np.testing.assert_array_equal(got, round_half_away(exact).astype(dtype))


def test_avg_pool2d_integer_rounds_half_away_from_zero():
    x = np.array([[[[1, 2], [-1, -2]]]], dtype=np.int8)  # window means 1.5 and -1.5
    got = run_op("nn.avg_pool2d", [x], {"pool_size": (1, 2), "strides": (1, 2)})
    np.testing.assert_array_equal(got.reshape(-1), [2, -2])


@pytest.mark.parametrize(
    "op, onnx_op", [("nn.global_avg_pool2d", "GlobalAveragePool"), ("nn.global_max_pool2d", "GlobalMaxPool")]
)
def test_global_pools_match_onnxruntime(rng, op, onnx_op):
    x = rand(rng, 2, 5, 7, 6)
    want = ort_run(onnx_op, [x])
    got = run_op(op, [x])
    assert got.shape == (2, 5, 1, 1)
    assert_close(got, want)
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    got_l = run_op(op, [xl], {"layout": "NHWC"})
    assert got_l.shape == (2, 1, 1, 5)
    assert_close(got_l.transpose(0, 3, 1, 2), want)


def test_global_pools_integer(rng):
    x = rng.integers(-128, 128, (2, 5, 3, 4)).astype(np.int8)
    mean = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_array_equal(run_op("nn.global_avg_pool2d", [x]), round_half_away(mean).astype(np.int8))
    np.testing.assert_array_equal(run_op("nn.global_max_pool2d", [x]), x.max(axis=(2, 3), keepdims=True))
    q = QuantParams(0.1, 3)
    _, (out,) = infer_node_types("nn.global_avg_pool2d", [TensorType(x.shape, "int8", q)], None)
    assert out.quant == q and out.shape == (2, 5, 1, 1)


# --------------------------------------------------------------------------------------
# nn.pad


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_matches_onnxruntime(rng, mode):
    x = rand(rng, 2, 3, 5, 4)
    pairs = ((0, 1), (1, 0), (2, 3), (1, 2))
    onnx_pads = np.array([b for b, _ in pairs] + [a for _, a in pairs], dtype=np.int64)
    want = ort_run("Pad", [x, onnx_pads, np.array(1.5, np.float32)], mode=mode)
    nested = run_op("nn.pad", [x], {"pad_width": pairs, "pad_mode": mode, "pad_value": 1.5})
    flat = run_op("nn.pad", [x], {"pad_width": tuple(v for p in pairs for v in p), "pad_mode": mode, "pad_value": 1.5})
    np.testing.assert_array_equal(nested, want)
    np.testing.assert_array_equal(flat, want)


def test_pad_integer_keeps_quant():
    x = np.arange(6, dtype=np.uint8).reshape(1, 2, 3)
    q = QuantParams(0.5, 7)
    _, (out,) = infer_node_types(
        "nn.pad", [TensorType(x.shape, "uint8", q)], {"pad_width": ((0, 0), (1, 1), (0, 2)), "pad_value": 7}
    )
    assert out.quant == q and out.shape == (1, 4, 5)
    got = run_op("nn.pad", [x], {"pad_width": ((0, 0), (1, 1), (0, 2)), "pad_value": 7})
    np.testing.assert_array_equal(got, np.pad(x, ((0, 0), (1, 1), (0, 2)), constant_values=7))


# --------------------------------------------------------------------------------------
# type rules


def _infer(op: str, shapes_dtypes: Sequence[tuple[tuple[int, ...], str]], attrs: dict[str, Any] | None = None):
    return infer_node_types(op, [TensorType(s, d) for s, d in shapes_dtypes], attrs)


F32 = "float32"
REFUSALS = [
    ("nn.conv2d", [((1, 8, 5, 5), F32), ((4, 3, 3, 3), F32)], None, r"data has 8 channels but the weight .* expects 3"),
    (
        "nn.conv2d",
        [((1, 8, 5, 5), F32), ((4, 4, 3, 3), F32)],
        {"groups": 3},
        r"groups=3 does not divide the 8 input channels",
    ),
    (
        "nn.conv2d",
        [((1, 8, 5, 5), F32), ((6, 2, 3, 3), F32)],
        {"groups": 4},
        r"groups=4 does not divide the 6 output channels",
    ),
    (
        "nn.conv2d",
        [((1, 8, 5, 5), F32), ((4, 8, 7, 7), F32)],
        None,
        r"kernel extent 7x7 .* larger than the padded input 5x5",
    ),
    ("nn.conv2d", [((1, 8, 5, 5), F32), ((4, 8, 3, 3), "float64")], None, r"one dtype for all inputs"),
    (
        "nn.conv2d",
        [((1, 8, 5, 5), F32), ((4, 8, 3, 3), F32)],
        {"data_layout": "NCWH"},
        r"data_layout 'NCWH' is not supported",
    ),
    ("nn.conv2d", [((1, 8, 5, 5), F32), ((4, 8, 3, 3), F32)], {"kernel_layout": "HWOI"}, r"kernel_layout 'HWOI'"),
    ("nn.conv2d", [((1, 8, 5, 5), F32), ((4, 8, 3, 3), F32)], {"strides": (0, 1)}, r"strides must be positive"),
    (
        "nn.conv2d",
        [((1, 8, 5, 5), F32), ((4, 8, 3, 3), F32)],
        {"padding": (1, 2, 3)},
        r"padding must be an int or a tuple",
    ),
    (
        "nn.conv2d",
        [((1, 8, 5, 5), F32), ((4, 8, 3, 3), F32)],
        {"padding": (-1, 0, 0, 0)},
        r"padding must be non-negative",
    ),
    ("nn.conv2d", [((8, 5, 5), F32), ((4, 8, 3, 3), F32)], None, r"data must be 4-D"),
    ("nn.conv2d", [((1, 8, 5, 5), F32), ((4, 8, 3, 3), F32)], {"groups": 0}, r"groups must be a positive int"),
    ("nn.conv2d", [((1, 8, 5, 5), "bool"), ((4, 8, 3, 3), "bool")], None, r"float or integer"),
    ("nn.conv2d_transpose", [((1, 8, 5, 5), F32), ((4, 2, 3, 3), F32)], None, r"weight .* has 4 input channels"),
    ("nn.conv2d_transpose", [((1, 8, 5, 5), F32), ((8, 2, 3, 3), F32)], {"groups": 3}, r"groups=3 does not divide"),
    ("nn.conv2d_transpose", [((1, 8, 5, 5), F32), ((8, 2, 3, 3), F32)], {"output_padding": (1, 1)}, r"output_padding"),
    ("nn.conv2d_transpose", [((1, 8, 2, 2), F32), ((8, 2, 2, 2), F32)], {"padding": (2, 2, 2, 2)}, r"empty output"),
    ("nn.dense", [((3, 5), F32), ((4, 6), F32)], None, r"K=5 features .* expects K=6"),
    ("nn.dense", [((3, 5), F32), ((4, 5, 1), F32)], None, r"weight must be 2-D"),
    ("nn.batch_matmul", [((2, 3, 5), F32), ((2, 4, 6), F32)], None, r"inner dimensions differ"),
    ("nn.batch_matmul", [((2, 3, 5), F32), ((3, 4, 5), F32)], None, r"batch sizes 2 and 3 do not broadcast"),
    ("nn.bias_add", [((1, 4, 3, 3), F32), ((3,), F32)], None, r"bias must have shape \[4\]"),
    ("nn.batch_norm", [((1, 4, 3), "int8")] + [((4,), "int8")] * 4, None, r"takes float tensors"),
    ("nn.batch_norm", [((1, 4, 3), F32)] * 1 + [((4,), F32)] * 3 + [((5,), F32)], None, r"var must have shape \[4\]"),
    ("nn.instance_norm", [((2, 4), F32), ((4,), F32), ((4,), F32)], None, r"rank >= 3"),
    (
        "nn.max_pool2d",
        [((1, 2, 6, 6), F32)],
        {"pool_size": (2, 2), "padding": (2, 0, 0, 0)},
        r"padding .* smaller than the pooling window",
    ),
    ("nn.max_pool2d", [((1, 2, 3, 3), F32)], {"pool_size": (4, 4)}, r"larger than the padded input"),
    ("nn.max_pool2d", [((1, 2, 6, 6), F32)], None, r"missing required attribute 'pool_size'"),
    (
        "nn.avg_pool2d",
        [((1, 2, 6, 6), F32)],
        {"pool_size": (2, 2), "layout": "HWCN"},
        r"layout 'HWCN' is not supported",
    ),
    ("nn.global_avg_pool2d", [((1, 2, 6), F32)], None, r"data must be 4-D"),
    ("nn.pad", [((2, 3), F32)], {"pad_width": ((1, 1),)}, r"1 \(before, after\) pairs for data of rank 2"),
    (
        "nn.pad",
        [((2, 3), F32)],
        {"pad_width": (1, 1, 0, 3), "pad_mode": "reflect"},
        r"reflect padding \(0, 3\) of axis 1",
    ),
    ("nn.pad", [((2, 3), "uint8")], {"pad_width": (1, 1, 0, 0), "pad_value": 300}, r"not representable in uint8"),
    ("nn.pad", [((2, 3), F32)], {"pad_width": (1, 1, 0, 0), "pad_mode": "wrap"}, r"pad_mode 'wrap' is not supported"),
    ("nn.pad", [((2, 3), F32)], {"pad_width": (1, -1, 0, 0)}, r"non-negative"),
]


@pytest.mark.parametrize("op, inputs, attrs, message", REFUSALS)
def test_type_rules_refuse_with_a_reason(op, inputs, attrs, message):
    with pytest.raises(TypeInferenceError, match=message) as info:
        _infer(op, inputs, attrs)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(op)


def test_conv2d_refuses_quantized_input():
    q = QuantParams(0.1, 128)
    with pytest.raises(TypeInferenceError, match=r"qnn\.conv2d"):
        infer_node_types(
            "nn.conv2d", [TensorType((1, 4, 5, 5), "uint8", q), TensorType((4, 4, 3, 3), "uint8", q)], None
        )


def test_graph_node_is_typed_and_runs(rng):
    """Built through the IR: ``new_node`` infers the type, the kernel runs on the node's constant weight."""
    x = Value("x", TensorType((1, 16, 8, 8), F32))
    g = Graph([x], [], [])
    w = g.new_const(rand(rng, 32, 3, 3, 16), "w")  # OHWI
    node = g.new_node("nn.conv2d", [x, w], {"padding": (1, 1, 1, 1), "kernel_layout": "OHWI", "strides": (2, 2)})
    g.nodes = [node]
    g.outputs = [node.output]
    g.lint()
    assert node.output.type == TensorType((1, 32, 4, 4), F32)
    ctx = OpContext(node.op, node.attrs, (x.type, w.type), (node.output.type,), (None, w.const), node.name)
    data = rand(rng, 1, 16, 8, 8)
    got = get_op(node.op).bind(ctx)(data, w.const)
    want = ort_run(
        "Conv", [data, np.ascontiguousarray(w.const.transpose(0, 3, 1, 2))], pads=[1, 1, 1, 1], strides=[2, 2]
    )
    assert_close(got, want)


# --------------------------------------------------------------------------------------
# multiply-accumulate counts


def _macs(op: str, inputs: Sequence[tuple[tuple[int, ...], str]], attrs: dict[str, Any] | None = None) -> int:
    types = [TensorType(s, d) for s, d in inputs]
    full, outs = infer_node_types(op, types, attrs)
    opdef = get_op(op)
    assert opdef.macs is not None
    return opdef.macs(OpContext(op, full, tuple(types), tuple(outs)))


def test_macs():
    # ResNet-18's first conv: 64 * 112 * 112 outputs, 3 * 7 * 7 each
    assert (
        _macs(
            "nn.conv2d", [((1, 3, 224, 224), F32), ((64, 3, 7, 7), F32)], {"strides": (2, 2), "padding": (3, 3, 3, 3)}
        )
        == 118013952
    )
    # depthwise 3x3 on 32 channels at 10x10 (same padding): 32*100*9
    assert (
        _macs("nn.conv2d", [((1, 32, 10, 10), F32), ((32, 1, 3, 3), F32)], {"groups": 32, "padding": (1, 1, 1, 1)})
        == 28800
    )
    # grouped NHWC/HWIO: 2 * 5*5 outputs * 8 channels * (4 * 3 * 3)
    assert (
        _macs(
            "nn.conv2d",
            [((2, 7, 7, 8), F32), ((3, 3, 4, 8), F32)],
            {"groups": 2, "data_layout": "NHWC", "kernel_layout": "HWIO"},
        )
        == 2 * 25 * 8 * 36
    )
    assert (
        _macs("nn.conv2d_transpose", [((1, 4, 5, 5), F32), ((4, 3, 3, 3), F32)], {"strides": (2, 2)}) == 4 * 25 * 3 * 9
    )
    assert _macs("nn.dense", [((2, 3, 17), F32), ((9, 17), F32)]) == 6 * 9 * 17
    assert _macs("nn.batch_matmul", [((1, 4, 5), F32), ((3, 6, 5), F32)]) == 3 * 4 * 6 * 5


@pytest.mark.parametrize("kernel_layout", ["OIHW", "OHWI", "HWIO"])
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_conv_macs_are_the_geometry_s(kernel_layout: str, groups: int) -> None:
    """The MAC count taken from the weight's elements per output channel is the geometry's count."""
    from accel.ops.geometry import conv2d_geometry

    dims = {"O": 12, "I": 6 // groups, "H": 3, "W": 2}
    weight = tuple(dims[c] for c in kernel_layout)
    attrs = {"groups": groups, "kernel_layout": kernel_layout, "strides": (2, 1), "padding": (1, 0, 2, 1)}
    x = (2, 6, 9, 7)
    full, _ = infer_node_types("nn.conv2d", [TensorType(x, F32), TensorType(weight, F32)], attrs)
    assert _macs("nn.conv2d", [(x, F32), (weight, F32)], attrs) == conv2d_geometry(full, x, weight).macs


# --------------------------------------------------------------------------------------
# small-tensor paths: the index gathers against the strided / phase kernels, bit for bit
#
# Small convolutions and pools gather their columns or taps with one precomputed index
# (nn._IndexGather) instead of padding and copying strided views. Both paths must give
# the same bits (the same columns feed the same matmul, the same taps meet in the same
# order), so the ONNX Runtime comparisons above, which now run the gathers on their small
# shapes, vouch for the strided kernels too. Each case is forced down both paths.


def _force_gather(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    monkeypatch.setattr(nn, "GATHER_MAX_ELEMENTS", 1 << 40 if on else 0)
    monkeypatch.setattr(nn, "GATHER_MAX_INDEX", 1 << 40 if on else 0)


def assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    """Equal dtype, shape and bytes: also the sign of zeros and the payload of NaNs."""
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _signed_zeros(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x.reshape(-1)[::7] = 0.0
    x.reshape(-1)[3::7] = -0.0
    return x


def _both_paths(monkeypatch, run, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``run(*args, **kwargs)`` with the gather path forced, then with the strided path forced."""
    _force_gather(monkeypatch, True)
    gathered = run(*args, **kwargs)
    _force_gather(monkeypatch, False)
    return gathered, run(*args, **kwargs)


def _built_conv2d_f64(attrs: dict[str, Any], x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return nn.build_conv2d(attrs, x.shape, w.shape, np.dtype(np.float64), w)(x, None)


GATHER_CONV_CASES = [
    *CONV_CASES,
    pytest.param(1, 1, 8, 8, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, id="digits-conv1"),
    pytest.param(1, 16, 8, 8, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, id="digits-conv2"),
    pytest.param(1, 32, 4, 4, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, id="digits-conv3"),
    pytest.param(1, 64, 28, 28, 64, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, id="large-64ch-28"),
    pytest.param(1, 3, 56, 56, 16, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1, id="large-stem"),
]


@pytest.mark.parametrize("n, c, h, w, o, k, strides, padding, dilation, groups", GATHER_CONV_CASES)
def test_conv2d_gather_path_matches_strided_path(
    rng, monkeypatch, n, c, h, w, o, k, strides, padding, dilation, groups
):
    x = _signed_zeros(rand(rng, n, c, h, w))
    wt = rand(rng, o, c // groups, *k)
    for data_layout, kernel_layout in (("NCHW", "OIHW"), ("NHWC", "OHWI")):
        xl = np.ascontiguousarray(x.transpose(["NCHW".index(a) for a in data_layout]))
        wl = np.ascontiguousarray(wt.transpose(["OIHW".index(a) for a in kernel_layout]))
        attrs = dict(
            _conv_attrs(strides, padding, dilation, groups), data_layout=data_layout, kernel_layout=kernel_layout
        )
        for consts in ((1,), ()):
            gathered, strided = _both_paths(monkeypatch, run_op, "nn.conv2d", [xl, wl], attrs, consts=consts)
            assert_same_bits(gathered, strided)
        # integers in float64, as qnn.conv2d runs them: exact either way
        xi = rng.integers(-128, 128, xl.shape).astype(np.int8)
        wi = rng.integers(-128, 128, wl.shape).astype(np.float64)
        gathered, strided = _both_paths(monkeypatch, _built_conv2d_f64, attrs, xi, wi)
        assert_same_bits(gathered, strided)


def test_small_conv_takes_the_gather_path_and_large_ones_do_not(monkeypatch):
    built: list[int] = []
    init = nn._IndexGather.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self.row)

    monkeypatch.setattr(nn._IndexGather, "__init__", spy)
    attrs = {"padding": (1, 1, 1, 1)}
    nn.build_conv2d(attrs, (1, 16, 8, 8), (32, 16, 3, 3), np.dtype(np.float32))
    assert built == [16]  # channels-last columns move whole rows of 16 channels
    nn.build_conv2d(attrs, (1, 1, 8, 8), (16, 1, 3, 3), np.dtype(np.float32))
    assert built == [16, 1]  # one channel: element by element
    nn.build_conv2d(attrs, (1, 64, 56, 56), (64, 64, 3, 3), np.dtype(np.float32))
    assert len(built) == 2


def test_index_gather_rows_and_elements(rng):
    """Whole runs of the last axis move as rows; anything else falls back to elements."""
    x = rand(rng, 2, 5, 4, 6)

    def shifted_rows(a: np.ndarray, fill: Any, dtype: np.dtype) -> np.ndarray:
        padded = np.concatenate([np.full((2, 1, 4, 6), fill, dtype), a.astype(dtype)], axis=1)
        return np.ascontiguousarray(padded[:, ::-1].reshape(2, 3, 2, 4, 6))

    def odd_elements(a: np.ndarray, fill: Any, dtype: np.dtype) -> np.ndarray:
        return np.ascontiguousarray(np.concatenate([a.astype(dtype).reshape(-1)[1::2], np.full(3, fill, dtype)]))

    for columns, row in ((shifted_rows, 6), (odd_elements, 1)):
        g = nn._IndexGather(x.shape, columns, np.dtype(np.float64), fill=-7.5, row=6)
        assert g.row == row
        assert_same_bits(g(x), columns(x, -7.5, np.dtype(np.float64)))
        assert_same_bits(g(np.asfortranarray(x)), columns(x, -7.5, np.dtype(np.float64)))  # any memory order


# (shape, pool case): every POOL_CASES geometry on the maps of the ONNX Runtime tests and of
# the digits model, and ResNet's pool on its full-size map
POOL_GATHER_CASES = [
    *[pytest.param((2, 3, 11, 10), *case.values, id=f"small-{case.id}") for case in POOL_CASES],
    *[pytest.param((1, 32, 8, 8), *case.values, id=f"digits-{case.id}") for case in POOL_CASES],
    pytest.param((1, 64, 56, 56), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, id="large-resnet"),
]


@pytest.mark.parametrize("shape, k, strides, padding, dilation, ceil_mode", POOL_GATHER_CASES)
def test_pool_gather_path_matches_phase_and_strided_paths(
    rng, monkeypatch, shape, k, strides, padding, dilation, ceil_mode
):
    # mostly zeros of both signs and negatives: many windows have a zero maximum, whose sign
    # shows the order the taps met in
    xf = -np.abs(rand(rng, *shape))
    xf.reshape(-1)[rng.random(xf.size) < 0.3] = 0.0
    xf.reshape(-1)[rng.random(xf.size) < 0.3] = -0.0
    xf.reshape(-1)[5::97] = np.nan
    xf.reshape(-1)[6::89] = -np.inf
    xi = rng.integers(-128, 128, shape).astype(np.int8)
    xu = rng.integers(0, 256, shape).astype(np.uint8)
    for layout in ("NCHW", "NHWC"):
        for x in (xf, xf.astype(np.float16), xi, xu):
            xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if layout == "NHWC" else x
            for op, extra in (("nn.max_pool2d", {}), ("nn.avg_pool2d", {"count_include_pad": bool(dilation[0] - 1)})):
                attrs = _pool_attrs(k, strides, padding, dilation, ceil_mode, layout=layout, **extra)
                with np.errstate(invalid="ignore"):
                    gathered, strided = _both_paths(monkeypatch, run_op, op, [xl], attrs)
                assert_same_bits(gathered, strided)


@pytest.mark.parametrize("shape, axis", [((1, 16, 8, 8), 1), ((1, 10), 1), ((2, 64, 28, 28), 1), ((2, 7, 7, 96), -1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_bias_add_constant_and_runtime_bias_agree(rng, shape, axis, dtype):
    """A constant bias is repeated to the full shape of small tensors, broadcast on large ones."""
    x = (rand(rng, *shape) * 1000).astype(dtype)
    b = (rand(rng, shape[axis]) * 1000).astype(dtype)
    if dtype == np.int32:
        x.reshape(-1)[:3] = [2**31 - 1, -(2**31), 2**31 - 5]  # wraps like the dtype
    const = run_op("nn.bias_add", [x, b], {"axis": axis}, consts=(1,))
    runtime = run_op("nn.bias_add", [x, b], {"axis": axis})
    assert_same_bits(const, runtime)
    with np.errstate(over="ignore"):
        want = x + b.reshape([-1 if a == axis % x.ndim else 1 for a in range(x.ndim)])
    assert_same_bits(const, want)


def test_pool_geometry_memo_answers_only_what_it_would_compute():
    """pool2d_geometry remembers geometries of frozen attributes; an equal spelling it must refuse
    (a float size, a list, 1 for ceil_mode) is still validated, never answered from the memo."""
    from accel.ops import geometry

    attrs = {"layout": "NCHW", "pool_size": (3, 3), "strides": (2, 2), "dilation": (1, 1),
             "padding": (1, 1, 1, 1), "ceil_mode": True}  # fmt: skip
    first = geometry.pool2d_geometry(attrs, (1, 8, 9, 9))
    assert geometry.pool2d_geometry(dict(attrs), (1, 8, 9, 9)) is first  # (remembered)
    assert first == geometry._pool2d_geometry(attrs, (1, 8, 9, 9))
    assert (first.oh, first.ow, first.eb, first.er) == (5, 5, 0, 0)
    with pytest.raises(TypeInferenceError, match="pool_size must be"):
        geometry.pool2d_geometry({**attrs, "pool_size": (3.0, 3.0)}, (1, 8, 9, 9))
    with pytest.raises(TypeInferenceError, match="must be 4-D"):
        geometry.pool2d_geometry(attrs, (8, 9, 9))
    for spelled in ({**attrs, "pool_size": [3, 3]}, {**attrs, "ceil_mode": 1}):
        g = geometry.pool2d_geometry(spelled, (1, 8, 9, 9))
        assert g == first and g is not first
    # another shape, another geometry (ceil_mode's last window reaching into the end padding)
    wider = geometry.pool2d_geometry(attrs, (1, 8, 10, 10))
    assert (wider.oh, wider.eb) == (6, 1) and wider == geometry._pool2d_geometry(attrs, (1, 8, 10, 10))
