"""The acl blob: one partition as accel-sdk's graph blob (kind ``"acl"``, kind version 1).

:class:`accel_sdk.graph_blob.GraphBlobWriter` writes the tensors (dtype, NHWC
shape, quantization, constants in an aligned section) and the nodes; this
module decides only what kernel, with which attributes, each op or composite
becomes (:func:`lower`). Everything the runtime computes with is explicit in
the attributes: windows with any absorbed ``nn.pad`` folded into the padding,
the fused activation, and for quantized kernels the fixed-point multipliers
``(m, shift)`` encoded here by :func:`accel.quant.quantize_multiplier` (the one
definition), zero points and the output clamp a fused ReLU becomes.

Kernels (inputs; attributes):

=================  ===========================================================================
``conv2d``         x, weight OHWI, bias?; strides, dilation, padding (top, left, bottom,
                   right), groups, activation (0 none, 1 relu, 2 bounded relu), act_max
``qnn_conv2d``     x, weight OHWI, bias int32?; as conv2d plus the requantize attributes
``dense``          x [M, K], weight [N, K], bias?
``qnn_dense``      x, weight, bias int32?; the requantize attributes
``pool2d``         x; kind (max, avg, l2), kernel, strides, padding (the ceil-mode extension
                   included), count_include_pad; global pools are windows of the whole plane
``qnn_avg_pool2d`` x; as pool2d with kind avg: the int32 sum of a uint8/int8 window, divided
                   rounding half away from zero
``add``, ``maximum``, ``multiply``  a, b (float32, equal shapes; add and multiply also a by a constant b
                   [1, .., 1, C] varying along the channel axis only)
``qnn_add``        a, b; multipliers a, b, out (m, shift each), zero points a, b, out, clamp
``concatenate``    x...; axis
``reshape``        x
``activation``     x (float32); activation (1 relu, 2 bounded relu), act_max
``requantize``     x; the requantize attributes, axis (-1: per tensor)
``dequantize``     x (uint8/int8) -> float32; scale, zero_point
``quantize``       x (float32) -> uint8/int8; scale, zero_point
``softmax``        x (float32); along the last axis
``transpose``      x; axes (the output's axis i is the input's axis axes[i])
=================  ===========================================================================

Requantize attributes: ``multiplier``, ``shift`` (ints, one or one per channel),
``input_zero_point`` (ints, likewise), ``output_zero_point``, ``clamp_min``,
``clamp_max``; quantized convolutions and dense add ``data_zero_point`` and
``weight_zero_point`` (ints).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from accel_sdk.graph_blob import GraphBlobWriter, Kernel, Labels

from accel import quant
from accel.errors import PartitionError
from accel.ir import CALL_OP, Graph, Node, Value
from accel.ops.geometry import conv2d_geometry, pool2d_geometry
from accel.ops.nn import pad_pairs
from accel.pattern import composite_match

KIND = "acl"
KIND_VERSION = 1
NO_ACTIVATION, RELU, BOUNDED_RELU = 0, 1, 2


def _ints(a: Any) -> list[int]:
    return [int(x) for x in np.asarray(a).reshape(-1)]


def _requantize_attrs(node: Node, relu: bool = False) -> dict[str, Any]:
    """The fixed-point parameters of one ``qnn.requantize`` (per channel when its input is per axis)."""
    x, y = node.inputs[0].type, node.outputs[0].type
    qi, qo = x.quant, y.quant
    if qi is None or qo is None:
        raise PartitionError(f"acl serializer: requantize {node.name!r} has no quantization parameters")
    s_in = np.asarray(qi.scale, np.float32).astype(np.float64).reshape(-1)
    s_out = float(np.asarray(qo.scale, np.float32).astype(np.float64).reshape(()))
    m, shift = quant.quantize_multiplier(s_in / s_out)
    lo, hi = quant.dtype_range(y.dtype)
    z_out = int(np.asarray(qo.zero_point).reshape(()))
    if relu:  # relu on an accumulator with zero point 0 is max(requantize(x), requantize(0)) = max(., z_out)
        lo = max(lo, z_out)
    axis = -1 if qi.axis is None else qi.axis % x.rank
    return {
        "multiplier": _ints(m),
        "shift": _ints(shift),
        "input_zero_point": _ints(qi.zero_point),
        "output_zero_point": z_out,
        "clamp_min": int(lo),
        "clamp_max": int(hi),
        "axis": axis,
    }


def _conv_window(conv: Node, pad: Node | None) -> dict[str, Any]:
    g = conv2d_geometry(conv.attrs, conv.inputs[0].type.shape, conv.inputs[1].type.shape)
    if g.nchw or g.kernel_layout != "OHWI":
        raise PartitionError(f"acl serializer: conv {conv.name!r} must be NHWC/OHWI")
    pt, pl, pb, pr = g.pt, g.pl, g.pb, g.pr
    if pad is not None:
        pairs = pad_pairs(pad.attrs["pad_width"], 4)
        pt, pb = pt + pairs[1][0], pb + pairs[1][1]
        pl, pr = pl + pairs[2][0], pr + pairs[2][1]
    return {
        "strides": [g.sh, g.sw],
        "dilation": [g.dh, g.dw],
        "padding": [pt, pl, pb, pr],
        "groups": g.groups,
    }


def _node(labels: Labels, label: str) -> Node | None:
    n = labels.get(label)
    return n if isinstance(n, Node) else None


def _conv2d(call: Node, labels: Labels, quantized: bool) -> Kernel:
    conv = _node(labels, "conv")
    assert conv is not None
    attrs = _conv_window(conv, _node(labels, "pad"))
    inputs: list[Value] = [call.inputs[0], conv.inputs[1]]
    bias = _node(labels, "bias")
    if bias is not None:
        inputs.append(bias.inputs[1])
    relu = _node(labels, "relu") is not None
    if quantized:
        req = _node(labels, "requantize")
        assert req is not None
        attrs.update(_requantize_attrs(req, relu))
        attrs.update(_zero_points(conv))
    else:
        clip = _node(labels, "clip")
        attrs["activation"] = BOUNDED_RELU if clip is not None else RELU if relu else NO_ACTIVATION
        attrs["act_max"] = float(clip.attrs["a_max"]) if clip is not None else 0.0
    return Kernel("qnn_conv2d" if quantized else "conv2d", attrs, inputs)


def _zero_points(op: Node) -> dict[str, Any]:
    dq, wq = op.inputs[0].type.quant, op.inputs[1].type.quant
    assert dq is not None and wq is not None
    return {"data_zero_point": int(np.asarray(dq.zero_point).reshape(())), "weight_zero_point": _ints(wq.zero_point)}


def _dense(call: Node, labels: Labels, quantized: bool) -> Kernel:
    dense = _node(labels, "dense")
    assert dense is not None
    inputs: list[Value] = [call.inputs[0], dense.inputs[1]]
    bias = _node(labels, "bias")
    if bias is not None:
        inputs.append(bias.inputs[1])
    attrs: dict[str, Any] = {}
    if quantized:
        req = _node(labels, "requantize")
        assert req is not None
        attrs.update(_requantize_attrs(req))
        attrs.update(_zero_points(dense))
    return Kernel("qnn_dense" if quantized else "dense", attrs, inputs)


def _pool_attrs(node: Node, kind: str) -> dict[str, Any]:
    shape = node.inputs[0].type.shape
    if node.op in ("nn.global_avg_pool2d", "nn.global_max_pool2d"):
        if node.attrs["layout"] != "NHWC":
            raise PartitionError(f"acl serializer: pool {node.name!r} must be NHWC")
        return {
            "kind": kind,
            "kernel": [shape[1], shape[2]],
            "strides": [1, 1],
            "padding": [0, 0, 0, 0],
            "count_include_pad": False,
        }
    g = pool2d_geometry(node.attrs, shape)
    if g.nchw:
        raise PartitionError(f"acl serializer: pool {node.name!r} must be NHWC")
    return {
        "kind": kind,
        "kernel": [g.kh, g.kw],
        "strides": [g.sh, g.sw],
        # the right/bottom padding includes the ceil-mode extension; windows count only real and
        # declared padding elements (count_include_pad), as the reference does
        "padding": [g.pt, g.pl, g.pb + g.eb, g.pr + g.er],
        "declared_padding": [g.pt, g.pl, g.pb, g.pr],
        "count_include_pad": bool(node.attrs.get("count_include_pad", False)),
    }


def _quant_attrs(v: Value) -> tuple[float, int]:
    q = v.type.quant
    if q is None or q.axis is not None:
        raise PartitionError(f"acl serializer: %{v.name} must be quantized per tensor")
    return float(np.float32(q.scale)), int(np.asarray(q.zero_point).reshape(()))


def _qnn_add(node: Node) -> Kernel:
    (sa, za), (sb, zb) = _quant_attrs(node.inputs[0]), _quant_attrs(node.inputs[1])
    so, zo = _quant_attrs(node.outputs[0])
    (ma, ha), (mb, hb), (mo, ho) = quant.add_multipliers(sa, sb, so)
    lo, hi = quant.dtype_range(node.outputs[0].type.dtype)
    return Kernel(
        "qnn_add",
        {
            "multipliers": [int(ma), int(mb), int(mo)],
            "shifts": [int(ha), int(hb), int(ho)],
            "zero_points": [za, zb, zo],
            "left_shift": quant.ADD_LEFT_SHIFT,
            "clamp_min": int(lo),
            "clamp_max": int(hi),
        },
    )


def lower(node: Node, labels: Labels) -> Kernel:
    """The acl kernel one op or composite becomes (the table in this module's docstring)."""
    if node.op == CALL_OP:
        composite = str(node.attrs["composite"])
        if composite in ("acl.conv2d", "acl.qnn_conv2d"):
            return _conv2d(node, labels, composite == "acl.qnn_conv2d")
        if composite in ("acl.dense", "acl.qnn_dense"):
            return _dense(node, labels, composite == "acl.qnn_dense")
        if composite == "acl.avg_pool2d":
            pool = _node(labels, "pool")
            assert pool is not None
            return Kernel("qnn_avg_pool2d", _pool_attrs(pool, "avg"), [node.inputs[0]])
        if composite == "acl.l2_pool2d":
            pool = _node(labels, "pool")
            assert pool is not None
            return Kernel("pool2d", _pool_attrs(pool, "l2"), [node.inputs[0]])
        raise PartitionError(f"acl serializer: unknown composite {composite!r} ({node.name!r})")
    op = node.op
    if op in ("nn.max_pool2d", "nn.global_max_pool2d"):
        return Kernel("pool2d", _pool_attrs(node, "max"))
    if op in ("nn.avg_pool2d", "nn.global_avg_pool2d"):
        return Kernel("pool2d", _pool_attrs(node, "avg"))
    if op in ("add", "maximum", "multiply"):
        a, b = node.inputs
        # the full-shaped operand first: a per-channel constant is broadcast as input 1 (the ops commute)
        ordered = [b, a] if tuple(a.type.shape) != tuple(node.outputs[0].type.shape) else [a, b]
        return Kernel(op, {}, ordered)
    if op == "qnn.add":
        return _qnn_add(node)
    if op == "concatenate":
        return Kernel("concatenate", {"axis": int(node.attrs["axis"]) % node.inputs[0].type.rank})
    if op == "reshape":
        return Kernel("reshape", {})
    if op == "nn.relu":
        return Kernel("activation", {"activation": RELU, "act_max": 0.0})
    if op == "clip":
        return Kernel("activation", {"activation": BOUNDED_RELU, "act_max": float(node.attrs["a_max"])})
    if op == "qnn.requantize":
        return Kernel("requantize", _requantize_attrs(node))
    if op == "qnn.dequantize":
        scale, zero_point = _quant_attrs(node.inputs[0])
        return Kernel("dequantize", {"scale": scale, "zero_point": zero_point})
    if op == "qnn.quantize":
        scale, zero_point = _quant_attrs(node.outputs[0])
        return Kernel("quantize", {"scale": scale, "zero_point": zero_point})
    if op == "nn.softmax":
        return Kernel("softmax", {})
    if op == "transpose":
        rank = node.inputs[0].type.rank
        return Kernel("transpose", {"axes": [int(a) % rank for a in node.attrs["axes"]]})
    raise PartitionError(f"acl serializer: cannot encode node {node.name!r} ({op})")


def serialize(graph: Graph) -> bytes:
    """Encode one partition body (NHWC) as a graph blob.

    The blob fixes no thread count: the runtime computes with the one accel chose when it loaded the
    artifact. (Blobs written when the count was a target option carry a ``threads`` attribute on every
    node; the runtime ignores it.)"""
    writer = GraphBlobWriter(KIND, KIND_VERSION, lower=lower)
    matches = {n: composite_match(n) for n in graph.nodes if n.op == CALL_OP}
    return writer.write(graph, matches=matches)


__all__ = ["KIND", "KIND_VERSION", "lower", "serialize"]
