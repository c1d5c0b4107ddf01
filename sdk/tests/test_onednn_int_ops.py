"""accel_sdk/int_ops.hpp: IntConv / IntConvRequantize against numpy int64 references, on every ISA path.

On a CPU without VNNI oneDNN's int8 kernels saturate 16-bit pair sums; IntConv then
splits the weights (the int8 path) or, where that is exact and measured faster, runs
oneDNN's f32 convolution (the f32 path). The grid runs every path: the one IntConv
picks, and each path forced where it is exact. Each grid runs in this process (the CPU's own ISA) and again in a
subprocess with ONEDNN_MAX_CPU_ISA capped at AVX2 and AVX512_CORE (oneDNN keeps what
the CPU has when the cap is higher), so a VNNI machine tests the split path too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onednn_build import probe

from accel import quant


def geometry(h, w, c, oc, k=3, s=1, p=0, d=1, groups=1, batch=1, kw=None, sw=None, pads=None):
    pt, pl, pb, pr = pads if pads is not None else (p, p, p, p)
    return dict(
        batch=batch,
        h=h,
        w=w,
        c=c,
        oc=oc,
        groups=groups,
        kh=k,
        kw=kw or k,
        sh=s,
        sw=sw or s,
        dh=d,
        dw=d,
        pt=pt,
        pl=pl,
        pb=pb,
        pr=pr,
    )


def out_size(g):
    oh = (g["h"] + g["pt"] + g["pb"] - ((g["kh"] - 1) * g["dh"] + 1)) // g["sh"] + 1
    ow = (g["w"] + g["pl"] + g["pr"] - ((g["kw"] - 1) * g["dw"] + 1)) // g["sw"] + 1
    return oh, ow


def reference(g, x, w, zx, zw):
    """int64 Σ (x − z_x)(w − z_w) over the window; padding holds z_x (contributes 0). w: OHWI."""
    oh, ow = out_size(g)
    xc = np.pad(x.astype(np.int64) - zx, ((0, 0), (g["pt"], g["pb"]), (g["pl"], g["pr"]), (0, 0)))
    wc = w.astype(np.int64) - np.asarray(zw, np.int64).reshape(-1, 1, 1, 1)
    G = g["groups"]
    icg, ocg = g["c"] // G, g["oc"] // G
    wg = wc.reshape(G, ocg, g["kh"], g["kw"], icg)
    out = np.zeros((g["batch"], oh, ow, G, ocg), np.int64)
    for y in range(g["kh"]):
        for xx in range(g["kw"]):
            y0, x0 = y * g["dh"], xx * g["dw"]
            patch = xc[:, y0 : y0 + (oh - 1) * g["sh"] + 1 : g["sh"], x0 : x0 + (ow - 1) * g["sw"] + 1 : g["sw"], :]
            patch = patch.reshape(g["batch"], oh, ow, G, icg)
            out += np.einsum("nhwgi,goi->nhwgo", patch, wg[:, :, y, xx, :])
    return out.reshape(-1, g["oc"])


def summed(acc, parts, oc):
    return acc.astype(np.int64).reshape(acc.shape[0], parts, oc).sum(axis=1)


def random_case(rng, g, data_dtype, weight_dtype, per_channel, worst=False):
    lo, hi = quant.dtype_range(data_dtype)
    wlo, whi = quant.dtype_range(weight_dtype)
    x = rng.integers(lo, hi + 1, size=(g["batch"], g["h"], g["w"], g["c"])).astype(data_dtype)
    w = rng.integers(wlo, whi + 1, size=(g["oc"], g["kh"], g["kw"], g["c"] // g["groups"])).astype(weight_dtype)
    zx = int(rng.integers(lo, hi + 1))
    zw_lo, zw_hi = (0, 0) if weight_dtype == np.int8 else (wlo, whi)
    zw = [int(v) for v in rng.integers(zw_lo, zw_hi + 1, size=g["oc"] if per_channel else 1)]
    if worst:  # largest products: x − z_x = 255 against w = −128 on every tap
        x[...] = hi
        zx = lo
        w[...] = wlo if weight_dtype == np.int8 else 0
        zw = [128 if weight_dtype == np.uint8 else 0] * len(zw)
    return x, w, zx, zw


GRID = [
    geometry(9, 11, 16, 24),  # 3x3 valid
    geometry(8, 8, 32, 32, p=1),  # same padding
    geometry(13, 12, 24, 16, s=2, p=1),  # stride 2
    geometry(10, 10, 16, 8, p=2, d=2),  # dilation
    geometry(7, 9, 12, 20, k=1),  # 1x1
    geometry(6, 7, 8, 8, k=5, s=1, pads=(2, 1, 0, 3)),  # asymmetric padding
    geometry(9, 9, 32, 32, groups=32, p=1),  # depthwise 3x3
    geometry(12, 12, 16, 16, groups=16, s=2, p=1),  # depthwise stride 2
    geometry(9, 9, 16, 16, k=5, groups=16, p=2),  # depthwise 5x5
    geometry(8, 8, 16, 32, groups=4, p=1),  # grouped
    geometry(5, 6, 8, 16, groups=8, p=1),  # depthwise multiplier 2
    geometry(6, 6, 16, 8, p=1, batch=2),  # batch
    geometry(3, 3, 512, 16, p=1),  # long K = 4608
    geometry(1, 20, 300, 10, k=1),  # dense-like: 20 rows, K = 300
    geometry(1, 5, 64, 128, k=1),  # 5 pixels, 128 channels: oneDNN's AVX512_CORE 1x1 kernel errs there
]


def f32_exact(x_dtype, zx, w, zw) -> bool:
    """IntConv's condition for its f32 path: max|x − z_x| · max_c Σ|w − z_w| ≤ 2^24."""
    zu = zx + 128 if x_dtype == np.int8 else zx
    wc = np.abs(w.astype(np.int64) - np.asarray(zw, np.int64).reshape(-1, 1, 1, 1))
    return max(zu, 255 - zu) * int(wc.reshape(w.shape[0], -1).sum(axis=1).max()) <= 2**24


