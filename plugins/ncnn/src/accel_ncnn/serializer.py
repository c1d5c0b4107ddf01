"""The ncnn blob: one partition as ncnn's own model, its ``.param`` text and ``.bin`` weights.

The blob (``src/runtime.cpp`` reads it with accel-sdk's BlobReader)::

    magic "NCNB", u32 version 1
    u32 input count, per input: string blob name, counted i64 shape   (float32, NCHW)
    u32 output count, per output: the same
    string: the .param text
    constant, 64-aligned: the .bin

The ``.param`` is ncnn's text format: the magic line ``7767517``, then ``<layers>
<blobs>``, then one layer a line, ``Type name n_in n_out inputs... outputs... k=v...``
(an array value is ``-(23300 + k)=count,v0,v1,...``). The ``.bin`` holds each
layer's weights in the order its ``load_model`` reads them, every array a
multiple of 4 bytes: convolution and inner-product weights behind a zero
32-bit tag (plain float32), biases and batch-norm vectors raw.

ncnn wants a blob read by several layers split first: a value read more than
once (a graph output counts as a reader) goes through a ``Split`` layer, whose
outputs the readers take one each. Graph inputs are ``in0, in1, ...``, the
runtime extracts the outputs by the names the blob lists.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Sequence

import numpy as np
from accel_sdk.blob import BlobWriter

from accel.errors import PartitionError
from accel.ir import CALL_OP, Graph, Node, Value
from accel.ops.geometry import conv2d_geometry, pool2d_geometry
from accel.pattern import composite_match
from accel_ncnn.support import layer_of, mat_axis, mat_shape

MAGIC = b"NCNB"
VERSION = 1
PARAM_MAGIC = 7767517
#: ncnn's largest float: its .param reader takes no infinities (an unbounded clip ends here).
FLT_MAX = float(np.finfo(np.float32).max)


def _number(v: int | float) -> str:
    if isinstance(v, (bool, int, np.integer)):
        return str(int(v))
    return format(min(max(float(v), -FLT_MAX), FLT_MAX), ".9e")


def _params(params: dict[int, int | float | Sequence[float]]) -> str:
    out = []
    for key, v in params.items():
        if isinstance(v, (list, tuple)):
            out.append(f"{-23300 - key}={len(v)}," + ",".join(_number(x) for x in v))
        else:
            out.append(f"{key}={_number(v)}")
    return " ".join(out)


class _Model:
    """The .param lines and .bin bytes of one partition, written layer by layer."""

    def __init__(self, graph: Graph) -> None:
        self.lines: list[str] = []
        self.blobs = 0
        self.bin = bytearray()
        self.names: dict[Value, list[str]] = {}
        self.reads: Counter[Value] = Counter()
        for node in graph.nodes:
            for v in self.data_inputs(node):
                self.reads[v] += 1
        for v in graph.outputs:
            self.reads[v] += 1

    @staticmethod
    def data_inputs(node: Node) -> list[Value]:
        """The inputs a layer reads as blobs (a composite's data; an op's non-constant inputs)."""
        if node.op == CALL_OP:
            return [node.inputs[0]]
        return [v for v in node.inputs if v.const is None]

    def layer(self, kind: str, ins: Sequence[str], outs: Sequence[str], params: dict | None = None) -> None:
        name = f"{kind.lower()}_{len(self.lines)}"
        line = f"{kind} {name} {len(ins)} {len(outs)} {' '.join([*ins, *outs])}"
        self.lines.append(line + (" " + _params(params) if params else ""))
        self.blobs += len(outs)

    def define(self, v: Value, name: str) -> None:
        """``v`` is blob ``name``: its readers take it, or, read more than once, a Split output each."""
        n = self.reads[v]
        if n <= 1:
            self.names[v] = [name]
            return
        outs = [f"{name}_{i}" for i in range(n)]
        self.layer("Split", [name], outs)
        self.names[v] = outs

    def take(self, v: Value) -> str:
        names = self.names.get(v)
        if not names:
            raise PartitionError(f"ncnn serializer: value {v.name!r} is not a blob of the partition")
        return names.pop(0)

    def weights(self, array: np.ndarray, *, tagged: bool) -> None:
        """One array of the .bin, float32: ``tagged`` ones (convolution and inner-product weights) behind a
        zero tag, which says plain float32 to ncnn's reader."""
        if tagged:
            self.bin += struct.pack("<I", 0)
        self.bin += np.ascontiguousarray(array, dtype="<f4").tobytes()

    def text(self) -> str:
        return "\n".join([str(PARAM_MAGIC), f"{len(self.lines)} {self.blobs}", *self.lines]) + "\n"


def _activation(labels: dict, params: dict[int, int | float | Sequence[float]]) -> None:
    if "relu" in labels:
        params[9] = 1
    elif "clip" in labels:
        clip = labels["clip"]
        params[9] = 3
        params[10] = [float(clip.attrs["a_min"]), float(clip.attrs["a_max"])]


def _conv2d(m: _Model, call: Node, labels: dict, x: str, y: str) -> None:
    conv, bias = labels["conv"], labels.get("bias")
    w = conv.inputs[1].const
    g = conv2d_geometry(conv.attrs, conv.inputs[0].type.shape, conv.inputs[1].type.shape)
    if not g.nchw or g.kernel_layout != "OIHW":
        raise PartitionError(f"ncnn serializer: conv {call.name!r} must be NCHW/OIHW")
    params: dict[int, int | float | Sequence[float]] = {
        0: g.o, 1: g.kw, 11: g.kh, 2: g.dw, 12: g.dh, 3: g.sw, 13: g.sh,
        4: g.pl, 15: g.pr, 14: g.pt, 16: g.pb, 5: int(bias is not None), 6: int(w.size),
    }  # fmt: skip
    if g.groups != 1:
        params[7] = g.groups
    _activation(labels, params)
    m.layer("Convolution" if g.groups == 1 else "ConvolutionDepthWise", [x], [y], params)
    m.weights(w, tagged=True)
    if bias is not None:
        m.weights(bias.inputs[1].const, tagged=False)


