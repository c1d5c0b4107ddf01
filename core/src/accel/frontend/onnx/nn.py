"""ONNX handlers of nn ops (the IR ops of :mod:`accel.ops.nn`): Conv, ConvTranspose, Gemm,
MatMul, the normalizations, LRN, Attention, the pools and Pad.

1-D windows run as 2-D ones of height 1, 3-D pools as two 2-D ones; :mod:`.qnn` reuses the
window and matmul helpers."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from onnx import NodeProto

from accel.errors import ModelError, UnsupportedOpError
from accel.frontend.onnx import _FLOATS, _Attrs, _axis, _check_fold_size, _dtype, _Importer, _op, _prod, _rename
from accel.ir import Value, freeze_attrs

# -- convolution, dense, pooling ---------------------------------------------------------


def _auto_pads(
    cv: _Importer,
    a: _Attrs,
    in_sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[int]:
    """ONNX pads (begins then ends) from ``auto_pad`` / ``pads``."""
    nd = len(in_sizes)
    auto = a.str("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = a.ints("pads", [0] * 2 * nd)
        if len(pads) != 2 * nd:
            raise ModelError(f"node {cv.label}: pads {pads} must have {2 * nd} values")
        if any(p < 0 for p in pads):
            raise UnsupportedOpError(f"node {cv.label}: negative pads {pads} are not supported")
        return pads
    if auto == "VALID":
        return [0] * 2 * nd
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ModelError(f"node {cv.label}: unknown auto_pad {auto!r}")
    begins, ends = [], []
    for n, k, s, d in zip(in_sizes, kernel, strides, dilations, strict=False):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else big)
        ends.append(big if auto == "SAME_UPPER" else small)
    return begins + ends


def _weight_kernel(cv: _Importer, node: NodeProto, a: _Attrs, w: Value) -> list[int]:
    """A convolution's kernel_shape: the weight's spatial dimensions, which the attribute (optional) must repeat."""
    spatial = list(w.type.shape[2:])
    kernel = a.ints("kernel_shape", spatial)
    if kernel != spatial:
        raise ModelError(
            f"node {cv.label}: kernel_shape {kernel} disagrees with the weight {w.name!r} of shape "
            f"{list(w.type.shape)} (its spatial dimensions are {spatial})"
        )
    return kernel


def _spatial_params(cv: _Importer, node: NodeProto, a: _Attrs, x: Value, kernel: Sequence[int]) -> dict[str, Any]:
    """strides, dilations and pads of a 1-D or 2-D window op, as 2-D IR attributes."""
    nd = x.type.rank - 2
    if nd not in (1, 2):
        raise cv.unsupported(node, f"{nd}-D windows are not supported (1-D and 2-D are)")
    if len(kernel) != nd:
        raise ModelError(f"node {cv.label}: kernel_shape {list(kernel)} does not match a {nd}-D input")
    strides = a.ints("strides", [1] * nd)
    dilations = a.ints("dilations", [1] * nd)
    if len(strides) != nd or len(dilations) != nd:
        raise ModelError(f"node {cv.label}: strides {strides} / dilations {dilations} must have {nd} values")
    pads = _auto_pads(cv, a, x.type.shape[2:], kernel, strides, dilations)
    return {**_window_2d(strides, dilations, pads), "kernel": (1, kernel[0]) if nd == 1 else tuple(kernel)}


def _window_2d(strides: Sequence[int], dilations: Sequence[int], pads: Sequence[int]) -> dict[str, tuple[int, ...]]:
    """ONNX strides, dilations and pads (begins, then ends) of a 1-D or 2-D window as 2-D IR
    attributes; a 1-D window runs on a height of 1."""
    if len(strides) == 1:
        return {"strides": (1, strides[0]), "dilation": (1, dilations[0]), "padding": (0, pads[0], 0, pads[1])}
    return {"strides": tuple(strides), "dilation": tuple(dilations), "padding": (pads[0], pads[1], pads[2], pads[3])}


def _to_2d(cv: _Importer, x: Value) -> Value:
    """[N, C, L] → [N, C, 1, L] so 1-D windows run as 2-D ones."""
    if x.type.rank == 3:
        n, c, length = x.type.shape
        return cv.reshape(x, (n, c, 1, length))
    return x


def _from_2d(cv: _Importer, y: Value, rank: int, out: str) -> Value:
    if rank == 3:
        n, c, _, length = y.type.shape
        return cv.reshape(y, (n, c, length), out=out)
    return _rename(cv, y, out)


def _emit_conv(cv: _Importer, op: str, x: Value, w: Value, b: Value | None, attrs: dict[str, Any], out: str) -> Value:
    """``op`` (a 2-D convolution) on ``x`` and ``w`` seen as 2-D, then the bias ``b``; back to ``x``'s rank as ``out``."""
    y = cv.emit(op, [_to_2d(cv, x), _to_2d(cv, w)], attrs)
    if b is not None:
        y = cv.emit("nn.bias_add", [y, b], {"axis": 1})
    return _from_2d(cv, y, x.type.rank, out)