def run_paths(p, g, x, w, zx, zw, threads, band_rows):
    """(path asked, acc, parts, impl) for the automatic choice and each path forced where it is exact."""
    runs = []
    for path in ("auto", "int8", "f32"):
        p.set_path(path)
        try:
            if path == "f32" and not f32_exact(x.dtype, zx, w, zw):
                with pytest.raises(RuntimeError, match="f32 path is not exact"):
                    p.int_conv(g, x, w, zx, zw, "ohwi", threads, band_rows)
                continue
            acc, parts, impl, _bands = p.int_conv(g, x, w, zx, zw, "ohwi", threads, band_rows)
        finally:
            p.set_path("auto")
        assert ("(f32 path)" in impl) == (path == "f32" or (path == "auto" and "f32" in impl)), impl
        runs.append((path, acc, parts, impl))
    return runs


def check_grid(seed: int = 0) -> int:
    """Every grid case, dtype, zero-point kind and path against the reference; returns the values checked."""
    p = probe()
    rng = np.random.default_rng(seed)
    checked = 0
    for i, g in enumerate(GRID):
        for data_dtype, weight_dtype, per_channel in (
            (np.uint8, np.int8, False),
            (np.int8, np.int8, True),
            (np.uint8, np.uint8, True),
            (np.int8, np.uint8, False),
        ):
            for worst in (False, True):
                x, w, zx, zw = random_case(rng, g, data_dtype, weight_dtype, per_channel, worst)
                want = reference(g, x, w, zx, zw)
                for band_rows in (0, 2):
                    for path, acc, parts, impl in run_paths(p, g, x, w, zx, zw, 2, band_rows):
                        got = summed(acc, parts, g["oc"])
                        bad = np.argwhere(got != want)
                        assert bad.size == 0, (
                            f"case {i} {g} {np.dtype(data_dtype).name}x{np.dtype(weight_dtype).name} worst={worst} "
                            f"bands={band_rows} path={path} impl={impl} parts={parts}: {len(bad)} of {got.size} "
                            f"differ, first {got[tuple(bad[0])]} != {want[tuple(bad[0])]}"
                        )
                        checked += got.size
    return checked


