"""The testbackend blob: one partition (NHWC, float32 ops and qnn.requantize) as bytes.

Format version 2, written with accel-sdk's :class:`~accel_sdk.blob.BlobWriter`
(README.md has the table; src/runtime.cpp reads it with ``accel_sdk::BlobReader``)::

    "ATBK" u32 version
    u32 n_tensors, per tensor: u8 dtype, u8 rank, rank x i64 dims, u8 kind (0 activation, 1 constant)
                               constant: u64 nbytes, zero padding to 64, nbytes of C-order data
    u32 n_inputs,  n_inputs  x u32 tensor id
    u32 n_outputs, n_outputs x u32 tensor id
    u32 n_ops, per op: u8 opcode, u8 n_in, n_in x u32, u8 n_out, n_out x u32,
                       u8 n_ints, n_ints x i64, u8 n_floats, n_floats x f32

The same graph always gives the same bytes (tensors are numbered in the order
they are first met: graph inputs, then op by op).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from accel_sdk.blob import BlobWriter

from accel.abi import dtype_code
from accel.errors import PartitionError
from accel.ir import CALL_OP, Graph, Node, Value
from accel.ops.geometry import conv2d_geometry, pool2d_geometry
from accel.pattern import composite_match
from accel.tensor_types import TensorType

MAGIC = b"ATBK"
VERSION = 2
#: Constants start at a multiple of this many bytes from the start of the blob (runtime.cpp: kConstantAlign).
CONSTANT_ALIGN = 64

OPCODES = {
    "nn.max_pool2d": 0,
    "nn.avg_pool2d": 1,
    "nn.relu": 2,
    "add": 3,
    "maximum": 4,
    "clip": 5,
    "reshape": 6,
    "testbackend.conv2d": 7,
    "qnn.requantize": 8,
}


class _Blob:
    """Tensor numbering, the tensor table and the op section of one blob."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.values: list[Value] = []
        self.ops = BlobWriter()
        self.n_ops = 0

    def tensor(self, v: Value) -> int:
        tid = self.ids.get(id(v))
        if tid is None:
            tid = self.ids[id(v)] = len(self.values)
            self.values.append(v)
        return tid

    def op(self, opcode: str, inputs: list[Value], outputs: list[Value], ints: list[int], floats: list[float]) -> None:
        w = self.ops
        tensor = self.tensor
        w.u8(OPCODES[opcode], "opcode")
        ids = [tensor(v) for v in inputs]
        w.u8(len(ids), "inputs")
        w.array("u32", ids, "inputs")
        ids = [tensor(v) for v in outputs]
        w.u8(len(ids), "outputs")
        w.array("u32", ids, "outputs")
        w.u8(len(ints), "int count")
        if ints:
            w.array("i64", ints, "ints")
        w.u8(len(floats), "float count")
        if floats:
            w.array("f32", floats, "floats")
        self.n_ops += 1

    def encode(self, inputs: list[int], outputs: list[int]) -> bytes:
        w = BlobWriter()
        w.magic(MAGIC)
        w.u32(VERSION, "version")
        w.u32(len(self.values), "tensor count")
        for v in self.values:
            t = v.type
            w.raw(_type_entry(t))
            if v.const is None:
                w.u8(0, "kind")
            else:
                w.u8(1, "kind")
                w.constant(np.asarray(v.const, dtype=t.np_dtype), align=CONSTANT_ALIGN)
        w.counted_array("u32", inputs, "graph inputs")
        w.counted_array("u32", outputs, "graph outputs")
        w.u32(self.n_ops, "op count")
        w.raw(self.ops.getvalue())
        return w.getvalue()


#: A tensor type's entry in the tensor table (u8 dtype, u8 rank, dims), written once per type
#: met: a model's partitions share a few types (bounded, for a process that compiles many models).
_TYPE_ENTRIES: dict[TensorType, bytes] = {}
_MAX_TYPE_ENTRIES = 4096


def _type_entry(t: TensorType) -> bytes:
    entry = _TYPE_ENTRIES.get(t)
    if entry is None:
        w = BlobWriter()
        w.u8(dtype_code(t.dtype), "dtype")
        w.u8(t.rank, "rank")
        w.array("i64", t.shape, "dims")
        entry = w.getvalue()
        if len(_TYPE_ENTRIES) >= _MAX_TYPE_ENTRIES:
            _TYPE_ENTRIES.clear()
        _TYPE_ENTRIES[t] = entry
    return entry


def _f32(x: Any) -> float:
    """``x`` rounded to float32 as the reference kernels round it (overflow gives ±inf)."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


def _conv(blob: _Blob, call: Node) -> None:
    match = composite_match(call)  # the pattern's labels: conv, and bias / relu when they matched
    conv = match.node("conv")
    g = conv2d_geometry(conv.attrs, conv.inputs[0].type.shape, conv.inputs[1].type.shape)
    if g.nchw or g.kernel_layout != "OHWI" or g.groups != 1:
        raise PartitionError(f"testbackend serializer: conv {call.name!r} must be NHWC/OHWI with groups=1")
    inputs = [match.outer(conv.inputs[0]), conv.inputs[1]]
    if "bias" in match.bindings:
        inputs.append(match.node("bias").inputs[1])
    ints = [g.sh, g.sw, g.pt, g.pl, g.pb, g.pr, g.dh, g.dw, int("relu" in match.bindings)]
    blob.op("testbackend.conv2d", inputs, list(call.outputs), ints, [])


def serialize(graph: Graph) -> bytes:
    """Encode one partition body (inputs, outputs, single ops and testbackend.conv2d composites)."""
    blob = _Blob()
    inputs = [blob.tensor(v) for v in graph.inputs]
    for node in graph.nodes:
        a = node.attrs
        if node.op == CALL_OP:
            if a.get("composite") != "testbackend.conv2d":
                raise PartitionError(f"testbackend serializer: unknown composite {a.get('composite')!r}")
            _conv(blob, node)
        elif node.op in ("nn.max_pool2d", "nn.avg_pool2d"):
            g = pool2d_geometry(a, node.inputs[0].type.shape)
            if g.nchw or (g.dh, g.dw) != (1, 1):
                raise PartitionError(f"testbackend serializer: pool {node.name!r} must be NHWC without dilation")
            ints = [g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr, int(a["ceil_mode"])]
            if node.op == "nn.avg_pool2d":
                ints.append(int(a["count_include_pad"]))
            blob.op(node.op, node.inputs, node.outputs, ints, [])
        elif node.op == "clip":
            blob.op(node.op, node.inputs, node.outputs, [], [_f32(a["a_min"]), _f32(a["a_max"])])
        elif node.op == "qnn.requantize":
            q_in, q_out = node.inputs[0].type.quant, node.outputs[0].type.quant
            assert q_in is not None and q_out is not None
            ints = [int(q_in.zero_point), int(q_out.zero_point)]
            blob.op(node.op, node.inputs, node.outputs, ints, [_f32(q_in.scale), _f32(q_out.scale)])
        elif node.op in OPCODES:
            blob.op(node.op, node.inputs, node.outputs, [], [])
        else:
            raise PartitionError(f"testbackend serializer: op {node.op!r} is not supported")
    outputs = [blob.tensor(v) for v in graph.outputs]
    return blob.encode(inputs, outputs)
