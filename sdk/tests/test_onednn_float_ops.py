"""accel_sdk/float_ops.hpp: FloatConv / FloatDense against float64 numpy references (relative error ≤ 1e-5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onednn_build import probe
from test_onednn_int_ops import geometry, out_size


def reference_conv(g, x_nhwc, w_ohwi, bias):
    """float64 NHWC convolution with zero padding."""
    oh, ow = out_size(g)
    xp = np.pad(x_nhwc.astype(np.float64), ((0, 0), (g["pt"], g["pb"]), (g["pl"], g["pr"]), (0, 0)))
    G = g["groups"]
    icg, ocg = g["c"] // G, g["oc"] // G
    wg = w_ohwi.astype(np.float64).reshape(G, ocg, g["kh"], g["kw"], icg)
    out = np.zeros((g["batch"], oh, ow, G, ocg))
    for y in range(g["kh"]):
        for xx in range(g["kw"]):
            y0, x0 = y * g["dh"], xx * g["dw"]
            patch = xp[:, y0 : y0 + (oh - 1) * g["sh"] + 1 : g["sh"], x0 : x0 + (ow - 1) * g["sw"] + 1 : g["sw"], :]
            out += np.einsum("nhwgi,goi->nhwgo", patch.reshape(g["batch"], oh, ow, G, icg), wg[:, :, y, xx, :])
    out = out.reshape(g["batch"], oh, ow, g["oc"])
    return out if bias is None else out + bias.astype(np.float64)


def activate(y, ops):
    for kind, lo, hi in ops:
        if kind == "relu":
            y = np.maximum(y, 0)
        elif kind == "clip":
            y = np.clip(y, lo, hi)
        elif kind == "sigmoid":
            y = 1 / (1 + np.exp(-y))
        elif kind == "tanh":
            y = np.tanh(y)
        elif kind == "gelu_tanh":
            y = 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y**3)))
        elif kind == "gelu_erf":
            y = gelu_erf(y)
    return y


def close(got, want):
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got.astype(np.float64) - want).max()) / scale
    assert err <= 1e-5, f"relative error {err:.2e}"


GRID = [
    (geometry(9, 11, 16, 24, p=1), [("relu", 0, 0)]),
    (geometry(13, 12, 24, 16, s=2, p=1), [("clip", 0, 6)]),
    (geometry(10, 10, 16, 8, p=2, d=2), [("sigmoid", 0, 0)]),
    (geometry(7, 9, 12, 20, k=1), []),
    (geometry(6, 7, 8, 8, k=5, pads=(2, 1, 0, 3)), [("clip", -1, 0.5)]),
    (geometry(12, 12, 32, 32, groups=32, s=2, p=1), [("clip", 0, 6)]),
    (geometry(8, 8, 16, 32, groups=4, p=1), [("tanh", 0, 0)]),
    (geometry(6, 6, 16, 8, p=1, batch=2), [("gelu_tanh", 0, 0)]),
    (geometry(14, 14, 64, 64, p=1), [("relu", 0, 0)]),
]


@pytest.mark.parametrize("layout", ["nhwc", "nchw", "nhwc_bands"])
@pytest.mark.parametrize("weight_layout", ["oihw", "ohwi", "hwio"])
def test_float_conv_grid(layout, weight_layout):
    p = probe()
    rng = np.random.default_rng(11)
    for g, ops in GRID:
        x = rng.standard_normal((g["batch"], g["h"], g["w"], g["c"])).astype(np.float32)
        w = (rng.standard_normal((g["oc"], g["kh"], g["kw"], g["c"] // g["groups"])) * 0.2).astype(np.float32)
        bias = rng.standard_normal(g["oc"]).astype(np.float32) if ops else None
        want = activate(reference_conv(g, x, w, bias), ops)
        wl = {"ohwi": w, "oihw": w.transpose(0, 3, 1, 2), "hwio": w.transpose(1, 2, 3, 0)}[weight_layout]
        xin = x if layout != "nchw" else x.transpose(0, 3, 1, 2)
        got, impl, _reorder_in, _reorder_out = p.float_conv(
            g, np.ascontiguousarray(xin), np.ascontiguousarray(wl), bias, ops, layout, weight_layout, 2, 1
        )
        if layout == "nchw":
            got = got.transpose(0, 2, 3, 1)
        close(got, want)
        assert impl
        assert ("(bands)" in impl) == (layout == "nhwc_bands")


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_float_conv_bands_of_every_geometry(threads):
    """Bands of output rows, one a thread: first and last bands padded (top, bottom, both,
    neither), strides and dilations reaching across band edges, heights that leave a short
    last band, batches sharing the threads, one output row per image (and in all)."""
    p = probe()
    rng = np.random.default_rng(threads)
    for g in (
        geometry(7, 9, 8, 16, p=1),
        geometry(11, 6, 8, 8, k=5, pads=(2, 0, 1, 2), s=2),
        geometry(13, 10, 16, 8, p=2, d=2),
        geometry(9, 9, 24, 24, groups=24, s=2, p=1),
        geometry(5, 5, 8, 8, k=5),
        geometry(6, 8, 8, 12, p=1, batch=3),
        geometry(3, 4, 8, 8, k=3, batch=2),
    ):
        x = rng.standard_normal((g["batch"], g["h"], g["w"], g["c"])).astype(np.float32)
        w = (rng.standard_normal((g["oc"], g["kh"], g["kw"], g["c"] // g["groups"])) * 0.2).astype(np.float32)
        bias = rng.standard_normal(g["oc"]).astype(np.float32)
        ops = [("clip", 0, 6)]
        got, impl, _, _ = p.float_conv(g, x, w, bias, ops, "nhwc_bands", "ohwi", threads, 3)
        close(got, activate(reference_conv(g, x, w, bias), ops))
        assert ("(bands)" in impl) == (g["batch"] * out_size(g)[0] >= 2)  # one output row in all: no bands


def test_float_conv_picks_its_own_format_and_reorders_planar_data():
    """NCHW at the boundary: the primitive runs in a blocked or NHWC format (not the plain gemm path)."""
    p = probe()
    g = geometry(28, 28, 64, 64, p=1)
    x = np.zeros((1, 64, 28, 28), np.float32)
    w = np.zeros((64, 64, 3, 3), np.float32)
    _out, impl, reorder_in, reorder_out = p.float_conv(g, x, w, None, [], "nchw", "oihw", 1, 1)
    assert "gemm" not in impl
    assert reorder_in and reorder_out


@pytest.mark.parametrize("ops", [[], [("relu", 0, 0)], [("gelu_tanh", 0, 0)], [("clip", -0.5, 0.5)]])
@pytest.mark.parametrize("bands", [False, True])
def test_float_dense(ops, bands):
    """Blocks (bands) on 2 and 3 threads: of output columns for one row of data (none below
    32 outputs), of rows for several, a short last block."""
    p = probe()
    rng = np.random.default_rng(5)
    for m, k, n in ((1, 64, 10), (7, 300, 33), (32, 128, 128), (1, 200, 1000), (1, 50, 40), (2, 30, 7)):
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = (rng.standard_normal((n, k)) * 0.1).astype(np.float32)
        bias = rng.standard_normal(n).astype(np.float32)
        for threads in (2, 3):
            got, impl = p.float_dense(x, w, bias, ops, threads, bands)
            close(got, activate(x.astype(np.float64) @ w.T.astype(np.float64) + bias, ops))
            kind = "" if not bands else " (row blocks)" if m > 1 else " (column blocks)" if n >= 32 else ""
            assert impl.endswith(kind) and ("blocks" in impl) == bool(kind)
        got, _impl = p.float_dense(x, w, None, ops, 1, bands)
        close(got, activate(x.astype(np.float64) @ w.T.astype(np.float64), ops))


def test_float_errors_are_typed():
    p = probe()
    g = geometry(5, 5, 8, 8)
    with pytest.raises(RuntimeError, match="clip: lower bound above the upper one"):
        p.float_conv(
            g,
            np.zeros((1, 5, 5, 8), np.float32),
            np.zeros(8 * 9 * 8, np.float32),
            None,
            [("clip", 1, 0)],
            "nhwc",
            "ohwi",
            1,
            1,
        )


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_chained_convolutions_keep_their_own_format(layout):
    """conv → relu → conv in the primitives' formats, reordered once at entry and exit."""
    p = probe()
    rng = np.random.default_rng(2)
    g1 = geometry(14, 14, 16, 32, p=1)
    g2 = geometry(14, 14, 32, 24, s=2, p=1)
    x = rng.standard_normal((1, 14, 14, 16)).astype(np.float32)
    w1 = (rng.standard_normal((32, 16, 3, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((24, 32, 3, 3)) * 0.2).astype(np.float32)
    mid = np.maximum(reference_conv(g1, x, w1.transpose(0, 2, 3, 1), None), 0)
    want = reference_conv(g2, mid, w2.transpose(0, 2, 3, 1), None)
    xin = x if layout != "nchw" else x.transpose(0, 3, 1, 2)
    got = p.float_conv_chain(g1, g2, np.ascontiguousarray(xin), w1, w2, layout)
    close(got if layout == "nhwc" else got.transpose(0, 2, 3, 1), want)


def test_float_conv_runs_from_several_threads_at_once():
    """Four Python threads run the same convolution (one cached oneDNN primitive) at once:
    each call brings its own scratchpad, so each gets the reference result."""
    from concurrent.futures import ThreadPoolExecutor

    p = probe()
    rng = np.random.default_rng(8)
    g = geometry(20, 18, 16, 24, p=1)
    w = rng.standard_normal((24, 3, 3, 16)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    inputs = [rng.standard_normal((1, 20, 18, 16)).astype(np.float32) for _ in range(8)]
    wants = [reference_conv(g, x, w, b) for x in inputs]

    def run(x):
        return p.float_conv(g, x, w, b, [], "nhwc", "ohwi", 1, 20)[0]

    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            for got, want in zip(pool.map(run, inputs), wants):
                close(got, want)


def gelu_erf(y):
    return 0.5 * y * (1 + np.vectorize(math.erf, otypes=[np.float64])(y / math.sqrt(2)))


ACTIVATIONS = [
    [("relu", 0, 0)],
    [("clip", 0, 6)],
    [("clip", -1, 0.5)],
    [("sigmoid", 0, 0)],
    [("tanh", 0, 0)],
    [("gelu_tanh", 0, 0)],
    [("gelu_erf", 0, 0)],
]


def with_edges(x, rng, huge=False):
    """x with NaN, ±Inf (and, with huge, ±3e38) at random places."""
    x = x.copy()
    flat = x.reshape(-1)
    places = rng.choice(flat.size, size=max(4, flat.size // 50), replace=False)
    values = [np.nan, np.inf, -np.inf] + ([3e38, -3e38] if huge else [])
    flat[places] = np.array(values, np.float32)[np.arange(places.size) % len(values)]
    return x


def same_nans_as_unfused(got, pre, ops):
    """NaN wherever the layer without activations has NaN (the reference: act(NaN) = NaN); where
    it is finite, the activation of the unfused result (what an activation makes of ±Inf is its
    own matter: GELU gives NaN for -Inf, as the reference's formula does)."""
    assert np.isnan(got[np.isnan(pre)]).all()
    finite = np.isfinite(pre)
    assert not np.isnan(got[finite]).any()
    want = activate(pre[finite].astype(np.float64), ops)
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    assert float(np.abs(got[finite] - want).max(initial=0)) / scale <= 1e-5


@pytest.mark.parametrize(
    "ops", ACTIVATIONS, ids=lambda ops: ops[0][0] + (str(ops[0][1]) if ops[0][0] == "clip" else "")
)
@pytest.mark.parametrize("layout", ["nhwc", "nchw", "nhwc_bands"])
def test_float_conv_keeps_nan_through_its_activations(ops, layout):
    """NaN, ±Inf and values whose sums overflow in the input (and zero weights, so Inf x 0 makes
    NaN): NaN comes out exactly where the convolution without activations gives NaN."""
    p = probe()
    rng = np.random.default_rng(21)
    for g in (geometry(9, 11, 16, 24, p=1), geometry(12, 12, 32, 32, groups=32, s=2, p=1), geometry(7, 9, 12, 20, k=1)):
        w = (rng.standard_normal((g["oc"], g["kh"], g["kw"], g["c"] // g["groups"])) * 0.2).astype(np.float32)
        w[rng.random(w.shape) < 0.2] = 0.0
        b = rng.standard_normal(g["oc"]).astype(np.float32)
        for huge in (False, True):
            x = with_edges(rng.standard_normal((g["batch"], g["h"], g["w"], g["c"])).astype(np.float32), rng, huge)
            xin = np.ascontiguousarray(x if layout != "nchw" else x.transpose(0, 3, 1, 2))
            got = p.float_conv(g, xin, w, b, ops, layout, "ohwi", 2, 1)[0]
            pre = p.float_conv(g, xin, w, b, [], layout, "ohwi", 2, 1)[0]
            assert np.isnan(pre).any()
            same_nans_as_unfused(got, pre, ops)


def test_float_conv_with_non_finite_weights_checks_every_input():
    """A NaN weight (or bias) makes NaN from any input: the NaN pass runs every time."""
    p = probe()
    rng = np.random.default_rng(4)
    g = geometry(8, 8, 8, 8, p=1)
    w = (rng.standard_normal((8, 3, 3, 8)) * 0.2).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    relu = [("relu", 0, 0)]
    assert 0 < p.float_conv_nan_limit(g, w, b, relu) < 3.5e38
    assert p.float_conv_nan_limit(g, w, b, []) == np.inf
    assert p.float_conv_nan_limit(g, np.zeros_like(w), b, relu) == np.finfo(np.float32).max
    w[3, 1, 1, 2] = np.nan
    assert p.float_conv_nan_limit(g, w, b, relu) == -1
    x = rng.standard_normal((1, 8, 8, 8)).astype(np.float32)
    got = p.float_conv(g, x, w, b, relu, "nhwc", "ohwi", 1, 1)[0]
    assert np.isnan(got[..., 3]).all() and not np.isnan(np.delete(got, 3, axis=3)).any()
    w[3, 1, 1, 2] = 0.0
    b[5] = np.inf
    assert p.float_conv_nan_limit(g, w, b, relu) == -1


@pytest.mark.parametrize(
    "ops", ACTIVATIONS, ids=lambda ops: ops[0][0] + (str(ops[0][1]) if ops[0][0] == "clip" else "")
)
def test_float_dense_keeps_nan_through_its_activations(ops):
    p = probe()
    rng = np.random.default_rng(9)
    for m, k, n in ((1, 64, 10), (7, 300, 33), (1, 64, 96)):
        w = (rng.standard_normal((n, k)) * 0.1).astype(np.float32)
        w[rng.random(w.shape) < 0.2] = 0.0
        b = rng.standard_normal(n).astype(np.float32)
        x = with_edges(rng.standard_normal((m, k)).astype(np.float32), rng, huge=True)
        for bands in (False, True):
            got, _impl = p.float_dense(x, w, b, ops, 2, bands)
            pre, _impl = p.float_dense(x, w, b, [], 2, bands)
            assert np.isnan(pre).any()
            same_nans_as_unfused(got, pre, ops)


def reference_max_pool(x_nchw, k, s, pads):
    xp = np.pad(x_nchw, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=-np.inf)
    oh = (xp.shape[2] - k[0]) // s[0] + 1
    ow = (xp.shape[3] - k[1]) // s[1] + 1
    out = np.full((*x_nchw.shape[:2], oh, ow), -np.inf, np.float32)
    for y in range(k[0]):
        for x in range(k[1]):
            out = np.maximum(out, xp[:, :, y : y + (oh - 1) * s[0] + 1 : s[0], x : x + (ow - 1) * s[1] + 1 : s[1]])
    return out  # np.maximum propagates NaN


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_max_pool_nan_returns_nan_for_windows_holding_one(layout):
    p = probe()
    rng = np.random.default_rng(3)
    for shape, k, s, pads in (
        ((1, 16, 13, 12), (3, 3), (2, 2), (1, 1, 1, 1)),
        ((2, 8, 9, 9), (2, 2), (2, 2), (0, 0, 1, 1)),
    ):
        for edges in (False, True):
            x = rng.standard_normal(shape).astype(np.float32)
            if edges:
                x = with_edges(x, rng)
            want = reference_max_pool(x, k, s, pads)
            xin = np.ascontiguousarray(x if layout == "nchw" else x.transpose(0, 2, 3, 1))
            got = p.pool(xin, list(k), list(s), list(pads), "max", layout, True, 2)
            if layout == "nhwc":
                got = got.transpose(0, 3, 1, 2)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            assert np.array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


@pytest.mark.parametrize("ops", [[("gelu_erf", 0, 0)], [("gelu_tanh", 0, 0)], [("relu", 0, 0), ("gelu_erf", 0, 0)]])
def test_float_conv_activations_of_values_near_the_float_maximum_stay_finite(ops):
    """A pre-activation value past FLT_MAX / 2 is finite, and so is its GELU (about the value
    itself); a kernel that doubles before halving overflows there (oneDNN's AVX-512 GELU): the
    second pass, which such an input always takes, puts the value back."""
    p = probe()
    g = geometry(2, 3, 4, 4, k=1)
    w = np.eye(4, dtype=np.float32).reshape(4, 1, 1, 4)
    b = np.zeros(4, np.float32)
    x = np.full((1, 2, 3, 4), 1.0, np.float32)
    x[0, 0, 0, :] = [3.0e38, 2.0e38, 1.8e38, -3.0e38]
    x[0, 1, 2, 1] = np.nan
    got = p.float_conv(g, x, w, b, ops, "nhwc", "ohwi", 1, 1)[0]
    want = activate(np.einsum("nhwc,oc->nhwo", x.astype(np.float64), w.reshape(4, 4)), ops)
    assert np.isnan(got[0, 1, 2]).all() and np.isnan(want[0, 1, 2]).all()  # NaN x 0 is NaN
    finite = ~np.isnan(want)
    assert finite.sum() == want.size - 4
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


def test_any_past_finds_every_position():
    """The NaN pre-check (AVX2 in blocks of 32, a scalar tail): NaN, ±Inf or a value past the limit
    anywhere is found; a value at the limit is not; limit -1 flags any non-empty input."""
    p = probe()
    for n in (0, 1, 7, 31, 32, 33, 64, 100, 4097):
        x = np.full(n, 2.0, np.float32)
        assert not p.any_past(x, 2.0)
        assert p.any_past(x, -1.0) == (n > 0)
        for i in range(n):
            for bad in (np.nan, np.inf, -np.inf, -2.5):
                y = x.copy()
                y[i] = bad
                assert p.any_past(y, 2.0), (n, i, bad)
            assert p.any_past(y, np.inf) == False  # noqa: E712  (-2.5 is finite)
            y[i] = np.nan
            assert p.any_past(y, np.inf), (n, i)
