"""The bnns blob: one partition (float32, planar NCHW) as an accel graph blob.

Layout of the bytes (README.md has every field)::

    "BNNS" u32 version=1 u32 num_threads=0 u64 graph_size   zero padding to 64 bytes
    graph_size bytes: an accel graph blob (accel_sdk.graph_blob, kind "bnns", kind version 1), to the end

``num_threads`` is 0: the thread count is chosen when the blob is loaded. Blobs
written when it was a target option carry it there; the runtime checks it (at
most 1024) and ignores it.

Every op and composite becomes one kernel, whatever pattern it came from, so the
runtime knows six kernels; their inputs and attributes:

=================  ================================  =========================================================
kernel             inputs                            attributes
=================  ================================  =========================================================
``conv2d``         x, weight OIHW, bias (optional)   strides, dilation (2 ints), padding (4: top left bottom
                                                     right), groups, activation ("none", "relu", "sigmoid", "clamp"
                                                     with act_min, act_max: a clip)
``dense``          x [..., K], weight [N, K], bias   activation ("none", "gelu_tanh", "gelu_erf")
``batch_matmul``   a, b                              transpose_a, transpose_b
``pool2d``         x                                 kind ("max", "avg"), kernel, strides, dilation (2 ints),
                                                     padding (4, the ceil-mode overhang included),
                                                     count_include_pad
``instance_norm``  x, gamma, beta                    epsilon
``add``            a, b (one shape)                  activation ("none", "relu")
=================  ================================  =========================================================

Composites are lowered here: a per-channel ``add`` becomes the conv's bias, a
batch norm is folded into the conv's weights and bias (in float64, rounded
once), the GELU of ``dense_bias_gelu`` its activation. Global pools are pools
whose window is the whole image.
"""

from __future__ import annotations

import numpy as np
from accel_sdk.blob import BlobWriter
from accel_sdk.graph_blob import GraphBlobWriter, Kernel, Labels

from accel.errors import PartitionError
from accel.ir import CALL_OP, Graph, Node
from accel.ops.geometry import conv2d_geometry, pool2d_geometry

MAGIC = b"BNNS"
VERSION = 1
#: The graph blob starts here, so its aligned constants stay aligned in the whole blob.
HEADER_SIZE = 64
KIND = "bnns"
KIND_VERSION = 1

_ACTIVATION = {"nn.relu": "relu", "sigmoid": "sigmoid", "clip": "clamp"}


def _conv_kernel(conv: Node, x, weight, bias, activation: str, act: Node | None = None) -> Kernel:
    g = conv2d_geometry(conv.attrs, conv.inputs[0].type.shape, conv.inputs[1].type.shape)
    if not g.nchw or g.kernel_layout != "OIHW":
        raise PartitionError(f"bnns serializer: conv {conv.name!r} must be NCHW/OIHW")
    attrs = {
        "strides": [g.sh, g.sw],
        "dilation": [g.dh, g.dw],
        "padding": [g.pt, g.pl, g.pb, g.pr],
        "groups": g.groups,
        "activation": activation,
    }
    if activation == "clamp":  # BNNS's clamp activation: clip(a_min, a_max)
        assert act is not None
        attrs["act_min"] = float(act.attrs["a_min"])
        attrs["act_max"] = float(act.attrs["a_max"])
    inputs = [x, weight] if bias is None else [x, weight, bias]
    return Kernel("conv2d", attrs, inputs)


def _bias_vector(bias: Node) -> np.ndarray:
    """The per-channel (or per-feature) constant of a bias node, as a 1-D float32 array."""
    addend = next(v for v in bias.inputs[1:] if v.const is not None) if bias.op == "nn.bias_add" else None
    if addend is None:
        addend = next(v for v in bias.inputs if v.const is not None)
    assert addend.const is not None
    return np.ascontiguousarray(addend.const.reshape(-1), dtype=np.float32)


def _fold_batch_norm(conv: Node, bn: Node) -> tuple[np.ndarray, np.ndarray]:
    w = conv.inputs[1].const
    gamma, beta, mean, var = (v.const for v in bn.inputs[1:])
    assert w is not None and gamma is not None and beta is not None and mean is not None and var is not None
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + float(bn.attrs["epsilon"]))
    weight = (w.astype(np.float64) * scale[:, None, None, None]).astype(np.float32)
    bias = (beta.astype(np.float64) - mean.astype(np.float64) * scale).astype(np.float32)
    return weight, bias


