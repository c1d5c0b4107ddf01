"""Tensor ops: reference kernels against ONNX Runtime single-node models, type rules."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import ort_helpers
import pytest
from onnx import helper
from ort_helpers import infer, ort_run

from accel.errors import TypeInferenceError
from accel.ir import QuantParams, TensorType

RNG = np.random.default_rng(7)


def run_op(
    op: str,
    arrays: Sequence[np.ndarray],
    attrs: dict[str, Any] | None = None,
    quants: Sequence[QuantParams | None] = (),
) -> Any:
    """The shared harness, also requiring C-contiguous outputs: a tensor op must not hand back a view."""
    return ort_helpers.run_op(op, arrays, attrs, quants, contiguous=True)


def f32(*shape: int) -> np.ndarray:
    return np.asarray(RNG.standard_normal(shape), dtype=np.float32)


def same(ours: np.ndarray, ref: np.ndarray) -> None:
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    np.testing.assert_array_equal(ours, ref)


# -- reshape / transpose / layout_transform ---------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "newshape"), [((2, 3, 4), (6, 4)), ((2, 3, 4), (24,)), ((1, 8, 1, 1), (1, 8)), ((5,), (1, 5, 1))]
)
def test_reshape(shape: tuple[int, ...], newshape: tuple[int, ...]) -> None:
    x = f32(*shape)
    (ref,) = ort_run("Reshape", [x], consts=[np.array(newshape, np.int64)])
    same(run_op("reshape", [x], {"newshape": newshape}), ref)


def test_reshape_rules() -> None:
    t = TensorType((2, 3, 4), "float32")
    with pytest.raises(TypeInferenceError, match="24 elements"):
        infer("reshape", [t], {"newshape": (5, 5)})
    with pytest.raises(TypeInferenceError, match="concrete"):
        infer("reshape", [t], {"newshape": (-1, 4)})
    with pytest.raises(TypeInferenceError, match="24 elements"):  # 0 is a real zero-size dim, not ONNX's copy-dim
        infer("reshape", [t], {"newshape": (0, 12)})
    (o,) = infer("reshape", [TensorType((0, 3), "float32")], {"newshape": (3, 0)})
    assert o.shape == (3, 0)
    q = QuantParams(0.5, 3)
    (o,) = infer("reshape", [TensorType((2, 3, 4), "uint8", q)], {"newshape": (6, 4)})
    assert o.quant == q
    pc = QuantParams(np.arange(1, 9) / 8, 0, axis=1)
    (o,) = infer("reshape", [TensorType((1, 8, 1, 1), "int8", pc)], {"newshape": (1, 8)})
    assert o.quant == pc and o.quant.axis == 1
    (o,) = infer("reshape", [TensorType((1, 8, 1, 1), "int8", pc)], {"newshape": (8, 1)})
    assert o.quant.axis == 0
    with pytest.raises(TypeInferenceError, match="per-channel quantization axis"):
        infer("reshape", [TensorType((2, 8), "int8", pc)], {"newshape": (16,)})


@pytest.mark.parametrize("perm", [(0, 2, 3, 1), (0, 3, 1, 2), (3, 2, 1, 0), (1, 0, 2, 3), (0, 1, 2, 3)])
def test_transpose(perm: tuple[int, ...]) -> None:
    x = f32(2, 3, 4, 5)
    (ref,) = ort_run("Transpose", [x], {"perm": list(perm)})
    same(run_op("transpose", [x], {"axes": perm}), ref)
    neg = tuple(p - 4 for p in perm)
    same(run_op("transpose", [x], {"axes": neg}), ref)


@pytest.mark.parametrize(
    ("shape", "perm"),
    [
        ((1, 3, 40, 50), (0, 2, 3, 1)),  # an image to NHWC: one slice of the small axis at a time
        ((2, 40, 50, 3), (0, 3, 1, 2)),  # and back
        ((16, 5, 7, 9), (1, 2, 3, 0)),  # the largest axis moved that way
        ((17, 5, 7, 9), (1, 2, 3, 0)),  # one too large: numpy's own copy
        ((2, 3, 4, 5, 6, 7), (0, 2, 3, 4, 5, 1)),
        ((3, 40, 50), (1, 0, 2)),  # a middle axis moved
        ((1, 1, 8, 8), (0, 2, 3, 1)),  # only axes of size 1 move: a reshape
        ((2, 1, 3, 1), (3, 0, 2, 1)),
    ],
)
@pytest.mark.parametrize("dtype", ["uint8", "float32", "int64"])
def test_transpose_of_large_tensors(shape, perm, dtype) -> None:
    """Transposes that move one small axis, as the layout transposes at partition boundaries do, against ONNX Runtime."""
    x = (np.random.default_rng(4).standard_normal(shape) * 60).astype(dtype)
    (ref,) = ort_run("Transpose", [x], {"perm": list(perm)})
    got = run_op("transpose", [x], {"axes": perm})
    assert got.flags.c_contiguous
    same(got, ref)


def test_transpose_default_reverses_and_rules() -> None:
    x = f32(2, 3, 4)
    (ref,) = ort_run("Transpose", [x])
    same(run_op("transpose", [x], {"axes": None}), ref)
    t = TensorType((2, 3, 4), "float32")
    with pytest.raises(TypeInferenceError, match="not a permutation"):
        infer("transpose", [t], {"axes": (0, 0, 1)})
    with pytest.raises(TypeInferenceError, match="each of the 3"):
        infer("transpose", [t], {"axes": (0, 1)})
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer("transpose", [t], {"axes": (0, 1, 3)})
    pc = QuantParams([0.1, 0.2, 0.3], 0, axis=1)
    (o,) = infer("transpose", [TensorType((2, 3, 4), "int8", pc)], {"axes": (2, 0, 1)})
    assert o.shape == (4, 2, 3) and o.quant.axis == 2


@pytest.mark.parametrize(("src", "dst"), [("NCHW", "NHWC"), ("NHWC", "NCHW"), ("NCHW", "CHWN"), ("OIHW", "HWIO")])
def test_layout_transform(src: str, dst: str) -> None:
    x = f32(2, 3, 4, 5)
    perm = [src.index(c) for c in dst]
    (ref,) = ort_run("Transpose", [x], {"perm": perm})
    same(run_op("layout_transform", [x], {"src_layout": src, "dst_layout": dst}), ref)


def test_layout_transform_rules() -> None:
    t = TensorType((2, 3, 4, 5), "float32")
    with pytest.raises(TypeInferenceError, match="not a permutation"):
        infer("layout_transform", [t], {"src_layout": "NCHW", "dst_layout": "NHWD"})
    with pytest.raises(TypeInferenceError, match="rank"):
        infer("layout_transform", [t], {"src_layout": "NCW", "dst_layout": "NWC"})
    with pytest.raises(TypeInferenceError, match="repeats"):
        infer("layout_transform", [t], {"src_layout": "NCCW", "dst_layout": "NCCW"})
    pc = QuantParams([0.1, 0.2, 0.3], 0, axis=1)
    (o,) = infer(
        "layout_transform", [TensorType((1, 3, 4, 5), "uint8", pc)], {"src_layout": "NCHW", "dst_layout": "NHWC"}
    )
    assert o.shape == (1, 4, 5, 3) and o.quant.axis == 3


# -- concatenate / split -----------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, 3, -1])
def test_concatenate(axis: int) -> None:
    shapes = []
    for size in (2, 3, 1):
        s = [2, 3, 4, 5]
        s[axis] = size
        shapes.append(s)
    xs = [f32(*s) for s in shapes]
    (ref,) = ort_run("Concat", xs, {"axis": axis})
    same(run_op("concatenate", xs, {"axis": axis}), ref)
    ints = [RNG.integers(0, 255, size=s).astype(np.uint8) for s in shapes]
    (ref,) = ort_run("Concat", ints, {"axis": axis})
    same(run_op("concatenate", ints, {"axis": axis}), ref)


def test_concatenate_rules() -> None:
    a = TensorType((2, 3), "float32")
    with pytest.raises(TypeInferenceError, match="one dtype"):
        infer("concatenate", [a, TensorType((2, 3), "float16")])
    with pytest.raises(TypeInferenceError, match="off axis 0"):
        infer("concatenate", [a, TensorType((2, 4), "float32")])
    with pytest.raises(TypeInferenceError, match="rank"):
        infer("concatenate", [a, TensorType((2, 3, 1), "float32")])
    q1, q2 = QuantParams(0.1, 5), QuantParams(0.2, 5)
    with pytest.raises(TypeInferenceError, match=r"qnn\.concatenate"):
        infer("concatenate", [TensorType((2, 3), "uint8", q1), TensorType((2, 3), "uint8", q2)])
    (o,) = infer("concatenate", [TensorType((2, 3), "uint8", q1)] * 3, {"axis": 1})
    assert o.shape == (2, 9) and o.quant == q1
    # per-channel parameters on the joined axis are joined too
    pa, pb = QuantParams([0.1, 0.2], [1, 2], axis=1), QuantParams([0.3], [3], axis=1)
    (o,) = infer("concatenate", [TensorType((4, 2), "int8", pa), TensorType((4, 1), "int8", pb)], {"axis": 1})
    assert o.quant == QuantParams([0.1, 0.2, 0.3], [1, 2, 3], axis=1)


@pytest.mark.parametrize(("axis", "sizes"), [(0, (2, 2)), (1, (1, 4, 1)), (2, (3,)), (-1, (1, 1, 3)), (1, (0, 6))])
def test_split_points(axis: int, sizes: tuple[int, ...]) -> None:
    shape = [4, 6, 3, 5]
    shape[axis] = sum(sizes)
    x = f32(*shape)
    refs = ort_run("Split", [x], {"axis": axis}, consts=[np.array(sizes, np.int64)], n_out=len(sizes))
    points = tuple(np.cumsum(sizes)[:-1].tolist())
    ours = run_op("split", [x], {"indices_or_sections": points, "axis": axis})
    assert isinstance(ours, tuple) and len(ours) == len(refs)
    for o, r in zip(ours, refs, strict=True):
        same(o, r)


@pytest.mark.parametrize(("axis", "sections"), [(1, 3), (0, 1), (3, 5)])
def test_split_sections(axis: int, sections: int) -> None:
    x = RNG.integers(-100, 100, size=(2, 6, 3, 5)).astype(np.int8)
    refs = ort_run("Split", [x], {"axis": axis, "num_outputs": sections}, n_out=sections)
    ours = run_op("split", [x], {"indices_or_sections": sections, "axis": axis})
    assert len(ours) == sections
    for o, r in zip(ours, refs, strict=True):
        same(o, r)


def test_split_rules() -> None:
    t = TensorType((4, 6), "float32")
    with pytest.raises(TypeInferenceError, match="equal sections"):
        infer("split", [t], {"indices_or_sections": 4, "axis": 1})
    with pytest.raises(TypeInferenceError, match="non-decreasing"):
        infer("split", [t], {"indices_or_sections": (4, 2), "axis": 1})
    with pytest.raises(TypeInferenceError, match=r"within 0\.\.6"):
        infer("split", [t], {"indices_or_sections": (2, 7), "axis": 1})
    with pytest.raises(TypeInferenceError, match="missing required"):
        infer("split", [t])
    pc = QuantParams([0.1, 0.2, 0.3, 0.4], 0, axis=0)
    outs = infer("split", [TensorType((4, 6), "int8", pc)], {"indices_or_sections": (1,), "axis": 0})
    assert [o.shape for o in outs] == [(1, 6), (3, 6)]
    assert outs[0].quant == QuantParams([0.1], 0, axis=0) and outs[1].quant == QuantParams([0.2, 0.3, 0.4], 0, axis=0)
    outs = infer("split", [TensorType((4, 6), "int8", pc)], {"indices_or_sections": 2, "axis": 1})
    assert all(o.quant == pc for o in outs)


# -- depth_to_space -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize(("block", "c"), [(2, 8), (3, 9), (2, 4), (1, 3)])
def test_depth_to_space(mode: str, block: int, c: int) -> None:
    x = f32(2, c, 3, 4)
    (ref,) = ort_run("DepthToSpace", [x], {"blocksize": block, "mode": mode}, opset=13)
    same(run_op("nn.depth_to_space", [x], {"block_size": block, "mode": mode}), ref)
    # NHWC: same result in the other layout
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    out = run_op("nn.depth_to_space", [nhwc], {"block_size": block, "mode": mode, "layout": "NHWC"})
    same(out, np.ascontiguousarray(ref.transpose(0, 2, 3, 1)))


def test_depth_to_space_rules() -> None:
    t = TensorType((1, 6, 2, 2), "float32")
    with pytest.raises(TypeInferenceError, match="not divisible"):
        infer("nn.depth_to_space", [t], {"block_size": 2})
    with pytest.raises(TypeInferenceError, match="mode"):
        infer("nn.depth_to_space", [t], {"block_size": 1, "mode": "XYZ"})
    with pytest.raises(TypeInferenceError, match="layout"):
        infer("nn.depth_to_space", [t], {"block_size": 1, "layout": "NCWH"})
    with pytest.raises(TypeInferenceError, match="4-D"):
        infer("nn.depth_to_space", [TensorType((6, 2, 2), "float32")], {"block_size": 1})
    q = QuantParams(0.1, 7)
    (o,) = infer("nn.depth_to_space", [TensorType((1, 2, 2, 8), "uint8", q)], {"block_size": 2, "layout": "NHWC"})
    assert o.shape == (1, 4, 4, 2) and o.quant == q


# -- image.resize2d ---------------------------------------------------------------------------

COORD_MODES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"]
ROUNDINGS = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
# (input h, w) -> (output h, w): up, down, mixed, to 1x1, identity, non-integer ratios
RESIZES = [
    ((4, 5), (8, 10)),
    ((6, 9), (3, 3)),
    ((5, 4), (7, 3)),
    ((3, 4), (1, 1)),
    ((4, 4), (4, 4)),
    ((3, 7), (10, 5)),
    ((4, 5), (4, 11)),
    ((7, 6), (2, 6)),
]


def ort_resize(x: np.ndarray, size: tuple[int, int], **attrs: Any) -> np.ndarray:
    sizes = np.array([x.shape[0], x.shape[1], *size], np.int64)
    (ref,) = ort_run("Resize", [x], attrs, consts=[None, None, sizes], opset=18)
    return ref


@pytest.mark.parametrize("shapes", RESIZES, ids=str)
@pytest.mark.parametrize("ctm", COORD_MODES)
def test_resize_nearest(ctm: str, shapes: tuple[tuple[int, int], tuple[int, int]]) -> None:
    (ih, iw), size = shapes
    x = f32(2, 3, ih, iw)
    for rounding in ROUNDINGS:
        ref = ort_resize(x, size, mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=rounding)
        attrs = {
            "size": size,
            "method": "nearest_neighbor",
            "coordinate_transformation_mode": ctm,
            "rounding_method": rounding,
        }
        same(run_op("image.resize2d", [x], attrs), ref)


@pytest.mark.parametrize("shapes", RESIZES, ids=str)
@pytest.mark.parametrize("ctm", COORD_MODES)
def test_resize_linear(ctm: str, shapes: tuple[tuple[int, int], tuple[int, int]]) -> None:
    (ih, iw), size = shapes
    x = f32(2, 3, ih, iw)
    ref = ort_resize(x, size, mode="linear", coordinate_transformation_mode=ctm)
    ours = run_op("image.resize2d", [x], {"size": size, "method": "linear", "coordinate_transformation_mode": ctm})
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6 * float(np.max(np.abs(x))))


@pytest.mark.parametrize(
    ("in_len", "out_len", "ctm"),
    [
        (20, 6, "half_pixel"),
        (7, 2, "asymmetric"),
        (10, 12, "asymmetric"),
        (7, 19, "tf_half_pixel_for_nn"),
        (11, 13, "tf_half_pixel_for_nn"),
    ],
)
def test_resize_nearest_exact_ties(in_len: int, out_len: int, ctm: str) -> None:
    """Rational ties (e.g. 14.5 for 20 -> 6) round the preferred way although float32 misses them by an ulp."""
    from fractions import Fraction

    x = np.arange(in_len, dtype=np.float32).reshape(1, 1, in_len, 1)
    for rounding in ("round_prefer_floor", "round_prefer_ceil"):
        ours = run_op(
            "image.resize2d",
            [x],
            {"size": (out_len, 1), "coordinate_transformation_mode": ctm, "rounding_method": rounding},
        ).ravel()
        ref = ort_resize(x, (out_len, 1), mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=rounding)
        np.testing.assert_array_equal(ours, ref.ravel())
        # the exact rational coordinate, rounded as the mode says
        want = []
        for i in range(out_len):
            shift = Fraction(1, 2) if ctm != "asymmetric" else Fraction(0)
            c = (i + shift) * Fraction(in_len, out_len) - (Fraction(1, 2) if ctm == "half_pixel" else 0)
            low = c.numerator // c.denominator
            frac = c - low
            up = frac > Fraction(1, 2) or (frac == Fraction(1, 2) and rounding == "round_prefer_ceil")
            want.append(min(max(low + up, 0), in_len - 1))
        np.testing.assert_array_equal(ours, want)


def test_resize_nhwc_and_integer_data() -> None:
    x = f32(1, 4, 5, 6)
    for method in ("nearest_neighbor", "linear"):
        attrs = {"size": (7, 3), "method": method, "coordinate_transformation_mode": "align_corners"}
        nchw = run_op("image.resize2d", [x], attrs)
        nhwc = run_op("image.resize2d", [np.ascontiguousarray(x.transpose(0, 2, 3, 1))], {**attrs, "layout": "NHWC"})
        same(nhwc, np.ascontiguousarray(nchw.transpose(0, 2, 3, 1)))
    u8 = RNG.integers(0, 256, size=(2, 3, 5, 4)).astype(np.uint8)
    q = QuantParams(0.02, 100)
    near = run_op("image.resize2d", [u8], {"size": (9, 7)}, quants=[q])
    same(near, ort_resize(u8, (9, 7), mode="nearest"))
    lin = run_op("image.resize2d", [u8], {"size": (9, 7), "method": "linear"}, quants=[q])
    # ORT truncates its float result; ours rounds half away from zero: within one.
    ref = ort_resize(u8, (9, 7), mode="linear")
    assert lin.dtype == np.uint8 and np.max(np.abs(lin.astype(int) - ref.astype(int))) <= 1
    as_float = run_op("image.resize2d", [u8.astype(np.float32)], {"size": (9, 7), "method": "linear"})
    same(lin, np.floor(as_float + 0.5).astype(np.uint8))
    (t,) = infer("image.resize2d", [TensorType((2, 3, 5, 4), "uint8", q)], {"size": (9, 7)})
    assert t.quant == q


def test_resize_rules() -> None:
    t = TensorType((1, 3, 4, 4), "float32")
    with pytest.raises(TypeInferenceError, match="method"):
        infer("image.resize2d", [t], {"size": (8, 8), "method": "cubic"})
    with pytest.raises(TypeInferenceError, match="coordinate_transformation_mode"):
        infer("image.resize2d", [t], {"size": (8, 8), "coordinate_transformation_mode": "tf_crop_and_resize"})
    with pytest.raises(TypeInferenceError, match="rounding_method"):
        infer("image.resize2d", [t], {"size": (8, 8), "rounding_method": "round"})
    with pytest.raises(TypeInferenceError, match="size"):
        infer("image.resize2d", [t], {"size": (8, 0)})
    with pytest.raises(TypeInferenceError, match="size"):
        infer("image.resize2d", [t], {"size": (8,)})
    with pytest.raises(TypeInferenceError, match="4-D"):
        infer("image.resize2d", [TensorType((3, 4, 4), "float32")], {"size": (8, 8)})
    (o,) = infer("image.resize2d", [TensorType((1, 4, 4, 3), "float32")], {"size": (2, 6), "layout": "NHWC"})
    assert o.shape == (1, 2, 6, 3)


# -- mean -------------------------------------------------------------------------------------


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axes", [(), (1,), (2, 3), (0, -1), (-3,)])
def test_mean_float(axes: tuple[int, ...], keepdims: bool) -> None:
    x = f32(2, 3, 5, 7)
    consts = [np.array(axes, np.int64)] if axes else []
    (ref,) = ort_run("ReduceMean", [x], {"keepdims": int(keepdims)}, consts=consts)
    ours = run_op("mean", [x], {"axis": axes, "keepdims": keepdims})
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-7)


def test_mean_integer_rounds_half_away_from_zero() -> None:
    x = np.array([[1, 2], [-1, -2], [1, 1], [-3, 0], [2, 3], [127, 127]], np.int8)
    out = run_op("mean", [x], {"axis": (1,)})
    np.testing.assert_array_equal(out, [2, -2, 1, -2, 3, 127])
    assert out.dtype == np.int8
    big = RNG.integers(0, 256, size=(2, 3, 11, 13)).astype(np.uint8)
    out = run_op("mean", [big], {"axis": (2, 3), "keepdims": True})
    exact = big.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    same(out, np.floor(exact + 0.5).astype(np.uint8))
    # against ORT's float mean of the same integers
    (ref,) = ort_run("ReduceMean", [big.astype(np.float32)], {"keepdims": 1}, consts=[np.array([2, 3], np.int64)])
    np.testing.assert_array_equal(out, np.floor(ref.astype(np.float64) + 0.5))


def test_mean_rules_and_quant() -> None:
    t = TensorType((2, 3, 4), "float32")
    with pytest.raises(TypeInferenceError, match="twice"):
        infer("mean", [t], {"axis": (1, -2)})
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer("mean", [t], {"axis": (3,)})
    with pytest.raises(TypeInferenceError, match="empty axis"):
        infer("mean", [TensorType((2, 0), "float32")], {"axis": (1,)})
    (o,) = infer("mean", [t])
    assert o.shape == ()
    pc = QuantParams([0.1, 0.2, 0.3, 0.4], 0, axis=2)
    (o,) = infer("mean", [TensorType((2, 3, 4), "int8", pc)], {"axis": (0, 1)})
    assert o.shape == (4,) and o.quant.axis == 0
    (o,) = infer("mean", [TensorType((2, 3, 4), "int8", pc)], {"axis": (0, 1), "keepdims": True})
    assert o.shape == (1, 1, 4) and o.quant.axis == 2
    with pytest.raises(TypeInferenceError, match="per-channel"):
        infer("mean", [TensorType((2, 3, 4), "int8", pc)], {"axis": (2,)})


# -- cast -------------------------------------------------------------------------------------

CASTS = [
    ("float32", "int32"),
    ("float32", "int8"),
    ("float32", "uint8"),
    ("float32", "float16"),
    ("float32", "float64"),
    ("float32", "bool"),
    ("int32", "float32"),
    ("int64", "int32"),
    ("uint8", "int32"),
    ("bool", "float32"),
    ("int8", "bool"),
    ("float64", "int64"),
]


@pytest.mark.parametrize(("src", "dst"), CASTS, ids=lambda p: str(p))
def test_cast(src: str, dst: str) -> None:
    vals = np.array([-7.9, -2.5, -1.0, -0.4, 0.0, 0.3, 0.5, 1.7, 2.5, 99.99, 126.6, 3.0], np.float64)
    if dst == "uint8" or src == "uint8":
        vals = np.abs(vals)
    x = vals.reshape(3, 4).astype(src) if src != "bool" else (vals.reshape(3, 4) > 0)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    (ref,) = ort_run("Cast", [x], {"to": to}, opset=13)
    same(run_op("cast", [x], {"dtype": dst}), ref)


def test_cast_rules_and_quant() -> None:
    t = TensorType((2,), "float32")
    with pytest.raises(TypeInferenceError, match="complex64"):
        infer("cast", [t], {"dtype": "complex64"})
    q = QuantParams(0.1, 128)
    (o,) = infer("cast", [TensorType((2,), "uint8", q)], {"dtype": "int32"})
    assert o.dtype == "int32" and o.quant == q
    (o,) = infer("cast", [TensorType((2,), "uint8", q)], {"dtype": "int8"})
    assert o.quant is None
    (o,) = infer("cast", [TensorType((2,), "uint8", q)], {"dtype": "float32"})
    assert o.quant is None


def test_all_ops_are_registered() -> None:
    from accel.ops import available

    names = set(available())
    wanted = {
        "reshape",
        "transpose",
        "layout_transform",
        "concatenate",
        "split",
        "nn.depth_to_space",
        "image.resize2d",
        "mean",
        "cast",
    }
    assert wanted <= names


@pytest.mark.parametrize("op", ["transpose", "layout_transform", "nn.depth_to_space", "image.resize2d"])
def test_quantized_data_moves_bit_exactly(op: str) -> None:
    x = RNG.integers(0, 256, size=(1, 4, 3, 2)).astype(np.uint8)
    q = QuantParams(0.05, 10)
    attrs = {
        "transpose": {"axes": (0, 2, 3, 1)},
        "layout_transform": {"src_layout": "NCHW", "dst_layout": "NHWC"},
        "nn.depth_to_space": {"block_size": 2},
        "image.resize2d": {"size": (6, 4)},
    }[op]
    out = run_op(op, [x], attrs, quants=[q])
    as_float = run_op(op, [x.astype(np.float32)], attrs)
    same(out, as_float.astype(np.uint8))
    assert set(itertools.chain(np.unique(out))) <= set(np.unique(x))


def test_scalar_inputs_give_arrays() -> None:
    x = np.array(2.5, np.float32)
    cases = [
        ("mean", {}),
        ("cast", {"dtype": "bool"}),
        ("cast", {"dtype": "int32"}),
        ("transpose", {"axes": ()}),
        ("reshape", {"newshape": ()}),
        ("layout_transform", {"src_layout": "", "dst_layout": ""}),
    ]
    for op, attrs in cases:
        out = run_op(op, [x], attrs)
        assert isinstance(out, np.ndarray) and out.shape == (), op
    out = run_op("mean", [np.array([[1, 2], [3, 4]], np.int16)], {"axis": ()})
    assert isinstance(out, np.ndarray) and out.shape == () and out == 3  # 2.5 rounds away from zero
