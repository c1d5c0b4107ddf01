"""Write the seed corpora of the fuzz targets from real blobs.

``python sdk/fuzz/make_seeds.py OUT``: ``OUT/blob_reader/`` holds programs for
fuzz_blob_reader.cpp written with :class:`accel_sdk.blob.BlobWriter`;
``OUT/graph_blob/`` holds graph blobs of small partitions (float and quantized
convolutions, pools, composites with labels, per-channel quantization, nested
and tensor attributes) written with :class:`accel_sdk.graph_blob.GraphBlobWriter`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from accel_sdk.blob import BlobWriter
from accel_sdk.graph_blob import GraphBlobWriter, Kernel

from accel.backend import Backend, PatternEntry
from accel.builder import GraphBuilder
from accel.ir import QuantParams, TensorType, Value
from accel.partition import partition_graph
from accel.pattern import is_constant, is_op, wildcard


def reader_programs() -> list[bytes]:
    """Programs in fuzz_blob_reader.cpp's opcodes, each ending exactly at the end of its blob."""
    out = []
    w = BlobWriter()
    for op, value in [(0, ("u8", 7)), (1, ("u16", 513)), (2, ("u32", 1 << 20)), (3, ("i64", -5)), (4, ("f64", 2.5))]:
        w.u8(op)
        w.scalar(*value)
    out.append(w.getvalue())
    w = BlobWriter()
    w.u8(5)
    w.u16(3)
    w.raw(b"abc")
    w.u8(6)
    w.u16(64)
    w.string("relu")
    w.u8(7)
    w.u32(8)
    w.counted_array("i64", [1, -2, 3])
    w.u8(8)
    w.u32(2)
    w.array("f32", [1.0, -0.5])
    out.append(w.getvalue())
    for alignment in (0, 4, 6):
        w = BlobWriter()
        w.u8(9)
        w.u8(alignment)
        w.constant(np.arange(5, dtype=np.int16), align=1 << alignment)
        w.u8(10)
        w.u8(16)
        w.align(16)
        out.append(w.getvalue())
    w = BlobWriter()
    w.u8(11)
    w.magic(b"AGRB")
    w.u8(12)
    w.u32(2)
    w.u8(13)
    w.i32(999)
    w.u8(14)
    w.u8(4)
    w.u32(1)
    w.u32(0)
    w.u8(15)
    w.u8(3)
    w.array("u16", [1, 2, 3])
    out.append(w.getvalue())
    return out


def _conv_pattern():
    conv = is_op("nn.conv2d")(wildcard(), is_constant()).named("conv")
    bias = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant().named("bias")).named("bias_add"))
    return bias.optional(lambda x: is_op("nn.relu")(x).named("relu"))


class _Fuzz(Backend):
    name = "fuzz"
    layout = "NHWC"

    def pattern_table(self):
        return [PatternEntry("conv", _conv_pattern())]

    def op_checks(self):
        return {op: (lambda n: None) for op in ("nn.max_pool2d", "nn.avg_pool2d", "add", "nn.relu", "clip", "reshape")}


def _lower(node, labels):
    if node.op == "call":
        conv = labels["conv"]
        attrs = {
            "window": [conv.attrs["strides"], conv.attrs["padding"], conv.attrs["dilation"]],
            "relu": "relu" in labels,
            "bias": labels.get("bias"),
            "note": None,
            "scales": np.array([0.5, 0.25]),
        }
        return Kernel("fuzz_conv", attrs)
    return Kernel(node.op.replace("nn.", "fuzz_"), node.attrs)


def graph_blobs() -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    b = GraphBuilder(x=(1, 8, 8, 3))
    y = b.op("nn.conv2d", b.x["x"], b.const(rng.normal(size=(4, 3, 3, 3)).astype(np.float32)),
             padding=(1, 1, 1, 1), data_layout="NHWC", kernel_layout="OHWI")  # fmt: skip
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(np.ones(4, np.float32)), axis=3))
    z = b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2), layout="NHWC", ceil_mode=True)
    z = b.op("add", z, b.op("nn.avg_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), layout="NHWC"))
    g = b.done(b.op("clip", z, a_min=0.0, a_max=6.0))
    body = partition_graph(g, [_Fuzz()], layout="NHWC").regions[0].body
    assert body is not None
    matches = {n: _conv_pattern().match(n.body.nodes[-1], n.body) for n in body.nodes if n.op == "call" and n.body}
    out.append(GraphBlobWriter("fuzz", 1, lower=_lower, alignment=16).write(body, matches=matches))
    out.append(GraphBlobWriter("fuzz", 2).write(body))
    # quantized tensors, per channel on the weights
    xq = TensorType((1, 4, 4, 2), "int8", QuantParams(0.05, -3))
    b = GraphBuilder(x=xq)
    w = Value.constant(
        "w", rng.integers(-100, 100, (3, 1, 1, 2)).astype(np.int8), QuantParams([0.1, 0.2, 0.3], 0, axis=0)
    )
    acc = b.op("qnn.conv2d", b.x["x"], w, data_layout="NHWC", kernel_layout="OHWI")
    g = b.done(b.op("qnn.requantize", acc, out_scale=0.5, out_zero_point=1, out_dtype="int8"))
    out.append(GraphBlobWriter("fuzz", 1, alignment=1).write(g))
    return out


def main(folder: str) -> None:
    root = Path(folder)
    for name, blobs in (("blob_reader", reader_programs()), ("graph_blob", graph_blobs())):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i, blob in enumerate(blobs):
            (root / name / f"seed{i}.bin").write_bytes(blob)
        print(f"{len(blobs)} {name} seeds in {root / name}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fuzz-seeds")