@_op("Conv")
def _conv(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, w = cv.need(node, ins, 0, "X"), cv.need(node, ins, 1, "W")
    b = ins[2] if len(ins) > 2 else None
    rank = x.type.rank
    kernel = _weight_kernel(cv, node, a, w)
    p = _spatial_params(cv, node, a, x, kernel)
    if w.type.rank != rank:
        raise ModelError(f"node {cv.label}: weight of rank {w.type.rank} for data of rank {rank}")
    attrs = {"strides": p["strides"], "padding": p["padding"], "dilation": p["dilation"], "groups": a.int("group", 1)}
    return [_emit_conv(cv, "nn.conv2d", x, w, b, attrs, node.output[0])]


@_op("ConvTranspose")
def _conv_transpose(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, w = cv.need(node, ins, 0, "X"), cv.need(node, ins, 1, "W")
    b = ins[2] if len(ins) > 2 else None
    rank = x.type.rank
    nd = rank - 2
    if nd not in (1, 2):
        raise cv.unsupported(node, f"{nd}-D transposed convolution is not supported (1-D and 2-D are)")
    kernel = _weight_kernel(cv, node, a, w)
    strides = a.ints("strides", [1] * nd)
    dilations = a.ints("dilations", [1] * nd)
    out_pad = a.ints("output_padding", [0] * nd)
    if len(out_pad) == 2 * nd:  # some exporters write begins and ends
        out_pad = [out_pad[i] + out_pad[i + nd] for i in range(nd)]
    out_shape = a.ints("output_shape")
    auto = a.str("auto_pad", "NOTSET")
    sizes = x.type.shape[2:]
    if any(len(v) != nd for v in (kernel, strides, dilations, out_pad)):
        raise ModelError(f"node {cv.label}: kernel_shape/strides/dilations/output_padding must have {nd} values")
    natural = [
        s * (n - 1) + op + (k - 1) * d + 1
        for n, k, s, d, op in zip(sizes, kernel, strides, dilations, out_pad, strict=False)
    ]
    if "pads" in a or (auto == "NOTSET" and out_shape is None) or auto == "VALID":
        pads = [0] * 2 * nd if auto == "VALID" else a.ints("pads", [0] * 2 * nd)
        if len(pads) != 2 * nd or any(p < 0 for p in pads):
            raise ModelError(f"node {cv.label}: bad pads {pads}")
        if out_shape is not None:
            want = out_shape[-nd:]
            for i in range(nd):
                extra = want[i] - (natural[i] - pads[i] - pads[i + nd])
                if extra < 0:
                    raise ModelError(f"node {cv.label}: output_shape {out_shape} is smaller than the padded output")
                out_pad[i] += extra
    else:
        want = out_shape[-nd:] if out_shape is not None else [n * s for n, s in zip(sizes, strides, strict=False)]
        begins, ends = [], []
        for i in range(nd):
            total = natural[i] - want[i]
            if total < 0:  # the output is larger than the natural size: grow it at the end
                out_pad[i] += -total
                total = 0
            if auto == "SAME_UPPER":
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                begins.append(total - total // 2)
                ends.append(total // 2)
        pads = begins + ends
    attrs = {
        **_window_2d(strides, dilations, pads),
        "output_padding": (0, out_pad[0]) if nd == 1 else tuple(out_pad),
        "groups": a.int("group", 1),
        "kernel_layout": "IOHW",
    }
    return [_emit_conv(cv, "nn.conv2d_transpose", x, w, b, attrs, node.output[0])]


@_op("Gemm")
def _gemm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    A, B = cv.need(node, ins, 0, "A"), cv.need(node, ins, 1, "B")
    C = ins[2] if len(ins) > 2 else None
    alpha, beta = a.float("alpha", 1.0), a.float("beta", 1.0)
    if A.type.rank != 2 or B.type.rank != 2:
        raise ModelError(f"node {cv.label}: Gemm needs 2-D A and B, got {list(A.type.shape)} and {list(B.type.shape)}")
    out = node.output[0]
    dtype = A.type.dtype
    data = cv.transpose(A, (1, 0)) if a.int("transA", 0) else A
    weight = B if a.int("transB", 0) else cv.transpose(B, (1, 0))  # nn.dense wants [N, K]; folds for constants
    post_alpha = False
    if alpha != 1.0:
        if weight.const is not None:
            weight = cv.emit("multiply", [weight, cv.scalar(alpha, dtype)])
        else:
            post_alpha = True
    y = cv.emit("nn.dense", [data, weight], out=None if (C is not None and beta != 0) or post_alpha else out)
    if post_alpha:
        y = cv.emit("multiply", [y, cv.scalar(alpha, dtype)], out=None if C is not None and beta != 0 else out)
    if C is None or beta == 0:
        return [y]
    if beta != 1.0:
        C = cv.emit("multiply", [C, cv.scalar(beta, C.type.dtype)])
    n = y.type.shape[1]
    if C.const is not None and C.type.size == n and C.type.shape in ((n,), (1, n)) and n > 1:
        return [cv.emit("nn.bias_add", [y, cv.reshape(C, (n,))], {"axis": 1}, out=out)]
    return [cv.emit("add", [y, C], out=out)]


@_op("MatMul")
def _matmul(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    A, B = cv.need(node, ins, 0, "A"), cv.need(node, ins, 1, "B")
    return [_matmul_values(cv, A, B, node.output[0])]


def _matmul_values(cv: _Importer, A: Value, B: Value, out: str | None) -> Value:
    """numpy ``matmul`` semantics with nn.dense (constant 2-D B) or nn.batch_matmul."""
    if A.type.rank == 0 or B.type.rank == 0:
        raise ModelError(f"node {cv.label}: MatMul of a scalar")
    a1, b1 = A.type.rank == 1, B.type.rank == 1
    if B.const is not None and B.type.rank == 2:
        data = cv.reshape(A, (1, A.type.shape[0])) if a1 else A
        y = cv.emit("nn.dense", [data, cv.transpose(B, (1, 0))], out=None if a1 else out)
        return cv.reshape(y, (y.type.shape[-1],), out=out) if a1 else y
    a = cv.reshape(A, (1, A.type.shape[0])) if a1 else A
    b = cv.reshape(B, (B.type.shape[0], 1)) if b1 else B
    (m, k), (k2, n) = a.type.shape[-2:], b.type.shape[-2:]
    if k != k2:
        raise ModelError(
            f"node {cv.label}: MatMul of {list(A.type.shape)} and {list(B.type.shape)}: inner dimensions differ"
        )
    ba, bb = a.type.shape[:-2], b.type.shape[:-2]
    try:
        batch = tuple(np.broadcast_shapes(ba, bb))
    except ValueError:
        raise ModelError(
            f"node {cv.label}: MatMul batch dimensions {list(ba)} and {list(bb)} do not broadcast"
        ) from None

    def to3(v: Value, vb: tuple[int, ...], rows: int, cols: int) -> Value:
        full = (1,) * (len(batch) - len(vb)) + vb
        if full != batch and _prod(vb) != 1:
            v = cv.broadcast_to(v, (*batch, rows, cols))
            vb = batch
        return cv.reshape(v, (_prod(vb), rows, cols))

    y = cv.emit("nn.batch_matmul", [to3(a, ba, m, k), to3(b, bb, k, n)], {"transpose_a": False, "transpose_b": False})
    shape = batch + ((m,) if not a1 else ()) + ((n,) if not b1 else ())
    return cv.reshape(y, shape, out=out)


@_op("BatchNormalization")
def _batch_norm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    params = [cv.need(node, ins, i, w) for i, w in enumerate(("scale", "B", "mean", "var"), start=1)]
    if a.int("training_mode", 0) or any(o for o in node.output[1:]):
        raise cv.unsupported(node, "training mode (running statistics outputs) is not supported; export for inference")
    if cv.opset < 9 and a.int("spatial", 1) == 0:
        raise cv.unsupported(node, "spatial=0 is not supported")
    y = cv.emit("nn.batch_norm", [x, *params], {"axis": 1, "epsilon": a.float("epsilon", 1e-5)}, out=node.output[0])
    return [y]


@_op("InstanceNormalization")
def _instance_norm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, s, b = (cv.need(node, ins, i, w) for i, w in enumerate(("input", "scale", "B")))
    return [
        cv.emit("nn.instance_norm", [x, s, b], {"axis": 1, "epsilon": a.float("epsilon", 1e-5)}, out=node.output[0])
    ]


@_op("LRN")
def _lrn(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    if x.type.rank < 3:
        raise ModelError(f"node {cv.label}: LRN needs input of rank >= 3 (N, C, spatial...), got {list(x.type.shape)}")
    size = a.int("size")
    if size < 1:
        raise ModelError(f"node {cv.label}: LRN size must be positive, got {size}")
    attrs = {
        "size": size,
        "alpha": a.float("alpha", 1e-4),
        "beta": a.float("beta", 0.75),
        "bias": a.float("bias", 1.0),
        "axis": 1,
    }
    return [cv.emit("nn.lrn", [x], attrs, out=node.output[0])]


@_op("LayerNormalization")
def _layer_norm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # (x - mean) / sqrt(var + eps) * scale + bias over the axes [axis:].
    x, scale = cv.need(node, ins, 0, "X"), cv.need(node, ins, 1, "Scale")
    bias = ins[2] if len(ins) > 2 else None
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"needs float data, got {x.type.dtype}")
    stash = a.int("stash_type", 1)
    rank = x.type.rank
    axis = a.int("axis", -1)
    if not -rank <= axis < rank:
        raise ModelError(f"node {cv.label}: axis {axis} is out of range for rank {rank}")
    axes = tuple(range(axis % rank, rank))
    dt = x.type.dtype
    xs = cv.emit("cast", [x], {"dtype": "float32"}) if stash == 1 and dt != "float32" and dt != "float64" else x
    sdt = xs.type.dtype
    outs = [*list(node.output), "", ""]
    mean = cv.emit("mean", [xs], {"axis": axes, "keepdims": True}, out=outs[1] or None)
    d = cv.emit("subtract", [xs, mean])
    var = cv.emit("mean", [cv.emit("multiply", [d, d])], {"axis": axes, "keepdims": True})
    std = cv.emit("sqrt", [cv.emit("add", [var, cv.scalar(a.float("epsilon", 1e-5), sdt)])])
    y = cv.emit("divide", [d, std])
    if sdt != dt:
        y = cv.emit("cast", [y], {"dtype": dt})
    y = cv.emit("multiply", [y, scale], out=None if bias is not None else node.output[0])
    if bias is not None:
        y = cv.emit("add", [y, bias], out=node.output[0])
    inv = cv.emit("divide", [cv.scalar(1, sdt), std], out=outs[2]) if outs[2] else None
    return [y, mean, inv]


@_op("RMSNormalization")
def _rms_norm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # x / sqrt(mean(x^2) + eps) * scale over the axes [axis:]
    x, scale = cv.need(node, ins, 0, "X"), cv.need(node, ins, 1, "scale")
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"needs float data, got {x.type.dtype}")
    rank = x.type.rank
    axes = tuple(range(_axis(cv, a.int("axis", -1), rank), rank))
    dt = x.type.dtype
    xs = cv.emit("cast", [x], {"dtype": "float32"}) if a.int("stash_type", 1) == 1 and dt == "float16" else x
    sdt = xs.type.dtype
    ms = cv.emit("mean", [cv.emit("multiply", [xs, xs])], {"axis": axes, "keepdims": True})
    rms = cv.emit("sqrt", [cv.emit("add", [ms, cv.scalar(a.float("epsilon", 1e-5), sdt)])])
    y = cv.emit("divide", [xs, rms])
    if sdt != dt:
        y = cv.emit("cast", [y], {"dtype": dt})
    return [cv.emit("multiply", [y, scale], out=node.output[0])]


@_op("MeanVarianceNormalization")
def _mvn(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # (x - mean) / sqrt(mean(x^2) - mean^2), as ONNX's function body computes it (no epsilon added)
    x = cv.need(node, ins, 0, "X")
    axes = tuple(sorted(_axis(cv, ax, x.type.rank) for ax in a.ints("axes", [0, 2, 3])))
    mean = cv.emit("mean", [x], {"axis": axes, "keepdims": True})
    ms = cv.emit("mean", [cv.emit("multiply", [x, x])], {"axis": axes, "keepdims": True})
    var = cv.emit("subtract", [ms, cv.emit("multiply", [mean, mean])])
    std = cv.emit("sqrt", [var])
    d = cv.emit("subtract", [x, mean])
    return [cv.emit("divide", [d, cv.emit("add", [std, cv.scalar(1e-9, x.type.dtype)])], out=node.output[0])]


@_op("GroupNormalization")
def _group_norm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # normalize over (C/G, spatial...) per group, then per-channel scale and bias
    x, scale, bias = (cv.need(node, ins, i, w) for i, w in enumerate(("X", "scale", "bias")))
    if x.type.dtype not in _FLOATS or x.type.rank < 3:
        raise cv.unsupported(node, f"needs float data of rank >= 3, got {x.type}")
    g = a.int("num_groups")
    n, c = x.type.shape[:2]
    if g < 1 or c % g:
        raise ModelError(f"node {cv.label}: {g} groups do not divide {c} channels")
    rest = x.type.shape[2:]
    dt = x.type.dtype
    xs = cv.emit("cast", [x], {"dtype": "float32"}) if a.int("stash_type", 1) == 1 and dt == "float16" else x
    sdt = xs.type.dtype
    t = cv.reshape(xs, (n, g, (c // g) * _prod(rest)))
    mean = cv.emit("mean", [t], {"axis": (2,), "keepdims": True})
    d = cv.emit("subtract", [t, mean])
    var = cv.emit("mean", [cv.emit("multiply", [d, d])], {"axis": (2,), "keepdims": True})
    std = cv.emit("sqrt", [cv.emit("add", [var, cv.scalar(a.float("epsilon", 1e-5), sdt)])])
    y = cv.reshape(cv.emit("divide", [d, std]), x.type.shape)
    if sdt != dt:
        y = cv.emit("cast", [y], {"dtype": dt})
    if scale.type.shape == (g,) and g != c:  # opset 18 form: one scale and bias per group
        scale = cv.reshape(cv.broadcast_to(cv.reshape(scale, (g, 1)), (g, c // g)), (c,))
        bias = cv.reshape(cv.broadcast_to(cv.reshape(bias, (g, 1)), (g, c // g)), (c,))
    shape = (c,) + (1,) * len(rest)
    y = cv.emit("multiply", [y, cv.reshape(scale, shape)])
    return [cv.emit("add", [y, cv.reshape(bias, shape)], out=node.output[0])]


@_op("Attention")
def _attention(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    """Scaled dot-product attention with nn.batch_matmul and nn.softmax.

    Masks that depend only on shapes (causal, sliding windows, constant masks,
    constant kv lengths) are computed at import into one constant bias; rows
    that bias masks completely are zeroed as ONNX specifies. A run-time mask is
    added as is (a boolean one as ``1 - 1/float(mask)``: 0 or -inf, exactly).
    """
    q, k, v = (cv.need(node, ins, i, w) for i, w in enumerate("QKV"))
    mask = ins[3] if len(ins) > 3 else None
    past_k = ins[4] if len(ins) > 4 else None
    past_v = ins[5] if len(ins) > 5 else None
    nonpad = cv.const_input(node, ins, 6, "nonpad_kv_seqlen")
    dt = q.type.dtype
    if dt not in _FLOATS:
        raise cv.unsupported(node, f"needs float Q/K/V, got {dt}")
    if (past_k is None) != (past_v is None):
        raise ModelError(f"node {cv.label}: past_key and past_value go together")
    rank = q.type.rank
    if rank not in (3, 4) or k.type.rank != rank or v.type.rank != rank:
        raise ModelError(f"node {cv.label}: Q, K and V must all be 3-D or all 4-D")
    if rank == 3:
        heads = {"Q": a.int("q_num_heads"), "K": a.int("kv_num_heads"), "V": a.int("kv_num_heads")}

        def heads4(t: Value, h: int) -> Value:
            b, n, hidden = t.type.shape
            if h < 1 or hidden % h:
                raise ModelError(f"node {cv.label}: hidden size {hidden} does not split into {h} heads")
            return cv.transpose(cv.reshape(t, (b, n, h, hidden // h)), (0, 2, 1, 3))

        q, k, v = heads4(q, heads["Q"]), heads4(k, heads["K"]), heads4(v, heads["V"])
    b, hq, s, d = q.type.shape
    present_k = cv.concat([past_k, k], 2) if past_k is not None else k
    present_v = cv.concat([past_v, v], 2) if past_v is not None else v
    hk, kv_len = present_k.type.shape[1], present_k.type.shape[2]
    if hq != hk and (hk < 1 or hq % hk or present_v.type.shape[1] != hk):
        raise ModelError(f"node {cv.label}: {hq} query heads do not group over {hk} key/value heads")
    scale = a.float("scale") if "scale" in a else 1.0 / math.sqrt(d)

    # the constant part of the bias, [B or 1, 1, S, L]
    npdt = np.dtype(dt)
    neg = npdt.type(-np.inf)
    _check_fold_size("Attention's constant bias", (1, 1, s, kv_len), npdt, cv.label)
    bias = np.zeros((1, 1, s, kv_len), dtype=npdt)
    run_mask: Value | None = None
    if mask is not None:
        width = kv_len - mask.type.shape[-1]
        if width < 0:
            raise ModelError(f"node {cv.label}: attn_mask is longer than the key sequence")
        if mask.const is not None:
            m = mask.const
            if width:
                pad = [(0, 0)] * (m.ndim - 1) + [(0, width)]
                m = np.pad(m, pad, constant_values=False if m.dtype == np.bool_ else -np.inf)
            m = np.where(m, npdt.type(0), neg) if m.dtype == np.bool_ else m.astype(npdt)
            bias = bias + m.reshape((1,) * (4 - m.ndim) + m.shape)
        else:
            if mask.type.dtype == "bool":
                run_mask = cv.emit("cast", [mask], {"dtype": "uint8"})  # combined with the constant part below
                if width:
                    pw = tuple((0, width) if ax == mask.type.rank - 1 else (0, 0) for ax in range(mask.type.rank))
                    run_mask = cv.emit("nn.pad", [run_mask], {"pad_width": pw, "pad_mode": "constant", "pad_value": 0})
                width = 0
            elif mask.type.dtype == dt:
                run_mask = mask
            else:
                raise cv.unsupported(node, f"an attn_mask of {mask.type.dtype} with {dt} data is not supported")
            if width:
                pw = tuple((0, width) if ax == mask.type.rank - 1 else (0, 0) for ax in range(mask.type.rank))
                run_mask = cv.emit(
                    "nn.pad", [run_mask], {"pad_width": pw, "pad_mode": "constant", "pad_value": float("-inf")}
                )
    i_idx = np.arange(s).reshape(s, 1)
    j_idx = np.arange(kv_len).reshape(1, kv_len)
    if nonpad is not None:
        if past_k is not None:
            raise ModelError(f"node {cv.label}: nonpad_kv_seqlen cannot be combined with past key/value")
        offset: Any = (nonpad.reshape(-1).astype(np.int64) - s).reshape(-1, 1, 1, 1)
    else:
        offset = past_k.type.shape[2] if past_k is not None else 0
    if a.int("is_causal", 0):
        bias = bias + np.where(j_idx <= i_idx + offset, npdt.type(0), neg)
    left, right = a.int("left_window_size", -1), a.int("right_window_size", -1)
    if left >= 0 or right >= 0:
        diff = (i_idx + offset) - j_idx
        allowed = np.ones(diff.shape, dtype=bool)
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        bias = bias + np.where(allowed, npdt.type(0), neg)
    if nonpad is not None:
        keep = j_idx.reshape(1, 1, 1, kv_len) < nonpad.reshape(-1, 1, 1, 1)
        bias = bias + np.where(keep, npdt.type(0), neg)
    bool_mask = run_mask is not None and run_mask.type.dtype == "uint8"
    alive: Value | None = None
    if bool_mask:
        # permitted = run-time mask AND the constant pattern; a row with nothing permitted is zeroed.
        # bias = 1 - 1/permitted is exactly 0 or -inf; dead rows get a finite bias instead.
        assert run_mask is not None
        permitted = cv.emit("multiply", [run_mask, cv.const((~np.isneginf(bias)).astype(np.uint8))])
        alive = _row_max(cv, permitted)
        one8 = cv.scalar(1, "uint8")
        denom = cv.emit("cast", [cv.emit("add", [permitted, cv.emit("subtract", [one8, alive])])], {"dtype": dt})
        one = cv.scalar(1, dt)
        run_mask = cv.emit("subtract", [one, cv.emit("divide", [one, denom])])
        bias = np.where(np.isneginf(bias), npdt.type(0), bias)
    dead_rows = np.all(np.isneginf(bias), axis=-1, keepdims=True)
    if dead_rows.any():
        # fully masked rows give zeros: keep their logits finite, zero them after the softmax
        bias = np.where(dead_rows, npdt.type(0), bias)

    # heads of K/V repeated for grouped-query attention
    def group(t: Value) -> Value:
        if hq == hk:
            return t
        bt, _, n, dd = t.type.shape
        t = cv.broadcast_to(cv.reshape(t, (bt, hk, 1, n, dd)), (bt, hk, hq // hk, n, dd))
        return cv.reshape(t, (bt, hq, n, dd))

    kk, vv = group(present_k), group(present_v)
    root = cv.scalar(math.sqrt(scale), dt)
    qs = cv.reshape(cv.emit("multiply", [q, root]), (b * hq, s, d))
    ks = cv.reshape(cv.emit("multiply", [kk, root]), (b * hq, kv_len, d))
    scores = cv.emit("nn.batch_matmul", [qs, ks], {"transpose_a": False, "transpose_b": True})
    scores = cv.reshape(scores, (b, hq, s, kv_len))
    softcap = a.float("softcap", 0.0)
    if softcap > 0:
        cap = cv.scalar(softcap, dt)
        scores = cv.emit("multiply", [cv.emit("tanh", [cv.emit("divide", [scores, cap])]), cap])
    mode = a.int("qk_matmul_output_mode", 0)
    qk_out = scores
    biased = scores
    if np.any(bias != 0):
        biased = cv.emit("add", [biased, cv.const(bias)])
    if run_mask is not None:
        biased = cv.emit("add", [biased, run_mask])
    if mode == 2:
        qk_out = biased
    sm_dt = _dtype(a.int("softmax_precision"), "softmax_precision") if "softmax_precision" in a else dt
    t = cv.emit("cast", [biased], {"dtype": sm_dt}) if sm_dt != dt else biased
    probs = cv.emit("nn.softmax", [t], {"axis": -1})
    if alive is not None:
        probs = cv.emit("multiply", [probs, cv.emit("cast", [alive], {"dtype": sm_dt})])
    if dead_rows.any():
        probs = cv.emit("multiply", [probs, cv.const((~dead_rows).astype(sm_dt))])
    if sm_dt != dt:
        probs = cv.emit("cast", [probs], {"dtype": dt})
    if mode == 3:
        qk_out = probs
    dv = vv.type.shape[-1]
    y = cv.emit(
        "nn.batch_matmul",
        [cv.reshape(probs, (b * hq, s, kv_len)), cv.reshape(vv, (b * hq, kv_len, dv))],
        {"transpose_a": False, "transpose_b": False},
    )
    outs = [*node.output, "", "", ""]
    if rank == 3:
        y = cv.transpose(cv.reshape(y, (b, hq, s, dv)), (0, 2, 1, 3))
        y = cv.reshape(y, (b, s, hq * dv), out=outs[0])
    else:
        y = cv.reshape(y, (b, hq, s, dv), out=outs[0])
    return [y, present_k, present_v, qk_out]


def _row_max(cv: _Importer, t: Value) -> Value:
    """max over the last axis, keeping it (global_max_pool2d on a [1, rows, L, 1] view)."""
    shape = t.type.shape
    rows = _prod(shape[:-1])
    m = cv.emit("nn.global_max_pool2d", [cv.reshape(t, (1, rows, shape[-1], 1))])
    return cv.reshape(m, (*shape[:-1], 1))


def _pool_params(cv: _Importer, node: NodeProto, a: _Attrs, x: Value) -> dict[str, Any]:
    kernel = a.ints("kernel_shape")
    if kernel is None:
        raise ModelError(f"node {cv.label}: {node.op_type} needs kernel_shape")
    p = _spatial_params(cv, node, a, x, kernel)
    return {
        "pool_size": p["kernel"],
        "strides": p["strides"],
        "dilation": p["dilation"],
        "padding": p["padding"],
        "ceil_mode": bool(a.int("ceil_mode", 0)),
    }


def _pool_3d(cv: _Importer, node: NodeProto, a: _Attrs, x: Value, op: str, extra: dict[str, Any]) -> Value:
    """A 3-D max or average pool as two 2-D ones: over (H, W) with D folded into the channels,
    then over D with H*W as the width. Both reductions are separable per axis: a window's max
    is the max over D of maxima over (H, W), and its element count (pads included or not) is
    the product of the per-axis counts, so an average of averages is the average."""
    kernel = a.ints("kernel_shape")
    if kernel is None or len(kernel) != 3:
        raise ModelError(f"node {cv.label}: kernel_shape {kernel} does not match a 3-D input")
    strides = a.ints("strides", [1, 1, 1])
    dilations = a.ints("dilations", [1, 1, 1])
    if len(strides) != 3 or len(dilations) != 3:
        raise ModelError(f"node {cv.label}: strides {strides} / dilations {dilations} must have 3 values")
    n, c, d, h, w = x.type.shape
    pads = _auto_pads(cv, a, (d, h, w), kernel, strides, dilations)
    ceil = bool(a.int("ceil_mode", 0))
    hw = cv.emit(
        op,
        [cv.reshape(x, (n, c * d, h, w))],
        {
            "pool_size": (kernel[1], kernel[2]),
            "strides": (strides[1], strides[2]),
            "dilation": (dilations[1], dilations[2]),
            "padding": (pads[1], pads[2], pads[4], pads[5]),
            "ceil_mode": ceil,
            **extra,
        },
    )
    ho, wo = hw.type.shape[2:]
    t = cv.emit(
        op,
        [cv.reshape(hw, (n, c, d, ho * wo))],
        {
            "pool_size": (kernel[0], 1),
            "strides": (strides[0], 1),
            "dilation": (dilations[0], 1),
            "padding": (pads[0], 0, pads[3], 0),
            "ceil_mode": ceil,
            **extra,
        },
    )
    return cv.reshape(t, (n, c, t.type.shape[2], ho, wo), out=node.output[0])


def _frozen_window_attrs(
    cv: _Importer, node: NodeProto, x: Value, convert: Callable[[], dict[str, Any]]
) -> Mapping[str, Any]:
    """``convert()`` (a window op's IR attributes, read from the node), frozen, and remembered by the
    op, the input's shape and the attributes as the file writes them: a large model repeats a few
    windows many times, and the same frozen attributes let the type rule's answer be found by
    identity (:meth:`_Importer.emit_multi`). An error is raised each time, never remembered."""
    key = (node.op_type, x.type.shape, *[attr.SerializeToString() for attr in node.attribute])
    found = cv.window_attrs.get(key)
    if found is None:
        found = cv.window_attrs[key] = freeze_attrs(convert())
    return found


def _pool_2d(cv: _Importer, node: NodeProto, op: str, x: Value, attrs: Mapping[str, Any]) -> Value:
    """A 2-D pool of ``x`` (a 1-D one on a height of 1), as the node's output."""
    if x.type.rank == 4:
        return cv.emit(op, [x], attrs, out=node.output[0])
    return _from_2d(cv, cv.emit(op, [_to_2d(cv, x)], attrs), x.type.rank, node.output[0])


@_op("MaxPool")
def _max_pool(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    if len(node.output) > 1 and node.output[1]:
        raise cv.unsupported(node, "the Indices output is not supported")
    if x.type.rank == 5:
        return [_pool_3d(cv, node, a, x, "nn.max_pool2d", {})]
    attrs = _frozen_window_attrs(cv, node, x, lambda: _pool_params(cv, node, a, x))
    return [_pool_2d(cv, node, "nn.max_pool2d", x, attrs)]


@_op("AveragePool")
def _avg_pool(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    if x.type.rank == 5:
        include = bool(a.int("count_include_pad", 0))
        return [_pool_3d(cv, node, a, x, "nn.avg_pool2d", {"count_include_pad": include})]

    def convert() -> dict[str, Any]:
        return {**_pool_params(cv, node, a, x), "count_include_pad": bool(a.int("count_include_pad", 0))}

    attrs = _frozen_window_attrs(cv, node, x, convert)
    return [_pool_2d(cv, node, "nn.avg_pool2d", x, attrs)]


@_op("LpPool")
def _lp_pool(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # (sum over the window of |x|^p) ^ (1/p), the sum as avg_pool(count_include_pad) * kh*kw;
    # p=2: sqrt(avg_pool(x^2) * kh*kw); p=1: avg_pool(|x|) * kh*kw.
    x = cv.need(node, ins, 0, "X")
    p = a.get("p", 2)
    if not isinstance(p, (int, float)) or p <= 0:
        raise ModelError(f"node {cv.label}: LpPool needs a positive p, got {p!r}")
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"LpPool of {x.type.dtype} data is not supported (float data is)")
    attrs = _pool_params(cv, node, a, x)
    attrs["count_include_pad"] = True
    window = attrs["pool_size"][0] * attrs["pool_size"][1]
    dt = x.type.dtype
    if p == 2:
        t = cv.emit("power", [x, cv.scalar(2, dt)])
    else:
        t = cv.emit("abs", [x])
        if p != 1:
            t = cv.emit("power", [t, cv.scalar(p, dt)])
    t = cv.emit("nn.avg_pool2d", [_to_2d(cv, t)], attrs)
    t = cv.emit("multiply", [t, cv.scalar(window, dt)])
    if p == 2:
        t = cv.emit("sqrt", [t])
    elif p != 1:
        t = cv.emit("power", [t, cv.scalar(1 / p, dt)])
    return [_from_2d(cv, t, x.type.rank, node.output[0])]


@_op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    op = "nn.global_avg_pool2d" if node.op_type == "GlobalAveragePool" else "nn.global_max_pool2d"
    rank = x.type.rank
    if rank < 3:
        raise ModelError(f"node {cv.label}: {node.op_type} needs data of rank >= 3, got {rank}")
    if rank == 4:
        return [cv.emit(op, [x], out=node.output[0])]
    n, c = x.type.shape[:2]
    y = cv.emit(op, [cv.reshape(x, (n, c, _prod(x.type.shape[2:]), 1))])
    return [cv.reshape(y, (n, c) + (1,) * (rank - 2), out=node.output[0])]


# -- padding ---------------------------------------------------------------------------


@_op("Pad")
def _pad(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    rank = x.type.rank
    mode = a.str("mode", "constant")
    if cv.opset < 11:
        pads = a.ints("pads")
        if pads is None:
            raise ModelError(f"node {cv.label}: Pad needs pads")
        value = a.float("value", 0.0)
        axes = list(range(rank))
    else:
        pads_arr = cv.const_input(node, ins, 1, "pads")
        if pads_arr is None:
            raise ModelError(f"node {cv.label}: Pad needs pads")
        pads = [int(p) for p in pads_arr.reshape(-1)]
        cval = cv.const_input(node, ins, 2, "constant_value")
        value = cval.reshape(-1)[0].item() if cval is not None and cval.size else 0
        axes_arr = cv.const_input(node, ins, 3, "axes")
        axes = list(range(rank)) if axes_arr is None else [int(v) for v in axes_arr.reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise ModelError(f"node {cv.label}: {len(pads)} pads for {len(axes)} axes")
    before, after = [0] * rank, [0] * rank
    for i, ax in enumerate(axes):
        if not -rank <= ax < rank:
            raise ModelError(f"node {cv.label}: pad axis {ax} is out of range for rank {rank}")
        before[ax % rank], after[ax % rank] = pads[i], pads[i + len(axes)]
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise cv.unsupported(node, f"mode {mode!r} is not supported (constant, edge, reflect and wrap are)")
    y = x
    # negative pads crop first (ONNX semantics)
    for ax in range(rank):
        if before[ax] < 0 or after[ax] < 0:
            dim = y.type.shape[ax]
            start, end = max(-before[ax], 0), dim - max(-after[ax], 0)
            if end < start:
                raise ModelError(f"node {cv.label}: negative pads crop axis {ax} below zero")
            y = cv.slice_axis(y, ax, start, end)
    pad_width = tuple((max(b, 0), max(e, 0)) for b, e in zip(before, after, strict=False))
    if all(b == 0 and e == 0 for b, e in pad_width):
        return [y if y is x else _rename(cv, y, node.output[0])]
    if mode == "wrap":
        return [_wrap_pad(cv, y, pad_width, node.output[0])]
    pad_value = float(value) if x.type.dtype in _FLOATS else (bool(value) if x.type.dtype == "bool" else int(value))
    return [
        cv.emit("nn.pad", [y], {"pad_width": pad_width, "pad_mode": mode, "pad_value": pad_value}, out=node.output[0])
    ]


def _wrap_pad(cv: _Importer, x: Value, pad_width: Sequence[tuple[int, int]], out: str) -> Value:
    """Periodic padding (numpy's "wrap"): per axis, the tail before and the head after, by slices and a concat."""
    y = x
    axes = [ax for ax, (b, e) in enumerate(pad_width) if b or e]
    for i, ax in enumerate(axes):
        b, e = pad_width[ax]
        dim = y.type.shape[ax]
        if dim == 0:
            raise ModelError(f"node {cv.label}: wrap padding of an empty axis {ax}")
        # the padded axis is a window of x repeated: whole copies, then the cut ends
        reps = -(-(b + e) // dim) + 1
        tiled = cv.concat([y] * (reps + 1), ax) if reps else y
        start = (-b) % dim
        last = i == len(axes) - 1
        sliced = cv.slice_axis(tiled, ax, start, start + dim + b + e)
        y = _rename(cv, sliced, out) if last else sliced
    return y
