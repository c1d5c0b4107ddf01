"""ONNX handlers of tensor ops (the IR ops of :mod:`accel.ops.tensor`): shape and data
movement (Reshape, Squeeze, Transpose, Concat, Split, Slice, Gather, Expand, Tile, DepthToSpace,
Trilu ...), Resize, the reductions, Cast, constants, and the shape computations evaluated only
at import (Shape, Size, ConstantOfShape, Range, NonZero: :data:`FOLD_ONLY_OPS`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import NodeProto

from accel.errors import AccelError, ModelError, UnsupportedOpError
from accel.frontend.onnx import (
    _FLOATS,
    _HANDLERS,
    ConstantOperandRequired,
    Handler,
    _Attrs,
    _axis,
    _check_fold_result,
    _check_fold_size,
    _dtype,
    _fold_fits,
    _Importer,
    _op,
    _prod,
    _rename,
)
from accel.ir import MAX_ELEMENTS, TensorType, Value

# -- shape and data movement -------------------------------------------------------------


@_op("Identity")
def _identity(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    return [cv.need(node, ins, 0, "input")]


@_op("Dropout")
def _dropout(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    training = False
    ratio = 0.5
    if cv.opset >= 12:
        t = cv.const_input(node, ins, 2, "training_mode")
        training = bool(t.reshape(-1)[0]) if t is not None else False
        r = cv.const_input(node, ins, 1, "ratio") if training else None
        ratio = float(r.reshape(-1)[0]) if r is not None else 0.5
    else:
        ratio = a.float("ratio", 0.5)
    if training and ratio != 0.0:
        raise cv.unsupported(node, "training-mode Dropout (random) is not supported; export for inference")
    outs: list[Value | None] = [x]
    if len(node.output) > 1 and node.output[1]:
        _check_fold_size("Dropout's mask", x.type.shape, bool, cv.label)
        outs.append(cv.const(np.ones(x.type.shape, dtype=bool), out=node.output[1]))
    return outs


@_op("Reshape")
def _reshape(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    if "shape" in a:
        raise cv.unsupported(node, "the 'shape' attribute form (opset < 5) is not supported")
    shape_arr = cv.const_input(node, ins, 1, "shape")
    if shape_arr is None:
        raise ModelError(f"node {cv.label}: Reshape needs a shape")
    shape = [int(d) for d in shape_arr.reshape(-1)]
    allowzero = a.int("allowzero", 0)
    src = x.type.shape
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(src):
                raise ModelError(f"node {cv.label}: shape {shape} copies axis {i} that the input {list(src)} lacks")
            out.append(src[i])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise ModelError(f"node {cv.label}: shape {shape} has more than one -1")
    if any(d < -1 for d in out):
        raise ModelError(f"node {cv.label}: shape {shape} has a negative dimension")
    if -1 in out:
        known = _prod(d for d in out if d != -1)
        if known == 0 or x.type.size % known:
            raise ModelError(f"node {cv.label}: cannot reshape {list(src)} to {shape}")
        out[out.index(-1)] = x.type.size // known
    return [cv.emit("reshape", [x], {"newshape": tuple(out)}, out=node.output[0])]


@_op("Flatten")
def _flatten(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    rank = x.type.rank
    axis = a.int("axis", 1)
    if not -rank <= axis <= rank:
        raise ModelError(f"node {cv.label}: axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    shape = x.type.shape
    return [cv.emit("reshape", [x], {"newshape": (_prod(shape[:axis]), _prod(shape[axis:]))}, out=node.output[0])]


@_op("Squeeze", "Unsqueeze")
def _squeeze(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    if cv.opset < 13:
        axes = a.ints("axes")
    else:
        arr = cv.const_input(node, ins, 1, "axes")
        axes = None if arr is None else [int(v) for v in arr.reshape(-1)]
    shape = list(x.type.shape)
    if node.op_type == "Squeeze":
        if axes is None:
            new = [d for d in shape if d != 1]
        else:
            norm = {_axis(cv, ax, len(shape)) for ax in axes}
            for ax in norm:
                if shape[ax] != 1:
                    raise ModelError(f"node {cv.label}: cannot squeeze axis {ax} of size {shape[ax]}")
            new = [d for i, d in enumerate(shape) if i not in norm]
    else:
        if axes is None:
            raise ModelError(f"node {cv.label}: Unsqueeze needs axes")
        out_rank = len(shape) + len(axes)
        inserted = sorted(_axis(cv, ax, out_rank) for ax in axes)
        if len(set(inserted)) != len(inserted):
            raise ModelError(f"node {cv.label}: Unsqueeze axes {axes} repeat an axis")
        new = list(shape)
        for ax in inserted:
            new.insert(ax, 1)
    return [cv.emit("reshape", [x], {"newshape": tuple(new)}, out=node.output[0])]


@_op("Transpose")
def _transpose(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    perm = a.ints("perm", list(range(x.type.rank))[::-1])
    return [cv.transpose(x, perm, out=node.output[0])]


@_op("Concat")
def _concat(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    vals = [v for v in ins if v is not None]
    if not vals:
        raise ModelError(f"node {cv.label}: Concat needs inputs")
    axis = _axis(cv, a.int("axis"), vals[0].type.rank)
    return [cv.emit("concatenate", vals, {"axis": axis}, out=node.output[0])]


@_op("Split")
def _split(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    axis = _axis(cv, a.int("axis", 0), x.type.rank)
    dim = x.type.shape[axis]
    n_out = len(node.output)
    if cv.opset < 13:
        sizes = a.ints("split")
        if sizes is None and len(ins) > 1 and ins[1] is not None:
            sizes = [int(s) for s in cv.need_const(node, ins, 1, "split").reshape(-1)]
    else:
        arr = cv.const_input(node, ins, 1, "split")
        sizes = None if arr is None else [int(s) for s in arr.reshape(-1)]
    if sizes is None:
        k = a.int("num_outputs", n_out) if "num_outputs" in a else n_out
        if k != n_out:
            raise ModelError(f"node {cv.label}: num_outputs={k} but the node has {n_out} outputs")
        if "num_outputs" in a:
            chunk = -(-dim // k)
            sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(k)]
        else:
            if dim % k:
                raise ModelError(f"node {cv.label}: axis {axis} of size {dim} does not split into {k} equal parts")
            sizes = [dim // k] * k
    if len(sizes) != n_out or sum(sizes) != dim or any(s < 0 for s in sizes):
        raise ModelError(
            f"node {cv.label}: split sizes {sizes} do not cut axis {axis} of size {dim} into {n_out} parts"
        )
    if n_out == 1:
        return [x]
    points = tuple(int(p) for p in np.cumsum(sizes)[:-1])
    return cv.emit_multi("split", [x], {"indices_or_sections": points, "axis": axis}, outs=list(node.output))


@_op("Slice")
def _slice(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    rank = x.type.rank
    if cv.opset < 10:
        starts, ends = a.ints("starts"), a.ints("ends")
        axes = a.ints("axes", list(range(len(starts or []))))
        steps = [1] * len(axes)
    else:
        s_arr, e_arr = cv.const_input(node, ins, 1, "starts"), cv.const_input(node, ins, 2, "ends")
        ax_arr, st_arr = cv.const_input(node, ins, 3, "axes"), cv.const_input(node, ins, 4, "steps")
        if s_arr is None or e_arr is None:
            raise ModelError(f"node {cv.label}: Slice needs starts and ends")
        starts, ends = [int(v) for v in s_arr.reshape(-1)], [int(v) for v in e_arr.reshape(-1)]
        axes = list(range(len(starts))) if ax_arr is None else [int(v) for v in ax_arr.reshape(-1)]
        steps = [1] * len(starts) if st_arr is None else [int(v) for v in st_arr.reshape(-1)]
    if starts is None or ends is None or not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelError(f"node {cv.label}: starts/ends/axes/steps lengths differ")
    index: list[np.ndarray | slice] = [slice(None)] * rank
    ranges: dict[int, tuple[int, int, int]] = {}
    for start, end, ax, step in zip(starts, ends, axes, steps, strict=False):
        ax = _axis(cv, ax, rank)
        if ax in ranges:
            raise ModelError(f"node {cv.label}: Slice names axis {ax} twice")
        if step == 0:
            raise ModelError(f"node {cv.label}: Slice step 0")
        dim = x.type.shape[ax]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, -1), dim - 1), min(max(end, -1), dim - 1)
        ranges[ax] = (start, end, step)
        index[ax] = np.arange(start, end, step, dtype=np.int64)
    if x.const is not None:
        data = x.const
        for ax, idx in enumerate(index):
            if isinstance(idx, np.ndarray):
                data = np.take(data, idx, axis=ax)
        return [cv.const(data, out=node.output[0])]
    y = x
    for ax, (start, end, step) in sorted(ranges.items()):
        if step == 1:
            y = cv.slice_axis(y, ax, start, max(end, start))
        else:
            y = cv.take(y, ax, range(start, end, step))
    return [_rename(cv, y, node.output[0]) if y is not x else x]


@_op("Gather")
def _gather(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    idx_v = cv.need(node, ins, 1, "indices")
    rank = x.type.rank
    axis = _axis(cv, a.int("axis", 0), rank)
    dim = x.type.shape[axis]
    if idx_v.const is None:  # run-time indices (an embedding lookup ...)
        if idx_v.type.dtype not in ("int32", "int64"):
            raise ModelError(f"node {cv.label}: Gather indices are {idx_v.type.dtype}, not int32 or int64")
        return [cv.emit("take", [x, idx_v], {"axis": axis}, out=node.output[0])]
    idx = cv.need_const(node, ins, 1, "indices").astype(np.int64)
    if np.any(idx < -dim) or np.any(idx >= dim):
        raise ModelError(f"node {cv.label}: Gather indices out of range for axis {axis} of size {dim}")
    idx = np.where(idx < 0, idx + dim, idx)
    if x.const is not None:
        return [cv.const(np.take(x.const, idx, axis=axis), out=node.output[0])]
    y = cv.take(x, axis, idx.reshape(-1).tolist())
    shape = x.type.shape[:axis] + idx.shape + x.type.shape[axis + 1 :]
    return [cv.reshape(y, shape, out=node.output[0])]


@_op("Expand")
def _expand(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    shape_arr = cv.need_const(node, ins, 1, "shape")
    try:
        shape = tuple(np.broadcast_shapes(x.type.shape, tuple(int(d) for d in shape_arr.reshape(-1))))
    except ValueError:
        raise ModelError(f"node {cv.label}: cannot expand {list(x.type.shape)} to {shape_arr.tolist()}") from None
    y = cv.broadcast_to(x, shape)
    if y.const is not None and x.const is not None:
        return [cv.const(y.const, out=node.output[0])]
    return [_rename(cv, y, node.output[0])]


@_op("Tile")
def _tile(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    reps = [int(r) for r in cv.need_const(node, ins, 1, "repeats").reshape(-1)]
    if len(reps) != x.type.rank or any(r < 0 for r in reps):
        raise ModelError(f"node {cv.label}: repeats {reps} must have one non-negative value per axis")
    tiled = TensorType(tuple(d * r for d, r in zip(x.type.shape, reps, strict=True)), x.type.dtype)
    if x.const is not None and _fold_fits([x], [tiled]):
        return [cv.const(np.tile(x.const, reps), out=node.output[0])]
    if 0 in reps:
        raise cv.unsupported(node, "tiling to an empty tensor is not supported")
    y = x
    for ax, r in enumerate(reps):
        if r > 1:
            y = cv.repeat(y, r, ax)
    return [_rename(cv, y, node.output[0])]


@_op("DepthToSpace")
def _depth_to_space(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    mode = a.str("mode", "DCR")
    return [cv.emit("nn.depth_to_space", [x], {"block_size": a.int("blocksize"), "mode": mode}, out=node.output[0])]


@_op("SpaceToDepth")
def _space_to_depth(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    b = a.int("blocksize")
    if x.type.rank != 4:
        raise ModelError(f"node {cv.label}: SpaceToDepth needs 4-D input")
    n, c, h, w = x.type.shape
    if b < 1 or h % b or w % b:
        raise ModelError(f"node {cv.label}: blocksize {b} does not divide {h}x{w}")
    mode = a.str("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise ModelError(f"node {cv.label}: SpaceToDepth mode {mode!r} must be DCR or CRD")
    t = cv.reshape(x, (n, c, h // b, b, w // b, b))
    # DCR: out channel = (bh * b + bw) * C + c; CRD: c * b * b + bh * b + bw
    t = cv.transpose(t, (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return [cv.reshape(t, (n, c * b * b, h // b, w // b), out=node.output[0])]


@_op("Trilu")
def _trilu(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # multiply by a constant 0/1 band mask (static shapes make the mask a constant)
    x = cv.need(node, ins, 0, "input")
    k_arr = cv.const_input(node, ins, 1, "k")
    k = int(k_arr.reshape(-1)[0]) if k_arr is not None else 0
    if x.type.rank < 2:
        raise ModelError(f"node {cv.label}: Trilu needs rank >= 2")
    rows, cols = x.type.shape[-2:]
    upper = a.int("upper", 1)
    _check_fold_size("Trilu's band mask", (rows, cols), np.float64, cv.label)
    mask = np.triu(np.ones((rows, cols), dtype=bool), k) if upper else np.tril(np.ones((rows, cols), dtype=bool), k)
    if x.const is not None:
        return [cv.const(np.where(mask, x.const, np.zeros((), x.const.dtype)), out=node.output[0])]
    if x.type.dtype == "bool":
        t = cv.emit("cast", [x], {"dtype": "uint8"})
        t = cv.emit("multiply", [t, cv.const(mask.astype(np.uint8))])
        return [cv.emit("cast", [t], {"dtype": "bool"}, out=node.output[0])]
    return [cv.emit("multiply", [x, cv.const(mask.astype(x.type.dtype))], out=node.output[0])]


@_op("Resize", "Upsample")
def _resize(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    mode = a.str("mode", "nearest")
    legacy = node.op_type == "Upsample" or cv.opset < 11
    if x.type.rank != 4 and legacy:
        raise cv.unsupported(node, f"only 4-D (NCHW) data resizes, got rank {x.type.rank}")
    if legacy:
        scales = (
            a.get("scales") if node.op_type == "Upsample" and cv.opset < 9 else cv.const_input(node, ins, 1, "scales")
        )
        sizes = None
        ctm, nearest = "asymmetric", "floor"
        if mode == "bilinear":
            mode = "linear"
    else:
        scales = cv.const_input(node, ins, 2, "scales")
        sizes = cv.const_input(node, ins, 3, "sizes")
        ctm = a.str("coordinate_transformation_mode", "half_pixel")
        nearest = a.str("nearest_mode", "round_prefer_floor")
        policy = a.str("keep_aspect_ratio_policy", "stretch")
        general = (
            mode == "cubic"
            or a.int("antialias", 0)
            or a.int("exclude_outside", 0)
            or ctm in ("tf_crop_and_resize", "half_pixel_symmetric")
            or (sizes is not None and sizes.size and policy != "stretch")
            or x.type.rank != 4
            or _fractional_scales(x, scales, sizes, a)
        )
        if general:
            return [_resize_by_matrices(cv, node, a, ins, x, scales, sizes)]
    if mode not in ("nearest", "linear"):
        raise cv.unsupported(node, f"mode {mode!r} is not supported (nearest and linear are)")
    if ctm not in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"):
        raise cv.unsupported(node, f"coordinate_transformation_mode {ctm!r} is not supported")
    axes = a.ints("axes", [0, 1, 2, 3]) if not legacy else [0, 1, 2, 3]
    axes = [_axis(cv, ax, 4) for ax in axes]
    in_shape = x.type.shape
    out_shape = list(in_shape)
    if sizes is not None and sizes.size:
        vals = [int(v) for v in sizes.reshape(-1)]
        if len(vals) != len(axes):
            raise ModelError(f"node {cv.label}: {len(vals)} sizes for axes {axes}")
        for ax, v in zip(axes, vals, strict=False):
            out_shape[ax] = v
    elif scales is not None and np.asarray(scales).size:
        factors = [float(v) for v in np.asarray(scales, dtype=np.float64).reshape(-1)]
        if len(factors) != len(axes):
            raise ModelError(f"node {cv.label}: {len(factors)} scales for axes {axes}")
        for ax, s in zip(axes, factors, strict=False):
            exact = in_shape[ax] * s
            out_shape[ax] = math.floor(exact + 1e-9)
            if abs(exact - round(exact)) > 1e-4 * max(1.0, exact):
                raise cv.unsupported(
                    node,
                    f"scale {s} on axis {ax} gives a fractional size {exact:g}; accel resizes to whole sizes "
                    "(pass sizes, or scales that give whole sizes)",
                )
    else:
        raise ModelError(f"node {cv.label}: Resize needs scales or sizes")
    if out_shape[:2] != list(in_shape[:2]):
        raise cv.unsupported(node, "resizing the batch or channel axis is not supported")
    attrs = {
        "size": (out_shape[2], out_shape[3]),
        "layout": "NCHW",
        "method": "nearest_neighbor" if mode == "nearest" else "linear",
        "coordinate_transformation_mode": ctm,
    }
    if mode == "nearest":
        attrs["rounding_method"] = nearest
    return [cv.emit("image.resize2d", [x], attrs, out=node.output[0])]


def _fractional_scales(x: Value, scales: Any, sizes: Any, a: _Attrs) -> bool:
    """Whether ``scales`` (without sizes) give a fractional size on some axis, or resize N or C."""
    if (sizes is not None and sizes.size) or scales is None or not np.asarray(scales).size:
        return False
    factors = [float(v) for v in np.asarray(scales, dtype=np.float64).reshape(-1)]
    axes = a.ints("axes", list(range(x.type.rank)))
    for ax, f in zip(axes, factors, strict=False):
        exact = x.type.shape[ax % x.type.rank] * f
        if abs(exact - round(exact)) > 1e-4 * max(1.0, exact) or (ax % x.type.rank < 2 and f != 1.0):
            return True
    return False


def _resize_taps(mode: str, ratio: float, scale: float, a: _Attrs, antialias: bool) -> np.ndarray:
    """Interpolation weights of the taps around a source coordinate (ONNX Resize): tap i sits at
    offset i - n/2 + 1 from the pixel left of the coordinate; ``ratio`` in (0, 1] is the distance to it."""
    if mode == "nearest":
        rounding = a.str("nearest_mode", "round_prefer_floor")
        if ratio == 1.0:
            return np.array([0.0, 1.0])
        up = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": False,
            "ceil": True,
        }.get(rounding)
        if up is None:
            raise ModelError(f"Resize: unknown nearest_mode {rounding!r}")
        return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])
    cubic_a = a.float("cubic_coeff_a", -0.75)

    def cubic(t: np.ndarray) -> np.ndarray:
        t = np.abs(t)
        near = ((cubic_a + 2) * t - (cubic_a + 3)) * t * t + 1
        far = ((cubic_a * t - 5 * cubic_a) * t + 8 * cubic_a) * t - 4 * cubic_a
        return np.where(t <= 1, near, np.where(t < 2, far, 0.0))

    support = 2 if mode == "cubic" else 1
    if antialias:  # the kernel stretched by 1/scale when downsampling, normalized
        s = min(scale, 1.0)
        start = math.floor(-support / s) + 1
        t = (np.arange(start, 2 - start) - ratio) * s
        w = cubic(t) if mode == "cubic" else np.clip(1 - np.abs(t), 0, 1)
        return np.asarray(w / w.sum())
    t = np.arange(1 - support, support + 1) - ratio
    return cubic(t) if mode == "cubic" else np.clip(1 - np.abs(t), 0, 1)


def _resize_matrix(
    cv: _Importer, a: _Attrs, mode: str, n_in: int, n_out: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray]:
    """The [n_out, n_in] matrix of a 1-D ONNX Resize along one axis, and the constant added to each
    output (the extrapolation value where tf_crop_and_resize samples outside the input)."""
    ctm = a.str("coordinate_transformation_mode", "half_pixel")
    antialias = bool(a.int("antialias", 0))
    exclude = bool(a.int("exclude_outside", 0))
    extrapolation = a.float("extrapolation_value", 0.0)
    weights = np.zeros((n_out, n_in))
    shift = np.zeros(n_out)
    length = scale * n_in  # the real-valued output length
    for y in range(n_out):
        if ctm == "align_corners":
            x = 0.0 if length == 1 else y * (n_in - 1) / (length - 1)
        elif ctm == "asymmetric":
            x = y / scale
        elif ctm == "pytorch_half_pixel":
            x = -0.5 if length == 1 else (y + 0.5) / scale - 0.5
        elif ctm == "half_pixel":
            x = (y + 0.5) / scale - 0.5
        elif ctm == "half_pixel_symmetric":
            x = n_in / 2 * (1 - n_out / length) + (y + 0.5) / scale - 0.5
        elif ctm == "tf_crop_and_resize":
            assert roi is not None
            lo, hi = roi
            x = (hi - lo) * (n_in - 1) / 2 if length == 1 else y * (hi - lo) * (n_in - 1) / (length - 1)
            x += lo * (n_in - 1)
            if x < 0 or x > n_in - 1:
                shift[y] = extrapolation
                continue
        else:
            raise UnsupportedOpError(
                f"Resize at node {cv.label}: coordinate_transformation_mode {ctm!r} is not supported"
            )
        left = math.floor(x)
        ratio = 1.0 if x == left else x - left
        taps = _resize_taps(mode, ratio, scale, a, antialias)
        n = len(taps)
        first = (left - n // 2) if x == left else (left - n // 2 + 1)
        idx = np.arange(first, first + n)
        if exclude:
            taps = np.where((idx < 0) | (idx >= n_in), 0.0, taps)
            total = taps.sum()
            taps = taps / total if total != 0 else taps
        np.add.at(weights[y], np.clip(idx, 0, n_in - 1), taps)
    return weights, shift


#: entries of one interpolation matrix (in x out) the matrix form of Resize builds at most
_RESIZE_MATRIX_LIMIT = 1 << 24


def _resize_by_matrices(
    cv: _Importer, node: NodeProto, a: _Attrs, ins: list, x: Value, scales: Any, sizes: Any
) -> Value:
    """ONNX Resize one axis at a time as a product with a constant interpolation matrix
    (``nn.dense`` over the axis moved last), plus the extrapolation constant: every mode,
    coordinate transform, antialias, exclude_outside and aspect-ratio policy, any rank."""
    mode = a.str("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise cv.unsupported(node, f"mode {mode!r} is not supported (nearest, linear and cubic are)")
    if mode == "nearest" and a.int("antialias", 0):
        raise ModelError(f"node {cv.label}: Resize antialias needs mode linear or cubic")
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"this Resize of {x.type.dtype} data is not supported (float data is)")
    rank = x.type.rank
    shape = x.type.shape
    axes = [_axis(cv, ax, rank) for ax in a.ints("axes", list(range(rank)))]
    factors = [1.0] * rank
    out = list(shape)
    if sizes is not None and sizes.size:
        vals = [int(v) for v in sizes.reshape(-1)]
        if len(vals) != len(axes) or any(v < 0 for v in vals):
            raise ModelError(f"node {cv.label}: sizes {vals} for axes {axes}")
        for ax, v in zip(axes, vals, strict=False):
            if shape[ax] == 0:
                raise ModelError(f"node {cv.label}: Resize of an empty axis {ax}")
            factors[ax] = v / shape[ax]
            out[ax] = v
        policy = a.str("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise ModelError(f"node {cv.label}: unknown keep_aspect_ratio_policy {policy!r}")
            chosen = [factors[ax] for ax in axes]
            common = min(chosen) if policy == "not_larger" else max(chosen)
            for ax in axes:
                factors[ax] = common
                out[ax] = int(common * shape[ax] + 0.5)
    elif scales is not None and np.asarray(scales).size:
        vals_f = [float(v) for v in np.asarray(scales, dtype=np.float64).reshape(-1)]
        if len(vals_f) != len(axes) or any(v <= 0 for v in vals_f):
            raise ModelError(f"node {cv.label}: scales {vals_f} for axes {axes}")
        for ax, f in zip(axes, vals_f, strict=False):
            factors[ax] = f
            out[ax] = int(f * shape[ax])
    else:
        raise ModelError(f"node {cv.label}: Resize needs scales or sizes")
    if _prod(out) > MAX_ELEMENTS:
        raise ModelError(f"node {cv.label}: Resize output {out} is too large")
    roi = None
    if a.str("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
        roi_arr = cv.const_input(node, ins, 1, "roi")
        if roi_arr is None or roi_arr.size != 2 * len(axes):
            raise ModelError(f"node {cv.label}: tf_crop_and_resize needs a roi of {2 * len(axes)} values")
        r = [float(v) for v in roi_arr.reshape(-1)]
        roi = {ax: (r[i], r[i + len(axes)]) for i, ax in enumerate(axes)}
    dt = x.type.dtype
    y = x
    for ax in axes:
        box = roi[ax] if roi is not None else None
        if out[ax] == shape[ax] and factors[ax] == 1.0 and (box is None or box == (0.0, 1.0)):
            continue
        if shape[ax] == 0 or out[ax] == 0:
            raise cv.unsupported(node, f"resizing axis {ax} from {shape[ax]} to {out[ax]} elements is not supported")
        if shape[ax] * out[ax] > _RESIZE_MATRIX_LIMIT:
            raise cv.unsupported(
                node,
                f"this Resize of axis {ax} ({shape[ax]} -> {out[ax]}) needs a {shape[ax]}x{out[ax]} interpolation "
                f"matrix, beyond the limit of {_RESIZE_MATRIX_LIMIT} entries",
            )
        weights, shift = _resize_matrix(cv, a, mode, shape[ax], out[ax], factors[ax], box)
        perm = [d for d in range(rank) if d != ax] + [ax]
        t = cv.transpose(y, perm) if ax != rank - 1 else y
        t = cv.emit("nn.dense", [t, cv.const(weights.astype(dt), f"{cv.hint}/resize_axis{ax}")])
        if np.any(shift):
            t = cv.emit("add", [t, cv.const(shift.astype(dt), f"{cv.hint}/extrapolation")])
        back = [perm.index(d) for d in range(rank)]
        y = cv.transpose(t, back) if ax != rank - 1 else t
    return _rename(cv, y, node.output[0]) if y is not x else cv.reshape(x, shape, out=node.output[0])


# -- reductions ------------------------------------------------------------------------


def _reduce_axes(
    cv: _Importer, node: NodeProto, a: _Attrs, ins: list, rank: int, axes_input_since: int
) -> tuple[int, ...] | None:
    """Normalized reduction axes; None = identity (noop_with_empty_axes with no axes)."""
    if cv.opset < axes_input_since:
        axes = a.ints("axes")
    else:
        arr = cv.const_input(node, ins, 1, "axes")
        axes = None if arr is None else [int(v) for v in arr.reshape(-1)]
    if not axes:
        if a.int("noop_with_empty_axes", 0):
            return None
        return tuple(range(rank))
    norm = sorted({_axis(cv, ax, rank) for ax in axes})
    return tuple(norm)


@_op("ReduceProd")
def _reduce_prod(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    axes = _reduce_axes(cv, node, a, ins, x.type.rank, 18)
    if axes is None or x.type.rank == 0:
        return [x]
    return [cv.emit("prod", [x], {"axis": axes, "keepdims": bool(a.int("keepdims", 1))}, out=node.output[0])]


@_op("ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceMax", "ReduceMin")
def _reduce(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    op = node.op_type
    since = 13 if op == "ReduceSum" else 18
    axes = _reduce_axes(cv, node, a, ins, x.type.rank, since)
    keep = bool(a.int("keepdims", 1))
    out = node.output[0]
    if axes is None:
        return [x]
    if x.type.rank == 0:
        return [x]
    count = _prod(x.type.shape[ax] for ax in axes)
    if count == 0:  # reducing an empty set: the result does not depend on the data
        shape = (
            tuple(1 if ax in axes else d for ax, d in enumerate(x.type.shape))
            if keep
            else tuple(d for ax, d in enumerate(x.type.shape) if ax not in axes)
        )
        dt = np.dtype(x.type.dtype)
        if op in ("ReduceMax", "ReduceMin"):
            hi = op == "ReduceMin"
            if dt.kind == "f":
                fill = np.inf if hi else -np.inf
            elif dt.kind == "b":
                fill = hi
            else:
                fill = np.iinfo(dt).max if hi else np.iinfo(dt).min
        elif op == "ReduceMean":
            raise cv.unsupported(node, "the mean of an empty set is not supported")
        else:
            fill = 0
        _check_fold_size(op, shape, dt, cv.label)
        return [cv.const(np.full(shape, fill, dtype=dt), out=out)]
    if op in ("ReduceMax", "ReduceMin"):
        return [_reduce_extreme(cv, node, x, axes, keep, out)]
    if x.type.dtype not in _FLOATS:
        if op == "ReduceMean":
            return [cv.emit("mean", [x], {"axis": axes, "keepdims": keep}, out=out)]
        raise cv.unsupported(node, f"{op} of {x.type.dtype} data is not supported (float data is)")
    t = x
    if op in ("ReduceSumSquare", "ReduceL2"):
        t = cv.emit("multiply", [x, x])
    elif op == "ReduceL1":
        t = cv.emit("abs", [x])
    if op == "ReduceMean":
        return [cv.emit("mean", [t], {"axis": axes, "keepdims": keep}, out=out)]
    # a sum is the mean times the count (the IR has one reduction op)
    m = cv.emit("mean", [t], {"axis": axes, "keepdims": keep})
    s = cv.emit("multiply", [m, cv.scalar(count, x.type.dtype)], out=None if op == "ReduceL2" else out)
    if op == "ReduceL2":
        return [cv.emit("sqrt", [s], out=out)]
    return [s]


def _reduce_extreme(cv: _Importer, node: NodeProto, x: Value, axes: tuple[int, ...], keep: bool, out: str) -> Value:
    """ReduceMax/Min through global_max_pool2d: move the reduced axes last, view as [1, rest, red, 1]."""
    rank = x.type.rank
    shape = x.type.shape
    red = _prod(shape[ax] for ax in axes)
    if red == 0:
        raise cv.unsupported(node, "reducing an empty axis is not supported")
    rest_axes = [ax for ax in range(rank) if ax not in axes]
    rest = _prod(shape[ax] for ax in rest_axes)
    perm = rest_axes + list(axes)
    t = cv.transpose(x, perm) if perm != list(range(rank)) else x
    neg = node.op_type == "ReduceMin"
    if x.type.dtype == "bool":  # max = any, min = all: pool 0/1 as uint8
        t = cv.emit("cast", [t], {"dtype": "uint8"})
        if neg:
            t = cv.emit("subtract", [cv.scalar(1, "uint8"), t])
        t = cv.emit("nn.global_max_pool2d", [cv.reshape(t, (1, rest, red, 1))])
        if neg:
            t = cv.emit("subtract", [cv.scalar(1, "uint8"), t])
        t = cv.emit("cast", [t], {"dtype": "bool"})
        final = (
            tuple(1 if ax in axes else d for ax, d in enumerate(shape))
            if keep
            else tuple(shape[ax] for ax in rest_axes)
        )
        return cv.reshape(t, final, out=out)
    if neg:
        if x.type.dtype.startswith("uint") or x.type.dtype == "bool":
            raise cv.unsupported(node, f"ReduceMin of {x.type.dtype} data is not supported")
        t = cv.emit("negative", [t])
    t = cv.emit("nn.global_max_pool2d", [cv.reshape(t, (1, rest, red, 1))])
    if neg:
        t = cv.emit("negative", [t])
    final = (
        tuple(1 if ax in axes else d for ax, d in enumerate(shape)) if keep else tuple(shape[ax] for ax in rest_axes)
    )
    return cv.reshape(t, final, out=out)


# -- casts and constants ----------------------------------------------------------------


@_op("Cast", "CastLike")
def _cast(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    if node.op_type == "CastLike":
        dtype = cv.need(node, ins, 1, "target_type").type.dtype
    else:
        dtype = _dtype(a.int("to"), f"Cast at node {cv.label}: target")
    if dtype == x.type.dtype and x.type.quant is None:
        return [x]
    return [cv.emit("cast", [x], {"dtype": dtype}, out=node.output[0])]


@_op("Constant")
def _constant(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    what = f"Constant at node {cv.label}"
    if "value" in a:
        arr = cv.tensor_array(a.get("value"), what)
    elif "sparse_value" in a:
        arr = cv.sparse_array(a.get("sparse_value"), what)
    elif "value_float" in a:
        arr = np.array(a.float("value_float"), dtype=np.float32)
    elif "value_floats" in a:
        arr = np.array(a.get("value_floats"), dtype=np.float32)
    elif "value_int" in a:
        arr = np.array(a.int("value_int"), dtype=np.int64)
    elif "value_ints" in a:
        arr = np.array(a.ints("value_ints"), dtype=np.int64)
    elif "value_string" in a or "value_strings" in a:
        raise UnsupportedOpError(f"{what} is a string tensor, which accel does not support")
    else:
        raise ModelError(f"{what} has no value")
    return [cv.const(arr, out=node.output[0])]


@_op("ConstantOfShape")
def _constant_of_shape(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    dims = [int(d) for d in cv.need_const(node, ins, 0, "shape").reshape(-1)]
    if any(d < 0 for d in dims) or _prod(dims) > MAX_ELEMENTS:
        raise ModelError(f"node {cv.label}: bad shape {dims}")
    value = a.get("value")
    fill = (
        cv.tensor_array(value, f"ConstantOfShape at node {cv.label}") if value is not None else np.zeros(1, np.float32)
    )
    if fill.size != 1:
        raise ModelError(f"node {cv.label}: ConstantOfShape's value must hold one element, it holds {fill.size}")
    scalar = fill.reshape(())
    if _fold_fits([], [TensorType(tuple(dims), scalar.dtype.name)]):
        return [cv.const(np.full(dims, scalar, dtype=fill.dtype), out=node.output[0])]
    # Too large to materialize at import: a broadcast of the scalar, run when the model runs.
    return [_rename(cv, cv.broadcast_to(cv.const(scalar), dims), node.output[0])]


@_op("EyeLike")
def _eye_like(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    if x.type.rank != 2:
        raise ModelError(f"node {cv.label}: EyeLike needs a 2-D input")
    dtype = _dtype(a.int("dtype"), f"EyeLike at node {cv.label}: dtype") if "dtype" in a else x.type.dtype
    rows, cols = x.type.shape
    _check_fold_size("EyeLike", (rows, cols), dtype, cv.label)
    return [cv.const(np.eye(rows, cols, k=a.int("k", 0), dtype=dtype), out=node.output[0])]


@_op("Shape")
def _shape(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    shape = np.array(x.type.shape, dtype=np.int64)
    rank = len(shape)
    start = a.int("start", 0)
    end = a.int("end", rank) if "end" in a else rank
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [cv.const(shape[start:end], out=node.output[0])]


@_op("Size")
def _size(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    return [cv.const(np.array(x.type.size, dtype=np.int64), out=node.output[0])]


def _numpy_fold(fn: Callable[..., np.ndarray]) -> Handler:
    """A handler for an op accel evaluates only on constants (shape computations)."""

    def handler(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
        for i, v in enumerate(ins):
            if v is not None and v.const is None:
                raise ConstantOperandRequired(
                    f"{node.op_type} at node {cv.label}: input {node.input[i]!r} is computed at run time; accel "
                    f"evaluates {node.op_type} only on constants (shape computations folded at import)",
                    node.input[i],
                )
        arrays = [None if v is None else v.const for v in ins]
        try:
            _check_fold_result(cv.label, node.op_type, [x for x in arrays if x is not None])
            with np.errstate(all="ignore"):
                result = fn(a, *arrays)
        except AccelError:
            raise
        except Exception as exc:
            raise ModelError(f"node {cv.label}: evaluating {node.op_type} on constants failed: {exc}") from None
        results = result if isinstance(result, tuple) else (result,)
        return [cv.const(np.asarray(r), out=o) for r, o in zip(results, node.output, strict=False)]

    return handler


def _range(a: _Attrs, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    s, lim, d = start.item(), limit.item(), delta.item()
    if d == 0:
        raise ModelError("Range with delta 0")
    n = max(math.ceil((lim - s) / d), 0)
    _check_fold_size("Range", [n], start.dtype)
    return (s + np.arange(n) * d).astype(start.dtype) if n else np.zeros(0, dtype=start.dtype)


def _nonzero(a: _Attrs, x: np.ndarray) -> np.ndarray:
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


_FOLD_ONLY: dict[str, Callable[..., np.ndarray]] = {
    "Range": _range,
    "NonZero": _nonzero,
}
for _name, _fn in _FOLD_ONLY.items():
    _HANDLERS[_name] = _numpy_fold(_fn)


#: ONNX ops evaluated only when all their inputs are constant.
FOLD_ONLY_OPS = tuple(sorted([*_FOLD_ONLY, "ConstantOfShape", "Shape", "Size"]))