def lower(node: Node, labels: Labels) -> Kernel:
    """The kernel each op or composite of a bnns partition becomes (see the module doc)."""
    if node.op == CALL_OP:
        return _lower_composite(node, labels)
    a = node.attrs
    if node.op == "nn.conv2d":
        return _conv_kernel(node, node.inputs[0], node.inputs[1], None, "none")
    if node.op == "nn.dense":
        return Kernel("dense", {"activation": "none"}, [node.inputs[0], node.inputs[1]])
    if node.op == "nn.batch_matmul":
        return Kernel("batch_matmul", {"transpose_a": bool(a["transpose_a"]), "transpose_b": bool(a["transpose_b"])})
    if node.op in ("nn.max_pool2d", "nn.avg_pool2d"):
        g = pool2d_geometry(a, node.inputs[0].type.shape)
        if not g.nchw:
            raise PartitionError(f"bnns serializer: pool {node.name!r} must be NCHW")
        attrs = {
            "kind": "max" if node.op == "nn.max_pool2d" else "avg",
            "kernel": [g.kh, g.kw],
            "strides": [g.sh, g.sw],
            "dilation": [g.dh, g.dw],
            "padding": [g.pt, g.pl, g.pb + g.eb, g.pr + g.er],
            "count_include_pad": bool(a.get("count_include_pad", False)),
        }
        return Kernel("pool2d", attrs)
    if node.op in ("nn.global_max_pool2d", "nn.global_avg_pool2d"):
        if a["layout"] != "NCHW":
            raise PartitionError(f"bnns serializer: pool {node.name!r} must be NCHW")
        _, _, h, w = node.inputs[0].type.shape
        attrs = {
            "kind": "max" if node.op == "nn.global_max_pool2d" else "avg",
            "kernel": [h, w],
            "strides": [1, 1],
            "dilation": [1, 1],
            "padding": [0, 0, 0, 0],
            "count_include_pad": False,
        }
        return Kernel("pool2d", attrs)
    if node.op == "nn.instance_norm":
        return Kernel("instance_norm", {"epsilon": float(a["epsilon"])})
    if node.op == "add":
        return Kernel("add", {"activation": "none"})
    raise PartitionError(f"bnns serializer: cannot encode node {node.name!r} ({node.op})")


def _lower_composite(call: Node, labels: Labels) -> Kernel:
    name = str(call.attrs["composite"])
    x = call.inputs[0]
    if name.startswith("bnns.conv2d"):
        conv = labels["conv"]
        assert isinstance(conv, Node)
        act = labels.get("act")
        act_node = act if isinstance(act, Node) else None
        activation = _ACTIVATION[act_node.op] if act_node is not None else "none"
        bn = labels.get("bn")
        if isinstance(bn, Node):
            weight, bias = _fold_batch_norm(conv, bn)
            return _conv_kernel(conv, x, weight, bias, activation, act_node)
        b = labels.get("bias")
        bias = _bias_vector(b) if isinstance(b, Node) else None
        return _conv_kernel(conv, x, conv.inputs[1], bias, activation, act_node)
    if name in ("bnns.dense_bias", "bnns.dense_bias_gelu"):
        dense, b = labels["dense"], labels["bias"]
        assert isinstance(dense, Node) and isinstance(b, Node)
        activation = "none"
        if name == "bnns.dense_bias_gelu":
            gelu = labels["gelu"]
            exact = isinstance(gelu, Node) and gelu.op == "nn.gelu" and gelu.attrs["approximate"] == "none"
            activation = "gelu_erf" if exact else "gelu_tanh"
        return Kernel("dense", {"activation": activation}, [x, dense.inputs[1], _bias_vector(b)])
    if name == "bnns.add_relu":
        add = labels["add"]
        assert isinstance(add, Node) and call.body is not None
        outer = {id(p): v for p, v in zip(call.body.inputs, call.inputs)}
        return Kernel("add", {"activation": "relu"}, [outer[id(v)] for v in add.inputs])
    raise PartitionError(f"bnns serializer: cannot encode composite {call.name!r} ({name})")


WRITER = GraphBlobWriter(KIND, KIND_VERSION, lower=lower)


def serialize(graph: Graph) -> bytes:
    """Encode one partition body (its composites read through their pattern labels)."""
    from accel.pattern import composite_match

    matches = {n: composite_match(n) for n in graph.nodes if n.op == CALL_OP and "composite" in n.attrs}
    body = WRITER.write(graph, matches=matches)
    w = BlobWriter()
    w.magic(MAGIC)
    w.u32(VERSION, "version")
    w.u32(0, "num_threads")
    w.u64(len(body), "graph_size")
    w.align(HEADER_SIZE)
    w.raw(body)
    return w.getvalue()


__all__ = ["HEADER_SIZE", "KIND", "KIND_VERSION", "MAGIC", "VERSION", "lower", "serialize"]