def check_requantize_grid(seed: int = 1) -> int:
    """IntConvRequantize (bias, per-channel scales, relu) against quant.requantize of the reference."""
    p = probe()
    rng = np.random.default_rng(seed)
    checked = 0
    # 1x1 layers without padding take the data's zero point into the bias (folds_zero_point):
    # the second and last cases, the last with sums past 2^24 and uint8 weights too
    cases = [
        (geometry(30, 28, 16, 24, p=1), np.int8),
        (geometry(40, 12, 8, 40, k=1), np.int8),
        (geometry(33, 17, 24, 24, groups=24, s=2, p=1), np.int8),
        (geometry(20, 20, 16, 16, p=1, batch=2), np.int8),
        (geometry(3, 5, 2048, 32, k=1, s=2), np.int8),
        (geometry(3, 5, 2048, 32, k=1, s=2), np.uint8),
    ]
    for g, weight_dtype in cases:
        for data_dtype, out_dtype in ((np.uint8, np.uint8), (np.int8, np.int8)):
            x, w, zx, zw = random_case(rng, g, data_dtype, weight_dtype, True)
            acc = reference(g, x, w, zx, zw)
            bias = rng.integers(-5000, 5000, size=g["oc"]).astype(np.int32)
            s_x = np.float32(0.05)
            s_w = rng.uniform(0.002, 0.02, size=g["oc"]).astype(np.float32)
            acc_scale = (s_x * s_w).astype(np.float32)
            out_scale = np.float32(rng.uniform(0.05, 0.3))
            lo, hi = quant.dtype_range(out_dtype)
            z_out = int(rng.integers(lo, hi + 1))
            t = (acc + bias).astype(np.int32)
            want = quant.requantize(t, acc_scale, 0, out_scale, z_out, out_dtype, axis=1)
            relu_lo = max(lo, z_out)
            want_relu = np.maximum(want, relu_lo)
            paths = ["auto", "int8"] + (["f32"] if f32_exact(data_dtype, zx, w, zw) else [])
            for path, band_rows in ((path, band_rows) for path in paths for band_rows in (0, -1, 3)):
                p.set_path(path)
                for threads, clip_lo, expect in ((1, lo, want), (2, relu_lo, want_relu)):
                    got, _banded, _bands = p.int_conv_requantize(
                        g,
                        x,
                        w,
                        zx,
                        zw,
                        acc_scale.tolist(),
                        float(out_scale),
                        z_out,
                        clip_lo,
                        hi,
                        bias.tolist(),
                        np.dtype(out_dtype).name,
                        threads,
                        band_rows,
                        1,
                    )
                    np.testing.assert_array_equal(
                        got, expect, err_msg=f"{g} path={path} bands={band_rows} threads={threads}"
                    )
                    checked += got.size
            p.set_path("auto")
    return checked


#: Layers whose accumulators pass 2^24 (where float32 stops holding every integer).
LARGE = [
    geometry(7, 7, 512, 32, p=1),  # ResNet's last 3x3: 4608 taps (brgconv)
    geometry(9, 9, 64, 32, k=9, p=4),  # a wide window: 5184 taps
    geometry(3, 5, 2048, 32, k=1),  # 1x1 (brgconv_1x1)
    geometry(1, 2, 9000, 16, k=1),  # dense-like
]


def check_large_sums(seed: int = 12) -> int:
    """Sums past 2^24 with odd values, exact on every ISA, with and without a data zero point.

    With VNNI and z_x = 0 (on the uint8 scale) oneDNN's s32 result is exact at any size and
    the weights run in one part; a zero point makes oneDNN round through float32, so there
    the parts keep every sum within 2^24.
    """
    p = probe()
    rng = np.random.default_rng(seed)
    checked = 0
    for g in LARGE:
        for data_dtype, zx_offset in ((np.uint8, 0), (np.int8, 0), (np.uint8, 3)):
            lo, hi = quant.dtype_range(data_dtype)
            zx = lo + zx_offset
            x = rng.integers(hi - 60, hi + 1, size=(1, g["h"], g["w"], g["c"])).astype(data_dtype)
            w = rng.integers(-128, -90, size=(g["oc"], g["kh"], g["kw"], g["c"])).astype(np.int8)
            want = reference(g, x, w, zx, [0])
            assert np.abs(want).min() > 2 * 2**24 and (want % 2).any(), g
            for threads, band_rows in ((1, 0), (2, 2)):
                acc, parts, impl, _ = p.int_conv(g, x, w, zx, [0], "ohwi", threads, band_rows)
                if p.int8_exact():
                    assert "int8 path" in impl and (parts == 1) == (zx_offset == 0), (g, impl, parts)
                np.testing.assert_array_equal(summed(acc, parts, g["oc"]), want, err_msg=f"{g} {impl} parts={parts}")
                checked += want.size
    return checked


