"""The testbackend blob: one partition (NHWC, float32 ops and qnn.requantize) as bytes.

Format version 1, every number little-endian (README.md has the table)::

    "ATBK" u32 version
    u32 n_tensors, per tensor: u8 dtype, u8 rank, rank x i64 dims, u8 kind (0 activation, 1 constant)
                               constant: u64 nbytes, nbytes of C-order data
    u32 n_inputs,  n_inputs  x u32 tensor id
    u32 n_outputs, n_outputs x u32 tensor id
    u32 n_ops, per op: u8 opcode, u8 n_in, n_in x u32, u8 n_out, n_out x u32,
                       u8 n_ints, n_ints x i64, u8 n_floats, n_floats x f32

The same graph always gives the same bytes (tensors are numbered in the order
they are first met: graph inputs, then op by op).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from accel.errors import PartitionError
from accel.ir import CALL_OP, Graph, Node, Value
from accel.ops.nn import conv2d_geometry, pool2d_geometry
from accel.pattern import composite_match

MAGIC = b"ATBK"
VERSION = 1

#: accel_dtype codes of accel/runtime_abi.h.
DTYPE_CODES = {
    "float32": 0,
    "float16": 1,
    "float64": 2,
    "int8": 3,
    "uint8": 4,
    "int16": 5,
    "uint16": 6,
    "int32": 7,
    "uint32": 8,
    "int64": 9,
    "uint64": 10,
    "bool": 11,
}

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
    """Tensor numbering and the little-endian byte stream of one blob."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.tensors: list[bytes] = []
        self.ops: list[bytes] = []

    def tensor(self, v: Value) -> int:
        tid = self.ids.get(id(v))
        if tid is None:
            tid = self.ids[id(v)] = len(self.tensors)
            t = v.type
            rec = struct.pack(f"<BB{t.rank}q", DTYPE_CODES[t.dtype], t.rank, *t.shape)
            if v.const is None:
                rec += b"\x00"
            else:
                data = np.ascontiguousarray(v.const, dtype=t.np_dtype.newbyteorder("<")).tobytes()
                rec += b"\x01" + struct.pack("<Q", len(data)) + data
            self.tensors.append(rec)
        return tid

    def op(self, opcode: str, inputs: list[Value], outputs: list[Value], ints: list[int], floats: list[float]) -> None:
        ins = [self.tensor(v) for v in inputs]
        outs = [self.tensor(v) for v in outputs]
        self.ops.append(
            struct.pack(
                f"<BB{len(ins)}IB{len(outs)}IB{len(ints)}qB{len(floats)}f",
                OPCODES[opcode],
                len(ins),
                *ins,
                len(outs),
                *outs,
                len(ints),
                *ints,
                len(floats),
                *floats,
            )
        )

    def encode(self, inputs: list[int], outputs: list[int]) -> bytes:
        parts = [MAGIC, struct.pack("<II", VERSION, len(self.tensors)), *self.tensors]
        parts.append(struct.pack(f"<I{len(inputs)}I", len(inputs), *inputs))
        parts.append(struct.pack(f"<I{len(outputs)}I", len(outputs), *outputs))
        parts.append(struct.pack("<I", len(self.ops)))
        parts.extend(self.ops)
        return b"".join(parts)


def _f32(x: Any) -> float:
    """``x`` rounded to float32 as the reference kernels round it (overflow gives ±inf)."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


def _conv(blob: _Blob, call: Node) -> None:
    m = composite_match(call)  # the pattern's labels: conv, bias?, relu?
    conv = m.node("conv")
    bias = m.node("bias") if "bias" in m.bindings else None
    data = m.outer(conv.inputs[0])
    g = conv2d_geometry(conv.attrs, conv.inputs[0].type.shape, conv.inputs[1].type.shape)
    if g.nchw or g.kernel_layout != "OHWI" or g.groups != 1:
        raise PartitionError(f"testbackend serializer: conv {call.name!r} must be NHWC/OHWI with groups=1")
    inputs = [data, conv.inputs[1]] + ([bias.inputs[1]] if bias is not None else [])
    relu = int("relu" in m.bindings)
    ints = [g.sh, g.sw, g.pt, g.pl, g.pb, g.pr, g.dh, g.dw, relu]
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