def _dense(m: _Model, call: Node, labels: dict, x: str, y: str) -> None:
    dense, bias = labels["dense"], labels.get("bias")
    w = dense.inputs[1].const
    params: dict[int, int | float | Sequence[float]] = {0: w.shape[0], 1: int(bias is not None), 2: int(w.size)}
    _activation(labels, params)
    m.layer("InnerProduct", [x], [y], params)
    m.weights(w, tagged=True)
    if bias is not None:
        m.weights(bias.inputs[1].const, tagged=False)


def _pool(node: Node) -> dict[int, int | float | Sequence[float]]:
    _, _, h, w = node.inputs[0].type.shape
    if node.op.startswith("nn.global_"):
        # the window of the whole plane (ncnn's global pooling would give a flat Mat, not [C, 1, 1])
        kind = 0 if node.op == "nn.global_max_pool2d" else 1
        return {0: kind, 1: w, 11: h, 2: 1, 12: 1, 3: 0, 14: 0, 13: 0, 15: 0, 5: 1}
    g = pool2d_geometry(node.attrs, node.inputs[0].type.shape)
    kind = 0 if node.op == "nn.max_pool2d" else 1
    # valid padding (5=1) with the explicit pads, ceil_mode's last windows in the bottom and right ones
    return {
        0: kind, 1: g.kw, 11: g.kh, 2: g.sw, 12: g.sh,
        3: g.pl, 14: g.pr + g.er, 13: g.pt, 15: g.pb + g.eb, 5: 1,
        6: int(bool(node.attrs.get("count_include_pad"))),
    }  # fmt: skip


def _op(m: _Model, node: Node, ins: list[str], y: str) -> None:
    layer = layer_of(node)
    rank = node.inputs[0].type.rank
    params: dict[int, int | float | Sequence[float]] = {}
    if layer == "Pooling":
        params = _pool(node)
    elif layer == "Clip":
        params = {0: float(node.attrs["a_min"]), 1: float(node.attrs["a_max"])}
    elif layer == "BinaryOp":
        params = {0: 0}  # add
    elif layer == "Softmax":
        params = {0: mat_axis(node.attrs["axis"] % rank, rank), 1: 1}  # 1=1: the axis as given
    elif layer == "Concat":
        params = {0: mat_axis(node.attrs["axis"] % rank, rank)}
    elif layer == "Reshape":
        params = dict(zip((0, 1, 2), mat_shape(node.outputs[0].type.shape), strict=False))
    elif layer == "LRN":
        a = node.attrs
        params = {0: 0, 1: int(a["size"]), 2: float(a["alpha"]), 3: float(a["beta"]), 4: float(a["bias"])}
    elif layer == "BatchNorm":
        data, gamma, beta, mean, var = node.inputs
        params = {0: data.type.shape[1], 1: float(node.attrs["epsilon"])}
        m.layer(layer, ins, [y], params)
        for v in (gamma, mean, var, beta):  # the order BatchNorm reads them: slope, mean, var, bias
            m.weights(v.const, tagged=False)
        return
    m.layer(layer, ins, [y], params)


def serialize(graph: Graph) -> bytes:
    """Encode one partition body (NCHW): the same graph always gives the same bytes."""
    m = _Model(graph)
    w = BlobWriter()
    w.magic(MAGIC)
    w.u32(VERSION)
    w.u32(len(graph.inputs))
    for i, v in enumerate(graph.inputs):
        if v.type.dtype != "float32":
            raise PartitionError(f"ncnn serializer: input {v.name!r} is {v.type.dtype}, not float32")
        name = f"in{i}"
        m.layer("Input", [], [name], dict(zip((0, 1, 2), mat_shape(v.type.shape), strict=False)))
        m.define(v, name)
        w.string(name)
        w.counted_array("i64", v.type.shape)
    for k, node in enumerate(graph.nodes):
        ins = [m.take(v) for v in m.data_inputs(node)]
        y = f"t{k}"
        if node.op == CALL_OP:
            match = composite_match(node)
            labels = {label: match.node(label) for label in ("conv", "bias", "relu", "clip", "dense")
                      if label in match.bindings}  # fmt: skip
            (_conv2d if layer_of(node) == "Convolution" else _dense)(m, node, labels, ins[0], y)
        else:
            _op(m, node, ins, y)
        m.define(node.output, y)
    w.u32(len(graph.outputs))
    for v in graph.outputs:
        if v.const is not None:
            raise PartitionError(f"ncnn serializer: output {v.name!r} is a constant")
        w.string(m.take(v))
        w.counted_array("i64", v.type.shape)
    w.string(m.text())
    w.constant(bytes(m.bin), align=64)
    return w.getvalue()


def param_text(blob: bytes) -> str:
    """The .param text of a blob (for reading and for tests)."""
    view = memoryview(blob)
    at = 8
    for _ in range(2):
        (n,) = struct.unpack_from("<I", view, at)
        at += 4
        for _ in range(n):
            (length,) = struct.unpack_from("<I", view, at)
            at += 4 + length
            (rank,) = struct.unpack_from("<I", view, at)
            at += 4 + 8 * rank
    (length,) = struct.unpack_from("<I", view, at)
    return bytes(view[at + 4 : at + 4 + length]).decode()


__all__ = ["MAGIC", "VERSION", "param_text", "serialize"]