def test_sums_past_2_24_are_exact():
    assert check_large_sums() > 5_000


def test_int_conv_grid_is_exact():
    assert check_grid() > 50_000


def test_int_conv_requantize_is_bit_exact():
    assert check_requantize_grid() > 50_000


def test_bands_are_used_for_large_layers():
    p = probe()
    g = geometry(56, 56, 64, 64, p=1)
    x = np.zeros((1, 56, 56, 64), np.uint8)
    w = np.zeros((64, 3, 3, 64), np.int8)
    _out, banded, bands = p.int_conv_requantize(g, x, w, 0, [0], [0.001], 0.1, 0, 0, 255, [], "uint8", 2, 0, 1)
    assert banded and bands >= 4
    _out, banded, _ = p.int_conv_requantize(g, x, w, 0, [0], [0.001], 0.1, 0, 0, 255, [], "uint8", 2, -1, 1)
    assert not banded


def test_weights_split_only_without_vnni():
    p = probe()
    g = geometry(5, 5, 8, 8, p=1)
    x = np.ones((1, 5, 5, 8), np.uint8)
    small = np.full((8, 3, 3, 8), 60, np.int8)
    big = np.full((8, 3, 3, 8), -128, np.int8)
    p.set_path("int8")
    try:
        assert p.int_conv(g, x, small, 0, [0], "ohwi", 1, 0)[1] == 1
        assert p.int_conv(g, x, big, 0, [0], "ohwi", 1, 0)[1] == (1 if p.int8_exact() else 2)
    finally:
        p.set_path("auto")


