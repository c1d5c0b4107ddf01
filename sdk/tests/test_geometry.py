"""accel_sdk/geometry.hpp against accel.ops.geometry, on random and edge windows."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from probe_build import probe

from accel import import_onnx
from accel.errors import TypeInferenceError
from accel.ops import nn
from accel.ops.geometry import conv2d_geometry, pool2d_geometry, same_padding


@pytest.fixture(scope="module")
def m():
    return probe()


def _window(rng: np.random.Generator, pool: bool) -> tuple[int, int, list[int], bool]:
    h, w = (int(x) for x in rng.integers(0, 12, 2))
    kh, kw = (int(x) for x in rng.integers(1, 6, 2))
    sh, sw, dh, dw = (int(x) for x in rng.integers(1, 4, 4))
    pads = [int(x) for x in rng.integers(0, 6 if not pool else 4, 4)]
    return h, w, [kh, kw, sh, sw, dh, dw, *pads], bool(rng.integers(0, 2))


def test_conv_output_sizes_match_the_core(m):
    rng = np.random.default_rng(11)
    agreed = refused = 0
    for _ in range(3000):
        h, w, win, _ = _window(rng, pool=False)
        kh, kw, sh, sw, dh, dw, pt, pl, pb, pr = win
        attrs = {"strides": (sh, sw), "dilation": (dh, dw), "padding": (pt, pl, pb, pr), "data_layout": "NHWC",
                 "kernel_layout": "OHWI"}  # fmt: skip
        try:
            g = conv2d_geometry(attrs, (1, h, w, 3), (2, kh, kw, 3))
        except TypeInferenceError:
            with pytest.raises(ValueError, match="is larger than the padded input"):
                m.conv2d(h, w, win)
            refused += 1
            continue
        assert m.conv2d(h, w, win) == (g.oh, g.ow), (h, w, win)
        agreed += 1
    assert agreed > 1000 and refused > 100


def test_pool_output_sizes_and_ceil_mode_extension_match_the_core(m):
    rng = np.random.default_rng(12)
    agreed = refused = ceil_grew = 0
    for _ in range(3000):
        h, w, win, ceil = _window(rng, pool=True)
        kh, kw, sh, sw, dh, dw, pt, pl, pb, pr = win
        attrs = {"pool_size": (kh, kw), "strides": (sh, sw), "dilation": (dh, dw), "padding": (pt, pl, pb, pr),
                 "layout": "NCHW", "ceil_mode": ceil}  # fmt: skip
        try:
            g = pool2d_geometry(attrs, (1, 2, h, w))
        except TypeInferenceError as e:
            with pytest.raises(
                ValueError, match=r"must be smaller than the pooling window extent|larger than the padded"
            ):
                m.pool2d(h, w, win, ceil)
            assert "padding" in str(e) or "larger" in str(e)
            refused += 1
            continue
        assert m.pool2d(h, w, win, ceil) == (g.oh, g.ow, g.eb, g.er), (h, w, win, ceil)
        ceil_grew += g.eb > 0 or g.er > 0
        agreed += 1
    assert agreed > 500 and refused > 100 and ceil_grew > 50


@pytest.mark.parametrize("upper", [True, False])
def test_same_padding_matches_the_core_and_the_onnx_importer(m, upper):
    rng = np.random.default_rng(13)
    for _ in range(500):
        size, k, s, d = int(rng.integers(0, 40)), *(int(x) for x in rng.integers(1, 6, 3))
        assert m.same_padding(size, k, s, d, upper) == same_padding(size, k, s, d, upper=upper)
    # the importer resolves auto_pad with the same rule
    auto = "SAME_UPPER" if upper else "SAME_LOWER"
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[4, 3], strides=[3, 2], auto_pad=auto)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 10, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    g = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    pool = next(n for n in g.nodes if n.op == "nn.max_pool2d")
    (pt, pb), (pl, pr) = same_padding(10, 4, 3, upper=upper), same_padding(7, 3, 2, upper=upper)
    assert pool.attrs["padding"] == (pt, pl, pb, pr)
    assert (pt, pb) != (pb, pt)  # an odd total, so upper and lower differ


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.conv_output_size(-1, 0, 0, 1, 1, 1), r"size=-1, must be in \[0, 2\^31\)"),
        (lambda m: m.conv_output_size(4, 0, 0, 0, 1, 1), r"kernel=0, must be in \[1, 2\^31\)"),
        (lambda m: m.conv_output_size(4, 0, 0, 1, 0, 1), r"stride=0"),
        (lambda m: m.conv_output_size(4, 0, 0, 3, 1, 1 << 31), r"dilation=2147483648"),
        (lambda m: m.conv_output_size(4, 1 << 31, 0, 3, 1, 1), r"padding=2147483648"),
        (lambda m: m.pool_output_size(4, 3, 0, 3, 1, 1, False), r"padding 3 must be smaller than the pooling window extent 3"),
        (lambda m: m.same_padding(4, 3, 0, 1, True), r"stride=0"),
    ],
)  # fmt: skip
def test_arguments_out_of_range_are_refused(m, call, message):
    with pytest.raises(ValueError, match=message):
        call(m)


def test_the_largest_arguments_do_not_overflow(m):
    big = (1 << 31) - 1
    assert m.conv_output_size(big, big, big, big, 1, 1) == 2 * big + 1
    assert m.conv_output_size(big, big, 0, 2, big, big) == 1
    attrs = {"pool_size": (big, 1), "strides": (big, 1), "dilation": (1, 1), "padding": (big - 1, 0, big - 1, 0),
             "layout": "NCHW", "ceil_mode": True}  # fmt: skip
    g = pool2d_geometry(attrs, (1, 1, big, 1))
    assert m.pool_output_size(big, big - 1, big - 1, big, big, 1, True) == g.oh == 2
    assert m.same_padding(big, big, big, big, True) == same_padding(big, big, big, big)


def test_the_old_names_stay_importable_from_ops_nn():
    assert nn.conv2d_geometry is conv2d_geometry and nn.pool2d_geometry is pool2d_geometry
    assert nn.ConvGeometry.__module__ == "accel.ops.geometry" and nn.PoolGeometry.__module__ == "accel.ops.geometry"
