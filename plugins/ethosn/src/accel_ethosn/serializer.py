"""The ethosn blob: one partition (float32, NHWC) as bytes the C++ runtime reads.

Written with accel-sdk's :class:`~accel_sdk.blob.BlobWriter` (each call mirrors one
``accel_sdk::BlobReader`` call in ``src/runtime.cpp``); README.md has the table of
fields. The same graph always gives the same bytes: tensors are numbered in the
order they are first met (graph inputs, then op by op).
"""

from __future__ import annotations

from accel_sdk.blob import BlobWriter

from accel.abi import dtype_code
from accel.errors import PartitionError
from accel.ir import CALL_OP, Graph, Node, Value
from accel.ops.geometry import ConvGeometry, PoolGeometry, conv2d_geometry, pool2d_geometry
from accel.pattern import composite_match

MAGIC = b"ETHO"
VERSION = 1
#: Opcodes of the runtime (src/runtime.cpp: enum Opcode).
RELU, ADD, MAX_POOL2D, CONV2D = 0, 1, 2, 3
#: Constants start at a multiple of this many bytes from the start of the blob.
CONSTANT_ALIGN = 64


class _Tensors:
    """The tensor table: an id per value, in first-use order."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.values: list[Value] = []

    def __call__(self, v: Value) -> int:
        tid = self.ids.get(id(v))
        if tid is None:
            tid = self.ids[id(v)] = len(self.values)
            self.values.append(v)
        return tid

    def write(self, w: BlobWriter) -> None:
        w.u32(len(self.values), "tensor count")
        for v in self.values:
            w.u8(dtype_code(v.type.dtype), "dtype")
            w.u8(v.type.rank, "rank")
            w.array("i64", v.type.shape, "dims")
            w.u8(0 if v.const is None else 1, "kind")
            if v.const is not None:
                w.constant(v.const, align=CONSTANT_ALIGN)


def _window(w: BlobWriter, g: ConvGeometry | PoolGeometry) -> None:
    """kh kw sh sw dh dw, padding top left bottom right (i64 each)."""
    w.array("i64", [g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.pb, g.pr], "window")


def serialize(graph: Graph) -> bytes:
    """Encode one partition body: its inputs, outputs, single ops and ``ethosn.conv2d`` composites."""
    tensors = _Tensors()
    inputs = [tensors(v) for v in graph.inputs]
    ops = BlobWriter()  # the op section, written after the tensor table it refers to
    for node in graph.nodes:
        _op(ops, tensors, node)
    outputs = [tensors(v) for v in graph.outputs]

    w = BlobWriter()
    w.magic(MAGIC)
    w.u32(VERSION, "version")
    tensors.write(w)
    w.counted_array("u32", inputs, "graph inputs")
    w.counted_array("u32", outputs, "graph outputs")
    w.u32(len(graph.nodes), "op count")
    w.raw(ops.getvalue())
    return w.getvalue()


def _op(w: BlobWriter, tensors: _Tensors, node: Node) -> None:
    if node.op == "nn.relu":
        w.u8(RELU)
        w.u32(tensors(node.inputs[0]))
    elif node.op == "add":
        w.u8(ADD)
        w.u32(tensors(node.inputs[0]))
        w.u32(tensors(node.inputs[1]))
    elif node.op == "nn.max_pool2d":
        g = pool2d_geometry(node.attrs, node.inputs[0].type.shape)
        if g.nchw:
            raise PartitionError(f"ethosn serializer: max pool {node.name!r} must be NHWC")
        w.u8(MAX_POOL2D)
        w.u32(tensors(node.inputs[0]))
        _window(w, g)
        w.u8(int(node.attrs["ceil_mode"]), "ceil_mode")
    elif node.op == CALL_OP and node.attrs.get("composite") == "ethosn.conv2d":
        _conv2d(w, tensors, node)
    else:
        raise PartitionError(f"ethosn serializer: cannot encode node {node.name!r} ({node.op})")
    w.u32(tensors(node.outputs[0]))


def _conv2d(w: BlobWriter, tensors: _Tensors, call: Node) -> None:
    """``conv → bias? → relu?``, read through the composite's pattern labels."""
    match = composite_match(call)
    conv = match.node("conv")
    g = conv2d_geometry(conv.attrs, conv.inputs[0].type.shape, conv.inputs[1].type.shape)
    if g.nchw or g.kernel_layout != "OHWI" or g.groups != 1:
        raise PartitionError(f"ethosn serializer: conv {call.name!r} must be NHWC/OHWI with groups=1")
    w.u8(CONV2D)
    w.u32(tensors(match.outer(conv.inputs[0])))  # the call's argument the body's input stands for
    w.u32(tensors(conv.inputs[1]))
    has_bias = "bias" in match.bindings
    w.u8(int(has_bias), "has bias")
    if has_bias:
        w.u32(tensors(match.node("bias").inputs[1]))
    _window(w, g)
    w.u8(int("relu" in match.bindings), "relu")


__all__ = ["MAGIC", "VERSION", "serialize"]