def auto_choices() -> list[str]:
    """The path IntConv picks for layers on each side of its rule, checked exact at the worst case."""
    p = probe()
    split = not p.int8_exact()
    rng = np.random.default_rng(11)
    got = []
    # (geometry, data dtype, weight dtype, worst-case weights, expected path)
    cases = [
        # dense 3x3, weights that split without VNNI, f32 exact: f32 exactly when they split
        (geometry(9, 8, 16, 8, p=1), np.uint8, np.int8, -128, "f32" if split else "int8"),
        # |w| <= 64: one int8 part everywhere
        (geometry(9, 8, 16, 8, p=1), np.uint8, np.int8, -64, "int8"),
        # 1x1 and depthwise stay int8
        (geometry(6, 7, 24, 32, k=1), np.uint8, np.int8, -128, "int8"),
        (geometry(9, 9, 16, 16, groups=16, p=1), np.uint8, np.int8, -128, "int8"),
        # the f32 bound at its edge: 3x3x28 taps of |w - z_w| = 255 against |x - z_x| = 255:
        # 252 * 255 * 255 = 16,386,300 <= 2^24 (f32), 3x3x29: 16,971,525 > 2^24 (int8).
        # |w - z_w| = 255 is no int8: these weights split with VNNI too
        (geometry(5, 6, 28, 4, p=1), np.uint8, np.uint8, 255, "f32"),
        (geometry(5, 6, 29, 4, p=1), np.uint8, np.uint8, 255, "int8"),
        (geometry(5, 6, 28, 4, p=1), np.int8, np.uint8, 0, "f32"),
    ]
    for g, xd, wd, wval, expect in cases:
        lo, hi = quant.dtype_range(xd)
        x = rng.integers(lo, hi + 1, size=(1, g["h"], g["w"], g["c"])).astype(xd)
        x[0, 1:-1, 1:-1, :] = hi if wval != 0 else lo  # the interior at the extreme
        zx = lo if wval != 0 else hi
        w = np.full((g["oc"], g["kh"], g["kw"], g["c"] // g["groups"]), wval, wd)
        zw = [0] if wval != 0 else [255]
        want = reference(g, x, w, zx, zw)
        for band_rows in (0, 2):
            acc, parts, impl, _ = p.int_conv(g, x, w, zx, zw, "ohwi", 2, band_rows)
            path = "f32" if "(f32 path)" in impl else "int8"
            assert path == expect, (g, impl)
            np.testing.assert_array_equal(summed(acc, parts, g["oc"]), want, err_msg=f"{g} {impl}")
        got.append(path)
    return got


def test_automatic_path_choice():
    got = auto_choices()
    # the int8 weights of case one split without VNNI only
    assert got[0] == ("int8" if probe().int8_exact() else "f32")
    assert got[1:] == ["int8", "int8", "int8", "f32", "int8", "f32"]


def test_bad_specs_are_refused():
    p = probe()
    g = geometry(5, 5, 8, 8)
    x = np.zeros((1, 5, 5, 8), np.uint8)
    w = np.zeros((8, 3, 3, 8), np.int8)
    with pytest.raises(RuntimeError, match="weight zero points for 8 output channels"):
        p.int_conv(g, x, w, 0, [0, 0], "ohwi", 1, 0)
    with pytest.raises(RuntimeError, match="data zero point 300"):
        p.int_conv(g, x, w, 300, [0], "ohwi", 1, 0)
    with pytest.raises(RuntimeError, match="groups=3 must divide"):
        p.int_conv(dict(g, groups=3), x, w, 0, [0], "ohwi", 1, 0)
    with pytest.raises(ValueError, match="larger than the padded input"):
        p.int_conv(geometry(2, 2, 8, 8), np.zeros((1, 2, 2, 8), np.uint8), w, 0, [0], "ohwi", 1, 0)
    long = geometry(1, 1, 66000, 1, k=1)
    with pytest.raises(RuntimeError, match="could overflow its int32 accumulator"):
        p.int_conv(
            long, np.zeros((1, 1, 1, 66000), np.uint8), np.full((1, 1, 1, 66000), -128, np.int8), 0, [0], "ohwi", 1, 0
        )


@pytest.mark.parametrize("isa", ["AVX2", "AVX512_CORE"])
def test_capped_isa_in_subprocess(isa):
    """The same grids with oneDNN capped below VNNI: the split path, exact."""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa)
    code = (
        "import test_onednn_int_ops as t, onednn_build as b; p = b.probe(); "
        "assert not p.int8_exact(), p.cpu_isa(); "
        "print(p.cpu_isa(), t.check_grid(5), t.check_requantize_grid(6), t.auto_choices(), t.check_large_sums())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parent, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("path", ["int8", "f32"])
@pytest.mark.parametrize("band_rows", [-1, 4])
def test_one_op_runs_from_several_threads_at_once(band_rows, path):
    """run() is const: four Python threads share one IntConvRequantize, each gets the reference result."""
    from concurrent.futures import ThreadPoolExecutor

    p = probe()
    rng = np.random.default_rng(9)
    g = geometry(24, 20, 16, 24, p=1)
    x0, w, zx, zw = random_case(rng, g, np.uint8, np.int8, True)
    scales = rng.uniform(0.0005, 0.002, size=g["oc"]).astype(np.float32)
    bias = rng.integers(-3000, 3000, size=g["oc"]).astype(np.int32)
    p.set_path(path)
    try:
        op = p.ConvOp(g, x0, w, zx, zw, scales.tolist(), 0.1, 7, bias.tolist(), 2, band_rows)
    finally:
        p.set_path("auto")
    inputs = [rng.integers(0, 256, size=x0.shape).astype(np.uint8) for _ in range(8)]
    wants = [
        quant.requantize(
            (reference(g, x, w, zx, zw) + bias).astype(np.int32), scales, 0, np.float32(0.1), 7, np.uint8, axis=1
        )
        for x in inputs
    ]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            for got, want in zip(pool.map(op.run, inputs), wants):
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("data_dtype", "weight_dtype"), [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)]
)
def test_dense_spec_matches_qnn_dense(data_dtype, weight_dtype):
    """dense_spec: (x − z_x) @ (w − z_w).T with per-channel weight zero points, worst case included."""
    p = probe()
    rng = np.random.default_rng(4)
    for m, k, n in ((1, 64, 10), (17, 1000, 33), (4, 4096, 8)):
        for worst in (False, True):
            g = geometry(1, m, k, n, k=1)
            x, w, zx, zw = random_case(rng, g, data_dtype, weight_dtype, weight_dtype == np.uint8, worst)
            x2, w2 = x.reshape(m, k), w.reshape(n, k)
            want = (x2.astype(np.int64) - zx) @ (w2.astype(np.int64) - np.asarray(zw).reshape(-1, 1)).T
            acc, parts, _impl = p.int_dense(x2, w2, zx, zw, 2)
            np.testing.assert_array_equal(summed(acc, parts, n), want)
