"""nn ops (see docs/ops.md): convolution, dense, pooling, padding, normalization.

The convolution and matmul kernels are the speed-critical part of the reference
executor, so they are built once per node (the registry's ``prepare`` hook):
geometry is computed and constant weights are packed into the matmul layout
ahead of time, and each run is an im2col copy made from strided views plus one
BLAS matmul per group. The public builders (:func:`build_conv2d`,
:func:`build_conv2d_transpose`, :func:`build_dense`) are shared with the
quantized ops, which run them on zero-point-subtracted integers in float64.

Pools and bias_add are bound per node too. On small maps, where numpy's per-call
overhead outweighs the arithmetic, convolutions and pools copy their columns or
window taps with one ``take`` of an index computed at bind time
(:class:`_IndexGather`): the same values in the same layout and order as the
strided copies, so the results are the same bits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from accel.errors import TypeInferenceError
from accel.ops.common import (
    FLOAT_DTYPES,
    conv_channel_axes,
    conv_transpose_channel_axes,
    dense_channel_axes,
    expect,
    input_work,
    normalize_axis,
    pool_work,
)
from accel.ops.geometry import (  # noqa: F401  (ConvGeometry, PoolGeometry, the layouts: still importable from here)
    DATA_LAYOUTS,
    KERNEL_LAYOUTS,
    TRANSPOSE_KERNEL_LAYOUTS,
    ConvGeometry,
    PoolGeometry,
    _conv_attrs,
    _ints,
    _is_int,
    _layout,
    _spatial,
    conv2d_geometry,
    pool2d_geometry,
)
from accel.ops.registry import REQUIRED, Affine, Layout, OpContext, Qdq, register_op
from accel.tensor_types import TensorType

Kernel = Callable[[np.ndarray, "np.ndarray | None"], np.ndarray]

_NUMERIC_DTYPES = (*FLOAT_DTYPES, "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")

# --------------------------------------------------------------------------------------
# attribute helpers (the window ones live in accel.ops.geometry)


def _permute(arr: np.ndarray, src: str, dst: str) -> np.ndarray:
    """View of ``arr`` (axes named by ``src``) with its axes in the order ``dst``."""
    return arr.transpose([src.index(c) for c in dst])


def _compute_dtype(dtype: Any) -> np.dtype:
    """The dtype a kernel accumulates in: float16 in float32 (numpy's float16 matmul is slow), ints in int64."""
    dt = np.dtype(dtype)
    if dt == np.float16:
        return np.dtype(np.float32)
    if dt.kind in "iu":
        return np.dtype(np.int64)
    return dt


# --------------------------------------------------------------------------------------
# transposed convolution geometry (plain convolutions and pools: accel.ops.geometry)


@dataclass(frozen=True)
class ConvTransposeGeometry:
    """Geometry of a transposed convolution: ``c`` input channels, ``og`` output channels per group."""

    nchw: bool
    n: int
    c: int
    h: int
    w: int
    og: int
    kh: int
    kw: int
    groups: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    pb: int
    pr: int
    oph: int
    opw: int
    oh: int
    ow: int
    kernel_layout: str

    @property
    def o(self) -> int:
        return self.og * self.groups

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        if self.nchw:
            return (self.n, self.o, self.oh, self.ow)
        return (self.n, self.oh, self.ow, self.o)

    @property
    def macs(self) -> int:
        return self.n * self.c * self.h * self.w * self.og * self.kh * self.kw


def conv2d_transpose_geometry(
    attrs: Mapping[str, Any], data_shape: Sequence[int], weight_shape: Sequence[int]
) -> ConvTransposeGeometry:
    """Validate an ``nn.conv2d_transpose`` and compute its geometry.

    The weight is logically ``[C_in, C_out / groups, kh, kw]`` (``IOHW``, as ONNX
    ConvTranspose); ``OHWI`` names the same tensor with its axes permuted
    (``[C_out / groups, kh, kw, C_in]``), which for one group is TFLite's layout.
    """
    dl, kl, (sh, sw), (dh, dw), (pt, pl, pb, pr), groups = _conv_attrs(attrs, TRANSPOSE_KERNEL_LAYOUTS)
    oph, opw = _ints(attrs.get("output_padding", (0, 0)), 2, "output_padding")
    expect(
        0 <= oph < max(sh, dh) and 0 <= opw < max(sw, dw),
        f"output_padding {(oph, opw)} must be non-negative and smaller than the stride or the dilation",
    )
    n, c, h, w = _spatial(data_shape, dl)
    expect(len(weight_shape) == 4, f"weight must be 4-D ({kl}), got shape {list(weight_shape)}")
    wi, og, kh, kw = (weight_shape[kl.index(a)] for a in "IOHW")
    expect(min(wi, og, kh, kw) >= 1, f"weight shape {list(weight_shape)} ({kl}) has an empty dimension")
    expect(c % groups == 0, f"groups={groups} does not divide the {c} input channels")
    expect(c == wi, f"data has {c} channels but the weight {list(weight_shape)} ({kl}) has {wi} input channels")
    full_h = (h - 1) * sh + dh * (kh - 1) + 1 + oph
    full_w = (w - 1) * sw + dw * (kw - 1) + 1 + opw
    oh, ow = full_h - pt - pb, full_w - pl - pr
    expect(oh >= 1 and ow >= 1, f"padding {(pt, pl, pb, pr)} leaves an empty output ({oh}x{ow})")
    return ConvTransposeGeometry(
        dl == "NCHW", n, c, h, w, og, kh, kw, groups, sh, sw, dh, dw, pt, pl, pb, pr, oph, opw, oh, ow, kl
    )


# --------------------------------------------------------------------------------------
# scratch memory

#: Largest temporary (bytes) kept for reuse; bigger ones are allocated per call.
SCRATCH_MAX_BYTES = 1 << 26

_scratch_local = threading.local()


def scratch(role: str, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """A reusable per-thread buffer of ``shape`` (contents undefined) for a kernel's temporaries.

    Fresh memory costs a page fault per 4 KiB on first touch (measured ~0.9 ms
    per MiB on the project's virtual machines, as slow as the arithmetic of a
    convolution), and whether the allocator hands back recycled memory depends
    on the order of earlier frees. Reusing one buffer per role and thread keeps
    the padding, im2col and accumulator temporaries at memory speed. A buffer
    from here must never escape the kernel (return a copy), and one role serves
    one array at a time.
    """
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if nbytes > SCRATCH_MAX_BYTES:
        return np.empty(shape, dt)
    bufs = _scratch_local.__dict__
    buf = bufs.get(role)
    if buf is None or buf.nbytes < nbytes:
        buf = np.empty(max(nbytes, 64), np.uint8)
        bufs[role] = buf
    return buf[:nbytes].view(dt).reshape(shape)


# --------------------------------------------------------------------------------------
# convolution kernels


def _pad_spatial(
    x: np.ndarray,
    nchw: bool,
    pads: tuple[int, int, int, int],
    dtype: np.dtype,
    fill: Any = 0,
    role: str = "pad",
) -> np.ndarray:
    """``x`` converted to ``dtype`` with (top, left, bottom, right) padding of ``fill`` on H and W.

    The padded copy lives in scratch memory (``role``): use it within the kernel only.
    """
    pt, pl, pb, pr = pads
    if not any(pads):
        return x.astype(dtype, copy=False)
    n, d1, d2, d3 = x.shape
    if nchw:
        xp = scratch(role, (n, d1, d2 + pt + pb, d3 + pl + pr), dtype)
        inner = (slice(None), slice(None), slice(pt, pt + d2), slice(pl, pl + d3))
    else:
        xp = scratch(role, (n, d1 + pt + pb, d2 + pl + pr, d3), dtype)
        inner = (slice(None), slice(pt, pt + d1), slice(pl, pl + d2), slice(None))
    # fill only the border, then the interior once (no double write of the bulk)
    if nchw:
        xp[:, :, :pt] = fill
        xp[:, :, pt + d2 :] = fill
        xp[:, :, pt : pt + d2, :pl] = fill
        xp[:, :, pt : pt + d2, pl + d3 :] = fill
    else:
        xp[:, :pt] = fill
        xp[:, pt + d1 :] = fill
        xp[:, pt : pt + d1, :pl] = fill
        xp[:, pt : pt + d1, pl + d2 :] = fill
    xp[inner] = x
    return xp


def _tap(xp: np.ndarray, nchw: bool, r0: int, c0: int, sh: int, sw: int, oh: int, ow: int) -> np.ndarray:
    """Strided view of the input under one kernel tap: rows r0, r0+sh, ... (oh of them), same for columns."""
    rows = slice(r0, r0 + sh * (oh - 1) + 1, sh)
    cols = slice(c0, c0 + sw * (ow - 1) + 1, sw)
    return xp[:, :, rows, cols] if nchw else xp[:, rows, cols, :]


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def _to_nhwc(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 2, 3, 1)


def _oihw(weight: np.ndarray, layout: str, dtype: np.dtype) -> np.ndarray:
    return _permute(np.asarray(weight), layout, "OIHW").astype(dtype, copy=False)


#: Per-group input channels from which an NCHW convolution gathers its im2col columns
#: channels-last: copying runs of C contiguous values beats copying short image rows
#: (measured ~10% faster per ResNet layer), except for stems with a handful of channels.
CHANNELS_LAST_COLS_MIN = 16

Packer = Callable[[np.ndarray], np.ndarray]
Runner = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _gather(view: np.ndarray) -> np.ndarray:
    """Copy a strided im2col view into contiguous scratch columns."""
    cols = scratch("cols", view.shape, view.dtype)
    np.copyto(cols, view)
    return cols


def _window(flat: np.ndarray, start: int, shape: tuple[int, ...], steps: tuple[int, ...]) -> np.ndarray:
    """A view of the contiguous ``flat`` from element ``start``, with ``steps`` in elements (views may overlap).

    Unlike ``as_strided`` (~5 us a call, which adds up inside per-tap loops)
    the ndarray constructor costs ~1 us, and it refuses a view reaching past the buffer.
    """
    item = flat.itemsize
    return np.ndarray(shape, flat.dtype, buffer=flat, offset=start * item, strides=tuple(s * item for s in steps))


#: Most elements a window operation (im2col convolution, pooling) copies by a precomputed
#: index instead of building strided views: on small maps numpy's per-call overhead of
#: padding, view building and copying dominates, and one ``take`` avoids it (measured ~5x
#: faster on the digits model's 8x8 maps, ~1.5x at 2^15 elements, a few % at 2^18; larger
#: copies would need fresh memory per call, where the strided path reuses scratch buffers).
GATHER_MAX_ELEMENTS = 1 << 18

#: Most entries (8 bytes each) a gather index may have: one per element copied, or one per
#: row of channels for channels-last data (see :class:`_IndexGather`).
GATHER_MAX_INDEX = 1 << 16


def _gathers(elements: int, row: int) -> bool:
    """Whether a window operation copying ``elements`` in runs of ``row`` takes the gather path."""
    return elements <= GATHER_MAX_ELEMENTS and elements // row <= GATHER_MAX_INDEX


class _IndexGather:
    """``columns(x)`` as one ``take``: the positions ``columns`` reads, found by running it once
    on the flat positions of an input, with the padding reading one slot past the end.

    ``columns(x, fill, dtype)`` must copy elements of ``x`` (converted to ``dtype``) and
    ``fill`` into an array whose layout depends only on the shapes; then ``self(x)``
    equals ``columns(x, fill, dtype)`` element for element. When the columns read the
    input in whole runs of ``row`` consecutive elements (channels-last data), the take
    moves those rows: a ``row``-times smaller index, and ~2x faster.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        columns: Callable[[np.ndarray, Any, np.dtype], np.ndarray],
        dtype: np.dtype,
        fill: Any = 0,
        row: int = 1,
    ):
        size = int(np.prod(shape, dtype=np.int64))
        positions = np.arange(size, dtype=np.intp).reshape(shape)
        index = np.array(columns(positions, size, np.dtype(np.intp)), order="C")  # out of scratch memory
        self.shape, self.dtype = index.shape, dtype
        self.row = 1
        if row > 1 and size % row == 0 and index.size % row == 0:
            runs = index.reshape(-1, row)
            starts = runs[:, :1] // row  # the padding slot `size` becomes row `size // row`, one past the last
            whole = np.where(starts == size // row, size, starts * row + np.arange(row))
            if np.array_equal(runs, whole):
                self.row, index = row, starts.reshape(-1)
        self.index = index
        reads_fill = bool((index == size // self.row).any())
        self.tail = np.full((1, self.row), fill, dtype) if reads_fill else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.row == 1:
            flat = x.reshape(-1)
            if self.tail is not None:
                flat = np.concatenate((flat, self.tail[0]), dtype=self.dtype)
            elif flat.dtype != self.dtype:
                flat = flat.astype(self.dtype)
            return flat.take(self.index)
        rows = x.reshape(-1, self.row)
        if self.tail is not None:
            rows = np.concatenate((rows, self.tail), dtype=self.dtype)
        elif rows.dtype != self.dtype:
            rows = rows.astype(self.dtype)
        return rows.take(self.index, axis=0).reshape(self.shape)


def _phase_taps(k: int, d: int, s: int) -> list[tuple[int, list[int], int, int]]:
    """Kernel taps along one axis grouped by stride phase.

    Tap ``r`` reads padded position ``i * s + r * d`` for output ``i``, i.e. entry
    ``i + (r * d) // s`` of phase ``(r * d) % s``. Returns, per phase used,
    ``(phase, taps, first offset, offset step)``: within a phase the offsets are
    an arithmetic progression, so its taps make one strided view.
    """
    by_phase: dict[int, list[int]] = {}
    for r in range(k):
        by_phase.setdefault((r * d) % s, []).append(r)
    groups = []
    for a, taps in sorted(by_phase.items()):
        offs = [(r * d) // s for r in taps]
        groups.append((a, taps, offs[0], offs[1] - offs[0] if len(offs) > 1 else 1))
    return groups


#: Phase width up to which the phases are padded whole before the input is copied in: on
#: small maps one long fill beats four fills of short border rows (measured up to 28x28).
PHASE_FILL_MAX_WIDTH = 32


class _PhaseGrid:
    """An NCHW window operation (depthwise convolution, max pooling) on long contiguous runs.

    The padded input is split into its ``sh x sw`` stride phases, each stored
    flat over (N, C, hq, wq): a kernel tap is then the flat phase shifted by the
    tap's offset, and the output is computed on the ``hq x wq`` phase grid (the
    rows and columns past OH x OW are garbage, cropped at the end). A tap over a
    block of channels is one run spanning the whole block: numpy's per-row
    overhead, which dominates OW-long rows on small maps, stays out, and so do
    strided reads past the one split into phases. Taps are ordered phase by
    phase (``order``).
    """

    def __init__(self, g: ConvGeometry | PoolGeometry, dtype: np.dtype):
        self.g, self.dtype = g, dtype
        self.rows, self.cols = _phase_taps(g.kh, g.dh, g.sh), _phase_taps(g.kw, g.dw, g.sw)
        self.hq = g.oh + max(off + step * (len(t) - 1) for _, t, off, step in self.rows)
        self.wq = g.ow + max(off + step * (len(t) - 1) for _, t, off, step in self.cols)
        self.plane = self.hq * self.wq
        self.order = [r * g.kw + q for _, rt, _, _ in self.rows for _, qt, _, _ in self.cols for r in rt for q in qt]

    def phases(self, x: np.ndarray, fill: Any = 0) -> np.ndarray:
        """[sh, sw, (N*C + 1) * plane]: phase (a, b) holds padded rows a, a+sh, ... and columns b, b+sw, ...

        One strided copy per phase straight from ``x``, padded with ``fill``. A
        tap's run may start up to a plane past its channel's, so a padding plane
        closes the buffer.
        """
        g, hq, wq, plane = self.g, self.hq, self.wq, self.plane
        nc = g.n * g.c
        flat = scratch("pad", (g.sh, g.sw, (nc + 1) * plane), self.dtype)
        small = wq <= PHASE_FILL_MAX_WIDTH
        flat[:, :, 0 if small else nc * plane :] = fill
        for a, *_ in self.rows:  # only the phases some tap reads
            # phase row i is padded row i*sh + a, i.e. input row i*sh + a - pt
            i0 = min(hq, max(0, -(-(g.pt - a) // g.sh)))
            i1 = max(i0, min(hq, -(-(g.pt + g.h - a) // g.sh)))
            for b, *_ in self.cols:
                j0 = min(wq, max(0, -(-(g.pl - b) // g.sw)))
                j1 = max(j0, min(wq, -(-(g.pl + g.w - b) // g.sw)))
                p = flat[a, b, : nc * plane].reshape(g.n, g.c, hq, wq)
                if not small:  # pad the border only
                    p[:, :, :i0] = fill
                    p[:, :, i1:] = fill
                    p[:, :, i0:i1, :j0] = fill
                    p[:, :, i0:i1, j1:] = fill
                if i1 > i0 and j1 > j0:
                    r0, c0 = i0 * g.sh + a - g.pt, j0 * g.sw + b - g.pl
                    rows = slice(r0, r0 + (i1 - i0 - 1) * g.sh + 1, g.sh)
                    cols = slice(c0, c0 + (j1 - j0 - 1) * g.sw + 1, g.sw)
                    np.copyto(p[:, :, i0:i1, j0:j1], x[:, :, rows, cols], casting="unsafe")
        return flat

    def gather(self, ph: np.ndarray, i: int, c0: int, c1: int) -> np.ndarray:
        """Columns [T, (c1 - c0) * plane] (scratch) of batch item ``i``, channels [c0, c1)."""
        wq, run = self.wq, (c1 - c0) * self.plane
        cols = scratch("cols", (len(self.order), run), self.dtype)
        t0 = 0
        for a, rt, roff, rstep in self.rows:
            for b, qt, qoff, qstep in self.cols:
                nt = len(rt) * len(qt)
                start = (i * self.g.c + c0) * self.plane + roff * wq + qoff
                view = _window(ph[a, b], start, (len(rt), len(qt), run), (rstep * wq, qstep, 1))
                np.copyto(cols[t0 : t0 + nt].reshape(len(rt), len(qt), run), view)
                t0 += nt
        return cols

    def taps(self) -> Iterator[tuple[int, int, int]]:
        """(phase a, phase b, flat offset) of each tap, in ``order``."""
        for a, rt, roff, rstep in self.rows:
            for b, qt, qoff, qstep in self.cols:
                for i in range(len(rt)):
                    for j in range(len(qt)):
                        yield a, b, (roff + i * rstep) * self.wq + qoff + j * qstep

    def crop(self, grid: np.ndarray) -> np.ndarray:
        """The output [N, O, OH, OW] (a fresh array) from the grid [N, O, ...plane]."""
        g = self.g
        return grid.reshape(g.n, -1, self.hq, self.wq)[:, :, : g.oh, : g.ow].copy()


#: Bytes of tap columns an NCHW depthwise convolution gathers per matmul: few, large
#: blocks (measured best at 2-8 MiB on MobileNetV2 layers: per-call overhead dominates below).
DEPTHWISE_COLS_BYTES = 1 << 22


def _conv_depthwise_nchw(g: ConvGeometry, dtype: np.dtype) -> tuple[Packer, Runner]:
    """(pack, run) for NCHW depthwise convolution (one input channel per group, ``mult`` outputs each).

    Per block of channels, the tap columns of :class:`_PhaseGrid` and one
    batched matmul ``W[C, mult, T] @ cols[C, T, hq*wq]``. On the 7x7 and 14x14
    maps this is ~1.5x faster than a multiply and an add per tap (which the
    NHWC kernel does), whose short rows leave numpy's loops dominated by
    per-row overhead; on large maps the two are even.
    """
    pg = _PhaseGrid(g, dtype)
    c, mult, ntaps, plane = g.c, g.o // g.c, len(pg.order), pg.plane
    cb = max(1, min(c, DEPTHWISE_COLS_BYTES // (ntaps * plane * dtype.itemsize)))

    def pack(weight: np.ndarray) -> np.ndarray:
        w = _oihw(weight, g.kernel_layout, dtype).reshape(c, mult, g.kh * g.kw)
        return np.ascontiguousarray(w[:, :, pg.order])  # [C, mult, T]

    def run(x: np.ndarray, wp: np.ndarray) -> np.ndarray:
        ph = pg.phases(x)
        grid = scratch("acc", (g.n, c, mult, plane), dtype)
        for i in range(g.n):
            for c0 in range(0, c, cb):
                c1 = min(c, c0 + cb)
                cols = pg.gather(ph, i, c0, c1).reshape(ntaps, c1 - c0, plane).transpose(1, 0, 2)
                np.matmul(wp[c0:c1], cols, out=grid[i, c0:c1])
        return pg.crop(grid)

    return pack, run


def _conv_im2col(g: ConvGeometry, dtype: np.dtype) -> tuple[Packer, Runner]:
    """(pack, run) for the im2col + matmul convolution, one matmul per group.

    NCHW output comes straight out of ``W[O, K] @ cols[K, OH*OW]`` and NHWC out
    of ``cols[N*OH*OW, K] @ W[K, O]``; only grouped NHWC transposes its result.
    The columns are a copy of one strided view of the padded input, ordered
    (kh, kw, C) when gathered channels-last and (C, kh, kw) otherwise; the
    weight is packed in the same order. 1x1 unpadded convolutions skip im2col.
    """
    G, og, cg = g.groups, g.o // g.groups, g.i
    k = cg * g.kh * g.kw
    m = g.oh * g.ow
    pads = (g.pt, g.pl, g.pb, g.pr)
    pointwise = g.kh == 1 and g.kw == 1 and not g.padded
    channels_last = not pointwise and (not g.nchw or cg >= CHANNELS_LAST_COLS_MIN)

    def pack(weight: np.ndarray) -> np.ndarray:
        w = _oihw(weight, g.kernel_layout, dtype).reshape(G, og, cg, g.kh, g.kw)
        if channels_last:
            w = w.transpose(0, 1, 3, 4, 2)  # [G, og, kh, kw, cg]
        w = w.reshape(G, og, k)
        if not g.nchw:
            w = w.transpose(0, 2, 1)  # [G, K, og]: cols @ W
        return np.ascontiguousarray(w[0] if G == 1 else w)

    def channels_last_cols(x_nhwc: np.ndarray, group_major: bool, fill: Any, cdt: np.dtype) -> np.ndarray:
        """Columns [N, G, OH*OW, K] (``group_major``: [G, N*OH*OW, K]), K ordered (kh, kw, cg), from NHWC data."""
        xp = _pad_spatial(x_nhwc, False, pads, cdt, fill)
        s0, s1, s2, s3 = xp.strides
        shape = (g.n, G, g.oh, g.ow, g.kh, g.kw, cg)
        strides = (s0, s3 * cg, s1 * g.sh, s2 * g.sw, s1 * g.dh, s2 * g.dw, s3)
        if group_major:
            shape = (G, g.n, *shape[2:])
            strides = (strides[1], strides[0], *strides[2:])
        cols = _gather(as_strided(xp, shape, strides, writeable=False))
        return cols.reshape(G, g.n * m, k) if group_major else cols.reshape(g.n, G, m, k)

    # The input view the columns are gathered from (NCHW data is gathered channels-last through
    # its NHWC view), the columns (contiguous, in scratch memory) and the product consuming them.
    view_in: Callable[[np.ndarray], np.ndarray] = _identity
    columns: Callable[[np.ndarray, Any, np.dtype], np.ndarray]
    product: Runner
    if g.nchw:
        if channels_last:
            view_in = _to_nhwc

            def columns_nchw(x: np.ndarray, fill: Any, cdt: np.dtype) -> np.ndarray:
                return channels_last_cols(x, False, fill, cdt)  # [N, G, M, K]

        else:

            def columns_nchw(x: np.ndarray, fill: Any, cdt: np.dtype) -> np.ndarray:
                xp = _pad_spatial(x, True, pads, cdt, fill)
                s0, s1, s2, s3 = xp.strides
                view = as_strided(
                    xp,
                    (g.n, G, cg, g.kh, g.kw, g.oh, g.ow),
                    (s0, s1 * cg, s1, s2 * g.dh, s3 * g.dw, s2 * g.sh, s3 * g.sw),
                    writeable=False,
                )
                return _gather(view).reshape(g.n, G, k, m)

        def product_nchw(cols: np.ndarray, wp: np.ndarray) -> np.ndarray:
            if channels_last:
                cols = cols.transpose(0, 1, 3, 2)
            out = np.matmul(wp, cols[:, 0] if G == 1 else cols)  # [N, (G,) og, OH*OW]
            return out.reshape(g.out_shape)

        columns, product = columns_nchw, product_nchw
    else:

        def columns_nhwc(x: np.ndarray, fill: Any, cdt: np.dtype) -> np.ndarray:
            return channels_last_cols(x, True, fill, cdt)  # [G, N*OH*OW, K]

        def product_nhwc(cols: np.ndarray, wp: np.ndarray) -> np.ndarray:
            if G == 1:
                return np.matmul(cols[0], wp).reshape(g.out_shape)
            out = np.matmul(cols, wp)  # [G, N*OH*OW, og]
            return np.ascontiguousarray(out.transpose(1, 0, 2)).reshape(g.out_shape)

        columns, product = columns_nhwc, product_nhwc

    if pointwise:

        def run_pointwise(x: np.ndarray, wp: np.ndarray) -> np.ndarray:
            if g.nchw:
                xs = x if g.sh == g.sw == 1 else x[:, :, :: g.sh, :: g.sw]
                cols = xs.astype(dtype, copy=False).reshape(g.n, G, k, m)
                out = np.matmul(wp, cols[:, 0] if G == 1 else cols)  # [N, (G,) og, OH*OW]
                return out.reshape(g.out_shape)
            xs = x if g.sh == g.sw == 1 else x[:, :: g.sh, :: g.sw, :]
            xs = xs.astype(dtype, copy=False)
            if G == 1:
                return np.matmul(xs.reshape(g.n * m, k), wp).reshape(g.out_shape)
            cols = xs.reshape(g.n * m, G, k).transpose(1, 0, 2)  # [G, N*OH*OW, cg]
            out = np.matmul(cols, wp)  # [G, N*OH*OW, og]
            return np.ascontiguousarray(out.transpose(1, 0, 2)).reshape(g.out_shape)

        return pack, run_pointwise

    row = cg if channels_last else 1
    if _gathers(g.n * G * m * k, row):
        in_shape = (g.n, g.h, g.w, g.c) if channels_last else (g.n, g.c, g.h, g.w)
        gather = _IndexGather(in_shape, columns, dtype, row=row)

        def run_gathered(x: np.ndarray, wp: np.ndarray) -> np.ndarray:
            return product(gather(view_in(x)), wp)

        return pack, run_gathered

    def run(x: np.ndarray, wp: np.ndarray) -> np.ndarray:
        return product(columns(view_in(x), 0, dtype), wp)

    return pack, run


#: Bytes of output an NHWC depthwise convolution accumulates at a time: small enough that the
#: running sum stays in L2 cache across its kernel taps.
DEPTHWISE_BLOCK_BYTES = 1 << 20


def _conv_depthwise_nhwc(g: ConvGeometry, dtype: np.dtype) -> tuple[Packer, Runner]:
    """(pack, run) for NHWC depthwise convolution (one input channel per group, ``mult`` outputs each).

    A loop over the kernel taps, each a shifted view times per-channel weights,
    whose rows of C * mult values are long enough for numpy's loops. So that
    every tap is one contiguous run, the padded input is split into its
    ``sh x sw`` stride phases and flattened: a tap is then a flat offset into one
    phase, and the output is computed on a grid ``Wq >= OW`` wide, cropped at the end.
    """
    c, mult = g.c, g.o // g.c
    rr = [(r * g.dh) // g.sh for r in range(g.kh)]
    qq = [(q * g.dw) // g.sw for q in range(g.kw)]
    hq = g.oh + max(rr) + 1  # phase height: room for the last tap's flat run
    wq = g.ow + max(qq)  # phase width: every valid column of every tap stays in its row
    span = g.oh * wq
    taps_at = [((r * g.dh) % g.sh, (q * g.dw) % g.sw, rr[r] * wq + qq[q]) for r in range(g.kh) for q in range(g.kw)]

    def pack(weight: np.ndarray) -> np.ndarray:
        w = _oihw(weight, g.kernel_layout, dtype).reshape(c, mult, g.kh, g.kw)
        # taps[t] [C, mult] against [N, span, C, 1]
        return np.ascontiguousarray(w.transpose(2, 3, 0, 1).reshape(g.kh * g.kw, c, mult))

    def phases(x: np.ndarray) -> np.ndarray:
        """[sh, sw, N, hq*wq, C]: the padded input by stride phase."""
        ht, wt = hq * g.sh, wq * g.sw
        r0, r1 = min(g.pt, ht), min(g.pt + g.h, ht)
        c0, c1 = min(g.pl, wt), min(g.pl + g.w, wt)
        xp = _pad_spatial(x[:, : r1 - r0, : c1 - c0], False, (r0, c0, ht - r1, wt - c1), dtype)
        xp = xp.reshape(g.n, hq, g.sh, wq, g.sw, c).transpose(2, 4, 0, 1, 3, 5)
        if not xp.flags.c_contiguous:  # strided: de-interleave the phases
            xp = _gather(xp)
        return xp.reshape(g.sh, g.sw, g.n, hq * wq, c)

    # blocks of grid positions
    block = max(1, min(span, DEPTHWISE_BLOCK_BYTES // max(c * mult * g.n * dtype.itemsize, 1)))

    def run(x: np.ndarray, taps: np.ndarray) -> np.ndarray:
        ph = phases(x)
        out = scratch("acc", (g.n, span, c, mult), dtype)
        tmp = scratch("tmp", (g.n, block, c, mult), dtype)
        for b0 in range(0, span, block):
            b1 = min(span, b0 + block)
            acc, part = out[:, b0:b1], tmp[:, : b1 - b0]
            for t, (a, b, off) in enumerate(taps_at):
                src = ph[a, b, :, off + b0 : off + b1, :, None]
                if t == 0:
                    np.multiply(src, taps[t], out=acc)
                else:
                    np.multiply(src, taps[t], out=part)
                    acc += part
        return out.reshape(g.n, g.oh, wq, g.o)[:, :, : g.ow].copy()  # out of scratch memory

    return pack, run


def _with_weight(pack: Packer, run: Runner, weight: np.ndarray | None) -> Kernel:
    """Bind a pre-packed weight when it is known, else pack on every call."""
    if weight is not None:
        packed = pack(weight)

        def run_packed(data: np.ndarray, _weight: np.ndarray | None = None) -> np.ndarray:
            return run(data, packed)

        return run_packed

    def run_unpacked(data: np.ndarray, w: np.ndarray | None) -> np.ndarray:
        if w is None:
            raise ValueError("this kernel was built without a weight: pass it at run time")
        return run(data, pack(w))

    return run_unpacked


def build_conv2d(
    attrs: Mapping[str, Any],
    data_shape: tuple[int, ...],
    weight_shape: tuple[int, ...],
    dtype: np.dtype,
    weight: np.ndarray | None = None,
) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]:
    """A conv2d kernel ``f(data, weight)`` computing in ``dtype`` for one geometry.

    ``attrs`` are conv2d attributes (layouts, strides, padding, dilation,
    groups). With ``weight`` given here it is packed once and ``f`` ignores its
    second argument. Padding is zero padding.
    """
    g = conv2d_geometry(attrs, data_shape, weight_shape)
    dtype = np.dtype(dtype)
    if g.groups > 1 and g.i == 1 and g.groups == g.c:
        pack, run = (_conv_depthwise_nchw if g.nchw else _conv_depthwise_nhwc)(g, dtype)
    else:
        pack, run = _conv_im2col(g, dtype)
    return _with_weight(pack, run, weight)


def build_conv2d_transpose(
    attrs: Mapping[str, Any],
    data_shape: tuple[int, ...],
    weight_shape: tuple[int, ...],
    dtype: np.dtype,
    weight: np.ndarray | None = None,
) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]:
    """A conv2d_transpose kernel ``f(data, weight)`` computing in ``dtype``.

    One matmul per group gives every (input pixel, kernel tap) contribution
    (``cols = W^T @ x``); a loop over the kernel taps scatter-adds them into the
    output at stride offsets (col2im), then the padding is cropped.
    """
    g = conv2d_transpose_geometry(attrs, data_shape, weight_shape)
    dtype = np.dtype(dtype)
    G, cg, og, kh, kw = g.groups, g.c // g.groups, g.og, g.kh, g.kw
    full_h = (g.h - 1) * g.sh + g.dh * (kh - 1) + 1 + g.oph
    full_w = (g.w - 1) * g.sw + g.dw * (kw - 1) + 1 + g.opw

    def pack(weight: np.ndarray) -> np.ndarray:
        # logical IOHW [G*Cg, Og, kh, kw] -> [G, Og*kh*kw, Cg]: cols = W @ x per group
        w = _permute(np.asarray(weight), g.kernel_layout, "IOHW").astype(dtype, copy=False)
        w = w.reshape(G, cg, og * kh * kw).transpose(0, 2, 1)
        return np.ascontiguousarray(w)

    def run(x: np.ndarray, wp: np.ndarray) -> np.ndarray:
        x = x.astype(dtype, copy=False)
        if not g.nchw:
            x = x.transpose(0, 3, 1, 2)
        xg = x.reshape(g.n, G, cg, g.h * g.w)
        cols = np.matmul(wp, xg, out=scratch("cols", (g.n, G, og * kh * kw, g.h * g.w), dtype))
        cols = cols.reshape(g.n, G * og, kh, kw, g.h, g.w)
        buf = scratch("acc", (g.n, G * og, full_h, full_w), dtype)
        buf.fill(0)
        for r in range(kh):
            for q in range(kw):
                rows = slice(r * g.dh, r * g.dh + (g.h - 1) * g.sh + 1, g.sh)
                cols_ = slice(q * g.dw, q * g.dw + (g.w - 1) * g.sw + 1, g.sw)
                buf[:, :, rows, cols_] += cols[:, :, r, q]
        out = buf[:, :, g.pt : g.pt + g.oh, g.pl : g.pl + g.ow]
        if not g.nchw:
            out = out.transpose(0, 2, 3, 1)
        return np.array(out, order="C")  # a copy: buf is scratch memory

    return _with_weight(pack, run, weight)


def build_dense(
    data_shape: tuple[int, ...],
    weight_shape: tuple[int, ...],
    dtype: np.dtype,
    weight: np.ndarray | None = None,
) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]:
    """A dense kernel ``f(data, weight) = data @ weight.T`` computing in ``dtype``.

    ``data`` is ``[..., K]``, ``weight`` ``[N, K]``; a weight given here is
    packed once as a contiguous ``[K, N]`` matrix.
    """
    out_shape = dense_out_shape(data_shape, weight_shape)
    dtype = np.dtype(dtype)
    k = int(weight_shape[1])

    def pack(w: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(w).astype(dtype, copy=False).T)

    def run(x: np.ndarray, wt: np.ndarray) -> np.ndarray:
        x2 = x.astype(dtype, copy=False).reshape(-1, k)
        return np.matmul(x2, wt).reshape(out_shape)

    return _with_weight(pack, run, weight)


def dense_out_shape(data_shape: Sequence[int], weight_shape: Sequence[int]) -> tuple[int, ...]:
    """Validate dense shapes (data ``[..., K]``, weight ``[N, K]``) and give the output shape."""
    expect(len(data_shape) >= 1, "dense data must have at least one axis")
    expect(len(weight_shape) == 2, f"dense weight must be 2-D [N, K], got shape {list(weight_shape)}")
    expect(
        data_shape[-1] == weight_shape[1],
        f"data has K={data_shape[-1]} features (shape {list(data_shape)}) but the weight {list(weight_shape)} expects K={weight_shape[1]}",
    )
    return (*tuple(data_shape[:-1]), int(weight_shape[0]))


# --------------------------------------------------------------------------------------
# type-rule helpers


def _numeric(t: TensorType, what: str, op: str) -> None:
    if t.dtype not in _NUMERIC_DTYPES:
        raise TypeInferenceError(f"{what} has dtype {t.dtype}; {op} takes float or integer tensors")


def _float(t: TensorType, what: str, op: str) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise TypeInferenceError(f"{what} has dtype {t.dtype}; {op} takes float tensors ({', '.join(FLOAT_DTYPES)})")


def _not_quantized(op: str, qop: str, *types: TensorType) -> None:
    if any(t.quant is not None for t in types):
        raise TypeInferenceError(f"{op} got a quantized input; quantized tensors go through {qop}")


def _same_dtype(op: str, **types: TensorType) -> None:
    dtypes = {name: t.dtype for name, t in types.items()}
    if len(set(dtypes.values())) != 1:
        raise TypeInferenceError(
            f"{op} needs one dtype for all inputs, got " + ", ".join(f"{k} {v}" for k, v in dtypes.items())
        )


def _contiguous(arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``arr`` as a C-contiguous array of exactly ``dtype`` (no copy when it already is)."""
    return np.ascontiguousarray(arr, dtype=dtype)


def _check_weighted(op: str, qop: str, data: TensorType, weight: TensorType) -> None:
    """The dtype rules of the ops with a weight (conv2d, conv2d_transpose, dense):
    not quantized (``qop`` takes those), numeric data, one dtype for data and weight."""
    _not_quantized(op, qop, data, weight)
    _numeric(data, "data", op)
    _same_dtype(op, data=data, weight=weight)


def _prepare_weighted(
    ctx: OpContext, build: Callable[[np.dtype, np.ndarray | None], Kernel]
) -> Callable[..., np.ndarray]:
    """Bind an op with a weight at input 1: ``build(compute dtype, constant weight or None)``
    gives the builder's kernel, whose result is returned as exactly the output dtype."""
    out_dtype = ctx.out_types[0].np_dtype
    f = build(_compute_dtype(out_dtype), ctx.const(1))

    def run(data: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return _contiguous(f(data, weight), out_dtype)

    return run


# --------------------------------------------------------------------------------------
# nn.conv2d

CONV2D_ATTRS: dict[str, Any] = {
    "strides": (1, 1),
    "padding": (0, 0, 0, 0),
    "dilation": (1, 1),
    "groups": 1,
    "data_layout": "NCHW",
    "kernel_layout": "OIHW",
}


def _infer_conv2d(attrs: Mapping[str, Any], data: TensorType, weight: TensorType) -> TensorType:
    _check_weighted("nn.conv2d", "qnn.conv2d", data, weight)
    g = conv2d_geometry(attrs, data.shape, weight.shape)
    return TensorType(g.out_shape, data.dtype)


def _prepare_conv2d(ctx: OpContext) -> Callable[..., np.ndarray]:
    shapes = ctx.in_types[0].shape, ctx.in_types[1].shape
    return _prepare_weighted(ctx, lambda dtype, weight: build_conv2d(ctx.attrs, *shapes, dtype, weight))


def conv2d_macs(ctx: OpContext) -> int:
    """Multiply-accumulates of an ``nn.conv2d`` or ``qnn.conv2d`` node.

    Each output element takes (input channels per group) x kernel height x kernel
    width of them: the weight's elements per output channel (its geometry's ``macs``).
    """
    weight = ctx.in_types[1]
    return ctx.out_types[0].size * (weight.size // weight.shape[ctx.attrs["kernel_layout"].index("O")])


@register_op(
    "nn.conv2d",
    layout=Layout.CONV,
    channel_axes=conv_channel_axes,
    qdq=Qdq.LINEAR,
    qnn="qnn.conv2d",
    infer=_infer_conv2d,
    attrs=CONV2D_ATTRS,
    num_inputs=2,
    prepare=_prepare_conv2d,
    macs=conv2d_macs,
)
def conv2d(ctx: OpContext, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """2-D cross-correlation with zero padding, groups, dilation; NCHW/NHWC data, four kernel layouts."""
    return _prepare_conv2d(ctx)(data, weight)


# --------------------------------------------------------------------------------------
# nn.conv2d_transpose

CONV2D_TRANSPOSE_ATTRS: dict[str, Any] = {
    "strides": (1, 1),
    "padding": (0, 0, 0, 0),
    "output_padding": (0, 0),
    "dilation": (1, 1),
    "groups": 1,
    "data_layout": "NCHW",
    "kernel_layout": "IOHW",
}


def _infer_conv2d_transpose(attrs: Mapping[str, Any], data: TensorType, weight: TensorType) -> TensorType:
    _check_weighted("nn.conv2d_transpose", "qnn.conv2d_transpose", data, weight)
    g = conv2d_transpose_geometry(attrs, data.shape, weight.shape)
    return TensorType(g.out_shape, data.dtype)


def _prepare_conv2d_transpose(ctx: OpContext) -> Callable[..., np.ndarray]:
    shapes = ctx.in_types[0].shape, ctx.in_types[1].shape
    return _prepare_weighted(ctx, lambda dtype, weight: build_conv2d_transpose(ctx.attrs, *shapes, dtype, weight))


def conv2d_transpose_macs(ctx: OpContext) -> int:
    """Multiply-accumulates of an ``nn.conv2d_transpose`` or ``qnn.conv2d_transpose`` node."""
    return conv2d_transpose_geometry(ctx.attrs, ctx.in_types[0].shape, ctx.in_types[1].shape).macs


@register_op(
    "nn.conv2d_transpose",
    layout=Layout.CONV,
    channel_axes=conv_transpose_channel_axes,
    qdq=Qdq.LINEAR,
    qnn="qnn.conv2d_transpose",
    infer=_infer_conv2d_transpose,
    attrs=CONV2D_TRANSPOSE_ATTRS,
    num_inputs=2,
    prepare=_prepare_conv2d_transpose,
    macs=conv2d_transpose_macs,
)
def conv2d_transpose(ctx: OpContext, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Transposed convolution (ONNX ConvTranspose): the gradient of conv2d with respect to its input."""
    return _prepare_conv2d_transpose(ctx)(data, weight)


# --------------------------------------------------------------------------------------
# nn.dense, nn.batch_matmul


def _infer_dense(attrs: Mapping[str, Any], data: TensorType, weight: TensorType) -> TensorType:
    _check_weighted("nn.dense", "qnn.dense", data, weight)
    return TensorType(dense_out_shape(data.shape, weight.shape), data.dtype)


def _prepare_dense(ctx: OpContext) -> Callable[..., np.ndarray]:
    shapes = ctx.in_types[0].shape, ctx.in_types[1].shape
    return _prepare_weighted(ctx, lambda dtype, weight: build_dense(*shapes, dtype, weight))


def dense_macs(ctx: OpContext) -> int:
    """Multiply-accumulates of an ``nn.dense`` or ``qnn.dense`` node: output elements x K."""
    return ctx.out_types[0].size * int(ctx.in_types[1].shape[1])


@register_op(
    "nn.dense",
    layout=Layout.FIXED,
    channel_axes=dense_channel_axes,
    qdq=Qdq.LINEAR,
    qnn="qnn.dense",
    infer=_infer_dense,
    num_inputs=2,
    prepare=_prepare_dense,
    macs=dense_macs,
)
def dense(ctx: OpContext, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``data @ weight.T`` (fully connected layer without bias)."""
    return _prepare_dense(ctx)(data, weight)


def _batch_matmul_dims(attrs: Mapping[str, Any], a: Sequence[int], b: Sequence[int]) -> tuple[int, int, int, int]:
    """(B, M, N, K) of a batch_matmul, validated."""
    expect(len(a) == 3 and len(b) == 3, f"batch_matmul takes 3-D inputs, got shapes {list(a)} and {list(b)}")
    ta, tb = bool(attrs["transpose_a"]), bool(attrs["transpose_b"])
    ba, m, ka = (a[0], a[2], a[1]) if ta else tuple(a)
    bb, n, kb = (b[0], b[1], b[2]) if tb else (b[0], b[2], b[1])
    expect(
        ka == kb,
        f"inner dimensions differ: a {list(a)} (transpose_a={ta}) has K={ka}, b {list(b)} (transpose_b={tb}) has K={kb}",
    )
    expect(ba == bb or ba == 1 or bb == 1, f"batch sizes {ba} and {bb} do not broadcast")
    return max(ba, bb), m, n, ka


def _infer_batch_matmul(attrs: Mapping[str, Any], a: TensorType, b: TensorType) -> TensorType:
    _not_quantized("nn.batch_matmul", "qnn ops", a, b)
    _numeric(a, "a", "nn.batch_matmul")
    _same_dtype("nn.batch_matmul", a=a, b=b)
    bsz, m, n, _ = _batch_matmul_dims(attrs, a.shape, b.shape)
    return TensorType((bsz, m, n), a.dtype)


def _macs_batch_matmul(ctx: OpContext) -> int:
    bsz, m, n, k = _batch_matmul_dims(ctx.attrs, ctx.in_types[0].shape, ctx.in_types[1].shape)
    return bsz * m * n * k


@register_op(
    "nn.batch_matmul",
    layout=Layout.FIXED,
    infer=_infer_batch_matmul,
    attrs={"transpose_a": False, "transpose_b": True},
    num_inputs=2,
    macs=_macs_batch_matmul,
)
def batch_matmul(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Batched matmul; ``b`` is ``[B, N, K]`` when ``transpose_b`` (the default), batch 1 broadcasts."""
    out_dtype = ctx.out_types[0].np_dtype
    cdt = _compute_dtype(out_dtype)
    a = a.astype(cdt, copy=False)
    b = b.astype(cdt, copy=False)
    if ctx.attrs["transpose_a"]:
        a = a.transpose(0, 2, 1)
    if ctx.attrs["transpose_b"]:
        b = b.transpose(0, 2, 1)
    return _contiguous(np.matmul(a, b), out_dtype)


# --------------------------------------------------------------------------------------
# nn.bias_add, nn.batch_norm, nn.instance_norm


def _channel_vector(t: TensorType, what: str, channels: int, axis: int) -> None:
    expect(
        t.shape == (channels,),
        f"{what} must have shape [{channels}] (axis {axis} of the data), got {list(t.shape)}",
    )


def _infer_bias_add(attrs: Mapping[str, Any], data: TensorType, bias: TensorType) -> TensorType:
    _numeric(data, "data", "nn.bias_add")
    _same_dtype("nn.bias_add", data=data, bias=bias)
    expect(data.rank >= 1, "nn.bias_add data must have at least one axis")
    axis = normalize_axis(attrs["axis"], data.rank)
    _channel_vector(bias, "bias", data.shape[axis], axis)
    return data


def _along(vec: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A 1-D vector reshaped to broadcast along ``axis`` of a rank-``rank`` array."""
    shape = [1] * rank
    shape[axis] = -1
    return vec.reshape(shape)


#: Tensors up to this many elements get a constant per-channel operand repeated to their full shape.
BROADCAST_FULL_MAX = 1 << 13


def _prepare_bias_add(ctx: OpContext) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Axis and output dtype once per node; a constant bias is shaped for broadcasting once."""
    rank = ctx.in_types[0].rank
    axis = normalize_axis(ctx.attrs["axis"], rank)
    out_dtype = ctx.out_types[0].np_dtype
    const = ctx.const(1)
    shaped = None if const is None else _along(const, axis, rank)
    if shaped is not None and ctx.in_types[0].size <= BROADCAST_FULL_MAX:
        # the bias repeated over the whole shape: on small tensors numpy adds two same-shape
        # arrays ~2x faster than it broadcasts a vector along short rows
        shaped = np.ascontiguousarray(np.broadcast_to(shaped, ctx.in_types[0].shape))

    def run(data: np.ndarray, bias: np.ndarray) -> np.ndarray:
        b = shaped if shaped is not None else _along(bias, axis, rank)
        return _contiguous(np.add(data, b, dtype=out_dtype), out_dtype)

    return run


@register_op(
    "nn.bias_add",
    layout=Layout.AXIS,
    infer=_infer_bias_add,
    attrs={"axis": 1},
    num_inputs=2,
    prepare=_prepare_bias_add,
    affine=Affine.SHIFT,
)
def bias_add(ctx: OpContext, data: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Add a per-channel bias along ``axis`` (integer accumulators wrap like their dtype)."""
    return _prepare_bias_add(ctx)(data, bias)


def _infer_batch_norm(attrs: Mapping[str, Any], data: TensorType, *params: TensorType) -> TensorType:
    _float(data, "data", "nn.batch_norm")
    names = ("gamma", "beta", "mean", "var")
    _same_dtype("nn.batch_norm", data=data, **dict(zip(names, params, strict=True)))
    expect(data.rank >= 1, "nn.batch_norm data must have at least one axis")
    axis = normalize_axis(attrs["axis"], data.rank)
    for name, t in zip(names, params, strict=True):
        _channel_vector(t, name, data.shape[axis], axis)
    expect(float(attrs["epsilon"]) >= 0, f"epsilon must be non-negative, got {attrs['epsilon']}")
    return data.with_quant(None)


@register_op(
    "nn.batch_norm", layout=Layout.AXIS, infer=_infer_batch_norm, attrs={"axis": 1, "epsilon": 1e-5}, num_inputs=5
)
def batch_norm(
    ctx: OpContext, data: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray
) -> np.ndarray:
    """Inference batch norm: ``(x - mean) / sqrt(var + eps) * gamma + beta`` along ``axis``."""
    out_dtype = ctx.out_types[0].np_dtype
    cdt = _compute_dtype(out_dtype)
    axis = normalize_axis(ctx.attrs["axis"], data.ndim)
    scale = gamma.astype(cdt) / np.sqrt(var.astype(cdt) + cdt.type(ctx.attrs["epsilon"]))
    out = data.astype(cdt) - _along(mean.astype(cdt), axis, data.ndim)
    out *= _along(scale, axis, data.ndim)
    out += _along(beta.astype(cdt), axis, data.ndim)
    return _contiguous(out, out_dtype)


def _infer_instance_norm(attrs: Mapping[str, Any], data: TensorType, gamma: TensorType, beta: TensorType) -> TensorType:
    _float(data, "data", "nn.instance_norm")
    _same_dtype("nn.instance_norm", data=data, gamma=gamma, beta=beta)
    expect(
        data.rank >= 3,
        f"nn.instance_norm needs data of rank >= 3 (batch, channel, spatial...), got shape {list(data.shape)}",
    )
    axis = normalize_axis(attrs["axis"], data.rank)
    expect(axis != 0, "nn.instance_norm axis must be the channel axis, not the batch axis 0")
    _channel_vector(gamma, "gamma", data.shape[axis], axis)
    _channel_vector(beta, "beta", data.shape[axis], axis)
    expect(float(attrs["epsilon"]) >= 0, f"epsilon must be non-negative, got {attrs['epsilon']}")
    return data.with_quant(None)


def _instance_norm_layout(
    attrs: Mapping[str, Any], x: TensorType, perm: tuple[int, ...]
) -> tuple[Mapping[str, Any], tuple[int, ...]] | None:
    """Any order that keeps the batch axis first: the channel axis is remapped."""
    if perm[0] != 0:
        return None
    return {**attrs, "axis": perm.index(attrs["axis"] % len(perm))}, perm


@register_op(
    "nn.instance_norm",
    layout=_instance_norm_layout,
    infer=_infer_instance_norm,
    attrs={"axis": 1, "epsilon": 1e-5},
    num_inputs=3,
)
def instance_norm(ctx: OpContext, data: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Normalize each (instance, channel) over the remaining axes, then scale by gamma and shift by beta."""
    out_dtype = ctx.out_types[0].np_dtype
    cdt = _compute_dtype(out_dtype)
    axis = normalize_axis(ctx.attrs["axis"], data.ndim)
    reduce = tuple(a for a in range(1, data.ndim) if a != axis)
    x = data.astype(cdt)
    centered = x - x.mean(axis=reduce, keepdims=True)
    var = np.mean(np.square(centered), axis=reduce, keepdims=True)
    scale = _along(gamma.astype(cdt), axis, data.ndim) / np.sqrt(var + cdt.type(ctx.attrs["epsilon"]))
    centered *= scale
    centered += _along(beta.astype(cdt), axis, data.ndim)
    return _contiguous(centered, out_dtype)


def _infer_lrn(attrs: Mapping[str, Any], data: TensorType) -> TensorType:
    _float(data, "data", "nn.lrn")
    expect(data.rank >= 3, f"nn.lrn needs data of rank >= 3 (batch, channel, spatial...), got shape {list(data.shape)}")
    axis = normalize_axis(attrs["axis"], data.rank)
    expect(axis != 0, "nn.lrn axis must be the channel axis, not the batch axis 0")
    size = attrs["size"]
    expect(isinstance(size, (int, np.integer)) and size >= 1, f"nn.lrn size must be a positive integer, got {size!r}")
    expect(float(attrs["bias"]) > 0, f"nn.lrn bias must be positive, got {attrs['bias']}")
    return data.with_quant(None)


@register_op(
    "nn.lrn",
    layout=_instance_norm_layout,  # any order keeping the batch first: the channel axis is remapped
    infer=_infer_lrn,
    attrs={"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0, "axis": 1},
)
def lrn(ctx: OpContext, data: np.ndarray) -> np.ndarray:
    """Local response normalization across channels (AlexNet, ONNX LRN):
    y = x / (bias + alpha / size * sum of x^2 over channels c - (size-1)//2 .. c + size//2) ** beta."""
    out_dtype = ctx.out_types[0].np_dtype
    cdt = _compute_dtype(out_dtype)
    axis = normalize_axis(ctx.attrs["axis"], data.ndim)
    size = int(ctx.attrs["size"])
    x = data.astype(cdt)
    sq = np.moveaxis(np.square(x), axis, 0)
    c = sq.shape[0]
    # window sums as differences of a cumulative sum over the channel axis (0 before the first)
    csum = np.zeros((c + 1, *sq.shape[1:]), dtype=np.float64)
    np.cumsum(sq, axis=0, dtype=np.float64, out=csum[1:])
    lo = np.clip(np.arange(c) - (size - 1) // 2, 0, c)
    hi = np.clip(np.arange(c) + size // 2 + 1, 0, c)
    window = np.moveaxis((csum[hi] - csum[lo]).astype(cdt), 0, axis)
    alpha, beta, bias = (cdt.type(ctx.attrs[k]) for k in ("alpha", "beta", "bias"))
    denom = np.power(bias + (alpha / cdt.type(size)) * window, beta)
    return _contiguous(x / denom, out_dtype)


# --------------------------------------------------------------------------------------
# pooling

MAX_POOL2D_ATTRS: dict[str, Any] = {
    "pool_size": REQUIRED,
    "strides": (1, 1),
    "dilation": (1, 1),
    "padding": (0, 0, 0, 0),
    "layout": "NCHW",
    "ceil_mode": False,
}
AVG_POOL2D_ATTRS: dict[str, Any] = {**MAX_POOL2D_ATTRS, "count_include_pad": False}


def _infer_pool2d(attrs: Mapping[str, Any], data: TensorType) -> TensorType:
    expect(data.dtype != "bool", "pooling takes float or integer tensors, got bool")
    g = pool2d_geometry(attrs, data.shape)
    return data.with_shape(g.out_shape)


def _lowest(dtype: np.dtype) -> Any:
    """The value padding takes in a max pool: it never wins."""
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _pool_taps(g: PoolGeometry, xp: np.ndarray, order: Sequence[int]) -> list[np.ndarray]:
    """The window taps of a pool over the padded ``xp``, in ``order`` (``r * kw + q`` each)."""
    return [_tap(xp, g.nchw, (t // g.kw) * g.dh, (t % g.kw) * g.dw, g.sh, g.sw, g.oh, g.ow) for t in order]


def _pool_gather(g: PoolGeometry, order: Sequence[int], dtype: np.dtype, fill: Any) -> _IndexGather | None:
    """For a pool small enough (:data:`GATHER_MAX_ELEMENTS`), the gather of its taps as rows
    ``[T, output elements]``, in ``order``; else ``None``."""
    row = 1 if g.nchw else g.c
    if not _gathers(len(order) * g.n * g.c * g.oh * g.ow, row):
        return None
    pads = (g.pt, g.pl, g.pb + g.eb, g.pr + g.er)

    def taps(x: np.ndarray, fill_: Any, cdt: np.dtype) -> np.ndarray:
        xp = _pad_spatial(x, g.nchw, pads, cdt, fill_)
        return np.stack([view.reshape(-1) for view in _pool_taps(g, xp, order)])

    shape = (g.n, g.c, g.h, g.w) if g.nchw else (g.n, g.h, g.w, g.c)
    return _IndexGather(shape, taps, dtype, fill, row=row)


def _fold(op: np.ufunc, rows: np.ndarray) -> np.ndarray:
    """``op`` applied across the rows of ``rows`` [T, M], in order: the same pairs as the tap loops
    of the large-map kernels for floats (a ``reduce`` may pair them differently, which can change
    a rounding or the sign of a zero); integer sums and maxima do not depend on the pairing."""
    if len(rows) == 1:
        return rows[0]
    if rows.dtype.kind in "iu":
        return op.reduce(rows, axis=0)
    acc = op(rows[0], rows[1])
    for row in rows[2:]:
        op(acc, row, out=acc)
    return acc


def _prepare_max_pool2d(ctx: OpContext) -> Callable[[np.ndarray], np.ndarray]:
    """Geometry and tap plan once per node; small pools reduce one gather of all taps."""
    g = pool2d_geometry(ctx.attrs, ctx.in_types[0].shape)
    dtype = ctx.out_types[0].np_dtype
    lowest = _lowest(dtype)
    pg = _PhaseGrid(g, dtype) if g.nchw else None
    # taps in the order the large-map kernels take them, so that even the sign of a zero is the same
    order = pg.order if pg is not None else range(g.kh * g.kw)
    gather = _pool_gather(g, order, dtype, lowest)
    if gather is not None:

        def run_gathered(data: np.ndarray) -> np.ndarray:
            return _fold(np.maximum, gather(data)).reshape(g.out_shape)

        return run_gathered

    if pg is not None:
        # on stride phases each tap is one run over all channels (see _PhaseGrid), not strided
        # OW-long rows: ~1.6x faster on ResNet's 3x3/2 pool of 64x112x112
        size = g.n * g.c * pg.plane
        offsets = list(pg.taps())

        def run_phases(data: np.ndarray) -> np.ndarray:
            ph = pg.phases(data, lowest)
            runs = [ph[a, b, off : off + size] for a, b, off in offsets]
            acc = scratch("acc", (size,), dtype)
            if len(runs) == 1:
                np.copyto(acc, runs[0])
            else:
                np.maximum(runs[0], runs[1], out=acc)
            for run in runs[2:]:
                np.maximum(acc, run, out=acc)
            return pg.crop(acc)

        return run_phases

    pads = (g.pt, g.pl, g.pb + g.eb, g.pr + g.er)

    def run_nhwc(data: np.ndarray) -> np.ndarray:
        xp = _pad_spatial(data, False, pads, dtype, lowest)
        first, *rest = _pool_taps(g, xp, order)
        out = np.array(first, dtype=dtype, order="C")
        for view in rest:
            np.maximum(out, view, out=out)
        return out

    return run_nhwc


@register_op(
    "nn.max_pool2d",
    layout=Layout.LAYOUT,
    work=pool_work,
    qdq=Qdq.SELECTS,
    infer=_infer_pool2d,
    attrs=MAX_POOL2D_ATTRS,
    prepare=_prepare_max_pool2d,
)
def max_pool2d(ctx: OpContext, data: np.ndarray) -> np.ndarray:
    """2-D max pooling; padding never wins (−inf, or the dtype's minimum for integers)."""
    return _prepare_max_pool2d(ctx)(data)


def _window_counts(
    size: int, pad_begin: int, pad_end: int, k: int, d: int, s: int, out: int, include_pad: bool
) -> np.ndarray:
    """Per output position along one axis, how many window taps count towards the average."""
    pos = np.arange(out)[:, None] * s + np.arange(k)[None, :] * d  # in padded coordinates
    lo, hi = (0, size + pad_begin + pad_end) if include_pad else (pad_begin, pad_begin + size)
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


def _divide_round_away(total: np.ndarray, count: Any) -> np.ndarray:
    """Integer ``total / count`` rounded half away from zero (``count`` > 0)."""
    count = np.asarray(count, dtype=np.int64)
    q = (2 * np.abs(total) + count) // (2 * count)
    return np.where(total < 0, -q, q)


def _prepare_avg_pool2d(ctx: OpContext) -> Callable[[np.ndarray], np.ndarray]:
    """Geometry and divisors once per node; small pools sum one gather of all taps."""
    g = pool2d_geometry(ctx.attrs, ctx.in_types[0].shape)
    dtype = ctx.out_types[0].np_dtype
    acc = _compute_dtype(dtype)
    include = bool(ctx.attrs["count_include_pad"])
    ch = _window_counts(g.h, g.pt, g.pb, g.kh, g.dh, g.sh, g.oh, include)
    cw = _window_counts(g.w, g.pl, g.pr, g.kw, g.dw, g.sw, g.ow, include)
    # a window lying wholly in the padding (possible with dilation) averages nothing: 0
    count = np.maximum(np.outer(ch, cw), 1)
    if not g.nchw:
        count = count[:, :, None]
    count_acc = count.astype(acc)
    pads = (g.pt, g.pl, g.pb + g.eb, g.pr + g.er)
    order = range(g.kh * g.kw)
    gather = _pool_gather(g, order, acc, 0)

    def total_of(data: np.ndarray) -> np.ndarray:
        if gather is not None:
            return _fold(np.add, gather(data)).reshape(g.out_shape)
        xp = _pad_spatial(data, g.nchw, pads, acc, 0)
        first, *rest = _pool_taps(g, xp, order)
        total = np.array(first, dtype=acc, order="C")
        for view in rest:
            total += view
        return total

    def run(data: np.ndarray) -> np.ndarray:
        total = total_of(data)
        if acc.kind == "f":
            total /= count_acc
            return _contiguous(total, dtype)
        return _contiguous(_divide_round_away(total, count), dtype)

    return run


@register_op(
    "nn.avg_pool2d",
    layout=Layout.LAYOUT,
    work=pool_work,
    qdq=Qdq.AVERAGES,
    infer=_infer_pool2d,
    attrs=AVG_POOL2D_ATTRS,
    prepare=_prepare_avg_pool2d,
)
def avg_pool2d(ctx: OpContext, data: np.ndarray) -> np.ndarray:
    """2-D average pooling; integers sum in int64 and divide rounding half away from zero."""
    return _prepare_avg_pool2d(ctx)(data)


def _infer_global_pool(attrs: Mapping[str, Any], data: TensorType) -> TensorType:
    expect(data.dtype != "bool", "pooling takes float or integer tensors, got bool")
    layout = _layout(attrs["layout"], DATA_LAYOUTS, "layout")
    n, c, h, w = _spatial(data.shape, layout)
    expect(h * w > 0, f"global pooling of an empty {h}x{w} spatial extent")
    return data.with_shape((n, c, 1, 1) if layout == "NCHW" else (n, 1, 1, c))


def _hw_axes(layout: str) -> tuple[int, int]:
    return (2, 3) if layout == "NCHW" else (1, 2)


@register_op(
    "nn.global_max_pool2d",
    layout=Layout.LAYOUT,
    work=input_work,
    qdq=Qdq.SELECTS,
    infer=_infer_global_pool,
    attrs={"layout": "NCHW"},
)
def global_max_pool2d(ctx: OpContext, data: np.ndarray) -> np.ndarray:
    """Maximum over H and W, keeping them as size-1 axes."""
    return _contiguous(data.max(axis=_hw_axes(ctx.attrs["layout"]), keepdims=True), ctx.out_types[0].np_dtype)


@register_op(
    "nn.global_avg_pool2d",
    layout=Layout.LAYOUT,
    work=input_work,
    qdq=Qdq.AVERAGES,
    infer=_infer_global_pool,
    attrs={"layout": "NCHW"},
)
def global_avg_pool2d(ctx: OpContext, data: np.ndarray) -> np.ndarray:
    """Mean over H and W, keeping them as size-1 axes; integers round half away from zero."""
    axes = _hw_axes(ctx.attrs["layout"])
    dtype = ctx.out_types[0].np_dtype
    acc = _compute_dtype(dtype)
    if acc.kind == "f":
        return _contiguous(data.mean(axis=axes, dtype=acc, keepdims=True), dtype)
    total = data.sum(axis=axes, dtype=acc, keepdims=True)
    return _contiguous(_divide_round_away(total, data.shape[axes[0]] * data.shape[axes[1]]), dtype)


# --------------------------------------------------------------------------------------
# nn.pad


def pad_pairs(pad_width: Any, rank: int) -> tuple[tuple[int, int], ...]:
    """``pad_width`` as one (before, after) pair per axis; flattened means (b0, a0, b1, a1, ...)."""
    expect(isinstance(pad_width, (tuple, list)), f"pad_width must be a tuple, got {pad_width!r}")
    if all(isinstance(p, (tuple, list)) and len(p) == 2 and all(_is_int(v) for v in p) for p in pad_width):
        pairs = tuple((int(b), int(a)) for b, a in pad_width)
    elif all(_is_int(v) for v in pad_width) and len(pad_width) % 2 == 0:
        flat = [int(v) for v in pad_width]
        pairs = tuple(zip(flat[0::2], flat[1::2], strict=True))
    else:
        pairs = ()
        expect(False, f"pad_width must be (before, after) pairs, nested or flattened, got {pad_width!r}")
    expect(len(pairs) == rank, f"pad_width has {len(pairs)} (before, after) pairs for data of rank {rank}")
    expect(all(b >= 0 and a >= 0 for b, a in pairs), f"pad_width must be non-negative, got {pairs}")
    return pairs


def _infer_pad(attrs: Mapping[str, Any], data: TensorType) -> TensorType:
    pairs = pad_pairs(attrs["pad_width"], data.rank)
    mode = attrs["pad_mode"]
    expect(mode in ("constant", "edge", "reflect"), f"pad_mode {mode!r} is not supported (use constant, edge, reflect)")
    if mode == "constant":
        value = attrs["pad_value"]
        expect(
            isinstance(value, (int, float)) and not isinstance(value, bool),
            f"pad_value must be a number, got {value!r}",
        )
        dt = data.np_dtype
        if dt.kind in "iub":
            lo, hi = (0, 1) if dt.kind == "b" else (np.iinfo(dt).min, np.iinfo(dt).max)
            expect(
                float(value).is_integer() and lo <= value <= hi,
                f"pad_value {value!r} is not representable in {data.dtype} (an integer in [{lo}, {hi}])",
            )
    for axis, ((b, a), size) in enumerate(zip(pairs, data.shape, strict=True)):
        if mode == "edge" and (b or a):
            expect(size > 0, f"edge padding of the empty axis {axis}")
        if mode == "reflect" and (b or a):
            expect(max(b, a) < size, f"reflect padding {(b, a)} of axis {axis} must be smaller than its size {size}")
    return data.with_shape(tuple(s + b + a for s, (b, a) in zip(data.shape, pairs, strict=True)))


def _pad_layout(
    attrs: Mapping[str, Any], x: TensorType, perm: tuple[int, ...]
) -> tuple[Mapping[str, Any], tuple[int, ...]] | None:
    """Any order: the (before, after) pairs follow their axes."""
    pairs = pad_pairs(attrs["pad_width"], len(perm))
    return {**attrs, "pad_width": tuple(pairs[i] for i in perm)}, perm


@register_op(
    "nn.pad",
    layout=_pad_layout,
    infer=_infer_pad,
    attrs={"pad_width": REQUIRED, "pad_mode": "constant", "pad_value": 0.0},
)
def pad(ctx: OpContext, data: np.ndarray) -> np.ndarray:
    """numpy ``pad`` with mode constant (``pad_value``), edge or reflect."""
    pairs = pad_pairs(ctx.attrs["pad_width"], data.ndim)
    mode = ctx.attrs["pad_mode"]
    dtype = ctx.out_types[0].np_dtype
    if mode == "constant":
        value = np.array(ctx.attrs["pad_value"]).astype(dtype)
        return _contiguous(np.pad(data, pairs, mode="constant", constant_values=value), dtype)
    return _contiguous(np.pad(data, pairs, mode=mode), dtype)
