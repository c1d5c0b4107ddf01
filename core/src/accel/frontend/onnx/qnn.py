"""ONNX handlers of quantization (the IR ops of :mod:`accel.ops.qnn`): QuantizeLinear,
DequantizeLinear, QLinearConv and QLinearMatMul; constant scales and zero points become the
quantization parameters of the values' types."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from accel.errors import ModelError
from accel.frontend.onnx import _FLOATS, _Attrs, _axis, _dtype, _Importer, _op
from accel.frontend.onnx.nn import _from_2d, _matmul_values, _spatial_params, _to_2d, _weight_kernel
from accel.ir import QuantParams, Value


def _quant_params(
    cv: _Importer, node: NodeProto, ins: list, si: int, zi: int, axis: int, rank: int, zp_dtype: str | None = None
) -> tuple[QuantParams, str]:
    """QuantParams from constant scale / zero-point operands, and the quantized dtype."""
    scale = cv.const_input(node, ins, si, "scale")
    if scale is None:
        raise ModelError(f"node {cv.label}: {node.op_type} needs a scale")
    zp = cv.const_input(node, ins, zi, "zero point")
    if zp is not None:
        zdt = zp.dtype.name
    else:
        zdt = zp_dtype or "uint8"
        zp = np.zeros(scale.shape, dtype=zdt)
    if scale.ndim > 1:
        raise cv.unsupported(node, "blocked quantization (scale of rank > 1) is not supported")
    if scale.ndim == 1 and scale.size > 1:
        ax = _axis(cv, axis, rank)
        q = QuantParams(scale.astype(np.float32), zp.astype(np.int64), axis=ax)
    else:
        q = QuantParams(scale.reshape(()).astype(np.float32), zp.reshape(-1)[0].astype(np.int64))
    return q, zdt


def _with_quant(cv: _Importer, node: NodeProto, x: Value, q: QuantParams, what: str) -> Value | None:
    """``x`` typed with quantization ``q``: as is, a constant re-typed, or a not-yet-used graph input re-typed."""
    if x.type.quant == q:
        return x
    if x.const is not None:
        return cv.const(x.const, f"{x.name}/q", quant=q)
    if x.type.quant is None and x in cv.unread:
        x.type = x.type.with_quant(q)
        return x
    return None


@_op("QuantizeLinear")
def _quantize(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "x")
    if a.int("block_size", 0):
        raise cv.unsupported(node, "blocked quantization is not supported")
    out_dt = None
    if "output_dtype" in a and a.int("output_dtype"):
        out_dt = _dtype(a.int("output_dtype"), f"QuantizeLinear at node {cv.label}: output")
    q, zdt = _quant_params(cv, node, ins, 1, 2, a.int("axis", 1), x.type.rank, out_dt)
    if zdt not in ("uint8", "int8"):
        raise cv.unsupported(node, f"quantizing to {zdt} is not supported (uint8 and int8 are)")
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"quantizing {x.type.dtype} data is not supported")
    if x.type.dtype != "float32":
        x = cv.emit("cast", [x], {"dtype": "float32"})
    attrs = {
        "scale": q.scale if q.axis is not None else float(q.scale),
        "zero_point": q.zero_point if q.axis is not None else int(q.zero_point),
        "axis": q.axis,
        "out_dtype": zdt,
    }
    return [cv.emit("qnn.quantize", [x], attrs, out=node.output[0])]


@_op("DequantizeLinear")
def _dequantize(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "x")
    if a.int("block_size", 0):
        raise cv.unsupported(node, "blocked quantization is not supported")
    if x.type.dtype not in ("uint8", "int8", "int32", "int16", "uint16"):
        raise cv.unsupported(node, f"dequantizing {x.type.dtype} data is not supported")
    q, _ = _quant_params(cv, node, ins, 1, 2, a.int("axis", 1), x.type.rank, x.type.dtype)
    out_dt = cv.need_const(node, ins, 1, "scale").dtype.name
    if "output_dtype" in a and a.int("output_dtype"):
        out_dt = _dtype(a.int("output_dtype"), f"DequantizeLinear at node {cv.label}: output")
    out = node.output[0]
    y = _dequant(cv, node, x, q, None if out_dt != "float32" else out)
    if out_dt != "float32":
        y = cv.emit("cast", [y], {"dtype": out_dt}, out=out)
    return [y]


def _dequant(cv: _Importer, node: NodeProto, x: Value, q: QuantParams, out: str | None) -> Value:
    """float32 ``(x - z) * s``: a qnn.dequantize when ``x`` can carry ``q`` in its type, else spelled out."""
    xq = _with_quant(cv, node, x, q, "x") if x.type.dtype in ("uint8", "int8", "int32") else None
    if xq is not None:
        return cv.emit("qnn.dequantize", [xq], {"axis": q.axis}, out=out)
    # the value already carries other parameters: (float(x) - z) * s, as ONNX defines it
    shape = [1] * x.type.rank
    if q.axis is not None:
        shape[q.axis] = q.scale.size
    z = cv.const(q.zero_point.astype(np.float32).reshape(shape if q.axis is not None else ()))
    s = cv.const(q.scale.astype(np.float32).reshape(shape if q.axis is not None else ()))
    xf = cv.emit("cast", [x], {"dtype": "float32"})
    return cv.emit("multiply", [cv.emit("subtract", [xf, z]), s], out=out)


def _qinput(cv: _Importer, node: NodeProto, x: Value, q: QuantParams, what: str) -> Value:
    xq = _with_quant(cv, node, x, q, what)
    if xq is None:
        raise cv.unsupported(
            node,
            f"{what} {x.name!r} already carries quantization {x.type.quant!r} that differs from the node's "
            "scale/zero point",
        )
    return xq


@_op("QLinearConv")
def _qlinear_conv(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, w = cv.need(node, ins, 0, "x"), cv.need(node, ins, 3, "w")
    b = ins[8] if len(ins) > 8 else None
    qx, _ = _quant_params(cv, node, ins, 1, 2, 1, x.type.rank, x.type.dtype)
    w_arr = cv.need_const(node, ins, 3, "weight")
    qw, _ = _quant_params(cv, node, ins, 4, 5, 0, w.type.rank, w.type.dtype)
    qy, ydt = _quant_params(cv, node, ins, 6, 7, 1, x.type.rank, x.type.dtype)
    if qx.axis is not None or qy.axis is not None:
        raise cv.unsupported(node, "per-channel output quantization is not supported")
    rank = x.type.rank
    kernel = _weight_kernel(cv, node, a, w)
    p = _spatial_params(cv, node, a, x, kernel)
    xq = _qinput(cv, node, x, qx, "input")
    wv = cv.const(
        w_arr if rank == 4 else w_arr.reshape((*w_arr.shape[:2], 1, *w_arr.shape[2:])), f"{node.input[3]}/q", quant=qw
    )
    attrs = {"strides": p["strides"], "padding": p["padding"], "dilation": p["dilation"], "groups": a.int("group", 1)}
    acc = cv.emit("qnn.conv2d", [_to_2d(cv, xq), wv], attrs)
    if b is not None:
        bias = cv.need_const(node, ins, 8, "bias")
        acc = cv.emit("nn.bias_add", [acc, cv.const(bias.astype(np.int32), f"{node.input[8]}/q")], {"axis": 1})
    y = cv.emit(
        "qnn.requantize", [acc], {"out_scale": float(qy.scale), "out_zero_point": int(qy.zero_point), "out_dtype": ydt}
    )
    return [_from_2d(cv, y, rank, node.output[0])]


@_op("QLinearMatMul")
def _qlinear_matmul(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    A, B = cv.need(node, ins, 0, "a"), cv.need(node, ins, 3, "b")
    qa, _ = _quant_params(cv, node, ins, 1, 2, -1, A.type.rank, A.type.dtype)
    qb, _ = _quant_params(cv, node, ins, 4, 5, -1, B.type.rank, B.type.dtype)
    qy, ydt = _quant_params(cv, node, ins, 6, 7, -1, max(A.type.rank, B.type.rank), A.type.dtype)
    if qa.axis is not None or qy.axis is not None:
        raise cv.unsupported(node, "per-axis quantization of a or y is not supported")
    out = node.output[0]
    if B.const is not None and B.type.rank == 2 and A.type.rank >= 2:
        # weight [N, K] = B.T; a per-column scale of B becomes per output channel (axis 0)
        qw = QuantParams(qb.scale, qb.zero_point, axis=0) if qb.axis is not None else qb
        w = cv.const(np.ascontiguousarray(B.const.T), f"{node.input[3]}/q", quant=qw)
        acc = cv.emit("qnn.dense", [_qinput(cv, node, A, qa, "input a"), w])
        return [
            cv.emit(
                "qnn.requantize",
                [acc],
                {"out_scale": float(qy.scale), "out_zero_point": int(qy.zero_point), "out_dtype": ydt},
                out=out,
            )
        ]

    # general case: dequantize, float matmul (nn.batch_matmul), quantize
    y = _matmul_values(cv, _dequant(cv, node, A, qa, None), _dequant(cv, node, B, qb, None), None)
    attrs = {"scale": float(qy.scale), "zero_point": int(qy.zero_point), "axis": None, "out_dtype": ydt}
    return [cv.emit("qnn.quantize", [y], attrs, out=out)]
