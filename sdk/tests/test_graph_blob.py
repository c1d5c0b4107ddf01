"""The graph blob: GraphBlobWriter (Python) against GraphBlob::parse (graph_blob.hpp), through the probe."""

from __future__ import annotations

import numpy as np
import pytest
from accel_sdk.blob import BlobWriter
from accel_sdk.graph_blob import GraphBlobWriter, Kernel, dump, match_composites
from accel_sdk.testing import shortfall
from probe_build import probe

from accel.abi import DTYPE_CODES
from accel.backend import Backend, PatternEntry
from accel.builder import GraphBuilder
from accel.errors import PartitionError
from accel.ir import CALL_OP, Graph, QuantParams, TensorType, Value
from accel.partition import partition_graph
from accel.pattern import is_constant, is_op, wildcard

CONSTANT, QUANTIZED, INTERNAL = 1, 2, 4


@pytest.fixture(scope="module")
def m():
    return probe()


def conv_pattern():
    conv = is_op("nn.conv2d")(wildcard(), is_constant()).named("conv")
    bias = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant().named("bias")).named("bias_add"))
    return bias.optional(lambda x: is_op("nn.relu")(x).named("relu"))


class Npu(Backend):
    name = "npu"
    layout = "NHWC"

    def pattern_table(self):
        return [PatternEntry("conv", conv_pattern())]

    def op_checks(self):
        return {op: (lambda n: None) for op in ("nn.max_pool2d", "nn.avg_pool2d", "add", "clip", "nn.relu")}


def partition(rng: np.random.Generator) -> Graph:
    """One NHWC partition: two conv composites (one with bias and relu), pools, add, clip."""
    b = GraphBuilder(x=(1, 8, 8, 3))
    w1 = rng.normal(size=(4, 3, 3, 3)).astype(np.float32)
    y = b.op("nn.conv2d", b.x["x"], b.const(w1), padding=(1, 1, 1, 1), data_layout="NHWC", kernel_layout="OHWI")
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(np.arange(4, dtype=np.float32)), axis=3))
    p = b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2), layout="NHWC", ceil_mode=True)
    w2 = rng.normal(size=(4, 1, 1, 4)).astype(np.float32)
    q = b.op("nn.conv2d", p, b.const(w2), data_layout="NHWC", kernel_layout="OHWI")
    g = b.done(b.op("clip", b.op("add", p, q), a_min=0.0, a_max=6.0))
    body = partition_graph(g, [Npu()], layout="NHWC").regions[0].body
    assert body is not None
    return body


def test_a_partition_round_trips_with_its_labels(m):
    body = partition(np.random.default_rng(0))
    calls = [n for n in body.nodes if n.op == CALL_OP]
    assert len(calls) == 2
    matches = match_composites(body, {"conv": conv_pattern()})
    blob = GraphBlobWriter("npu", 3, alignment=32).write(body, matches=matches)
    g = m.graph(blob, "npu", 1, 3)
    assert (g["kind"], g["kind_version"], g["alignment"]) == ("npu", 3, 32)
    tensors = g["tensors"]
    by_name = {t["name"]: i for i, t in enumerate(tensors)}
    assert len(by_name) == len(tensors)
    assert g["inputs"] == [by_name["x"]] and g["outputs"] == [by_name[body.outputs[0].name]]
    # every value of the partition, with its dtype, shape and (for constants) its bytes
    values = {v.name: v for v in body.values()}
    for call in calls:
        assert call.body is not None
        values.update({v.name: v for n in call.body.nodes for v in (*n.inputs, *n.outputs)})
    for t in tensors:
        v = values[t["name"]]
        assert t["dtype"] == DTYPE_CODES[v.type.dtype] and t["shape"] == v.type.shape
        if v.const is not None:
            assert t["flags"] == CONSTANT and t["offset"] % 32 == 0
            assert t["data"] == np.ascontiguousarray(v.const).tobytes()
    assert [n["kernel"] for n in g["nodes"]] == ["npu.conv", "nn.max_pool2d", "npu.conv", "add", "clip"]
    conv1, pool, conv2 = g["nodes"][:3]
    assert conv1["source"] == "npu.conv" and conv1["kind"] == 1
    assert [p[:2] for p in conv1["parts"]] == [("conv", "nn.conv2d"), ("bias_add", "nn.bias_add"), ("relu", "nn.relu")]
    assert conv1["parts"][0][2]["padding"] == (1, 1, 1, 1)
    # the composite reads x, then its weights and bias (default kernel); its intermediates are internal
    assert tensors[conv1["inputs"][0]]["name"] == "x"
    assert [tensors[i]["flags"] for i in conv1["inputs"][1:]] == [CONSTANT, CONSTANT]
    assert conv1["value_labels"] == {"bias": conv1["inputs"][2]}
    assert conv1["parts"][2][4] == conv1["outputs"]
    assert all(tensors[i]["flags"] == INTERNAL for p in conv1["parts"][:2] for i in p[4])
    assert pool["kind"] == 0 and pool["attrs"]["ceil_mode"] is True and pool["attrs"]["pool_size"] == (2, 2)
    assert [p[0] for p in conv2["parts"]] == ["conv"] and conv2["value_labels"] == {}
    assert GraphBlobWriter("npu", 3, alignment=32).write(body, matches=matches) == blob  # deterministic
    # the Python decoder reads the same content the C++ reader validated
    py = dump(blob)
    assert (py["version"], py["flags"]) == (1, 0)
    assert {k: py[k] for k in g} == g


def test_a_backend_maps_nodes_to_its_kernels_and_attributes(m):
    body = partition(np.random.default_rng(1))
    packed = Value.constant("packed", np.arange(6, dtype=np.int16).reshape(2, 3))

    def lower(node, labels):
        if node.op == CALL_OP:
            conv = labels["conv"]
            return Kernel(
                "npu_conv",
                {"strides": conv.attrs["strides"], "relu": "relu" in labels, "bias": labels.get("bias"),
                 "window": [conv.attrs["padding"], [1, [2.5, "deep"]]], "scales": np.array([0.5, 0.25]),
                 "none": None, "packed": packed},
                inputs=[node.inputs[0], np.full(3, 7, np.uint8)],
            )  # fmt: skip
        return Kernel("npu_" + node.op.split(".")[-1], {"n": len(node.inputs)})

    blob = GraphBlobWriter("npu", lower=lower).write(body, matches=match_composites(body, {"npu.conv": conv_pattern()}))
    g = m.graph(blob, "npu")
    assert {k: dump(blob)[k] for k in g} == g
    kernels = [n["kernel"] for n in g["nodes"]]
    assert kernels == ["npu_conv", "npu_max_pool2d", "npu_conv", "npu_add", "npu_clip"]
    a = g["nodes"][0]["attrs"]
    t = g["tensors"]
    assert a["strides"] == (1, 1) and a["relu"] is True and a["none"] is None
    assert t[a["bias"]["tensor"]]["data"] == np.arange(4, dtype=np.float32).tobytes()
    assert a["window"] == ((1, 1, 1, 1), (1, (2.5, "deep"))) and a["scales"] == (0.5, 0.25)
    assert t[a["packed"]["tensor"]]["data"] == np.arange(6, dtype="<i2").tobytes()
    assert g["nodes"][2]["attrs"]["relu"] is False and g["nodes"][2]["attrs"]["bias"] is None
    new = t[g["nodes"][0]["inputs"][1]]
    assert new["flags"] == CONSTANT and new["dtype"] == DTYPE_CODES["uint8"] and new["data"] == b"\x07\x07\x07"
    assert g["nodes"][3]["attrs"] == {"n": 2}
    # typed access from C++: what a runtime's create calls
    assert m.query(blob, "npu", 0, -1, "ints", "strides", 2) == [1, 1]
    assert m.query(blob, "npu", 0, -1, "boolean", "relu") is True
    assert m.query(blob, "npu", 0, 0, "string", "data_layout") == "NHWC"
    assert m.query(blob, "npu", 0, -1, "label", "bias") == a["bias"]["tensor"]
    assert m.query(blob, "npu", 0, -1, "label", "relu") == "nn.relu"
    assert m.query(blob, "npu", 2, -1, "label", "relu") == -1


@pytest.mark.parametrize(
    ("method", "key", "n", "message"),
    [
        ("ints", "strides", 3, r"node 0 \(npu_conv\): attribute 'strides' has 2 ints, expected 3"),
        ("integer", "strides", None, r"attribute 'strides' attribute is ints, not int"),
        ("boolean", "missing", None, r"attribute 'missing' is missing"),
        ("string", "relu", None, r"attribute 'relu' attribute is bool, not string"),
    ],
)
def test_typed_attribute_access_names_the_node_and_attribute(m, method, key, n, message):
    body = partition(np.random.default_rng(2))

    def lower(node, labels):
        if node.op == CALL_OP:
            return Kernel("npu_conv", {"strides": (1, 1), "relu": True})
        return Kernel(node.op, node.attrs)

    blob = GraphBlobWriter("npu", lower=lower).write(body)
    with pytest.raises(m.BlobError, match=message) as info:
        m.query(blob, "npu", 0, -1, method, key, n)
    assert info.value.offset is not None and 0 < info.value.offset < len(blob)


def test_quantized_tensors_keep_per_tensor_and_per_channel_parameters(m):
    rng = np.random.default_rng(4)
    b = GraphBuilder(x=TensorType((1, 4, 4, 2), "int8", QuantParams(0.05, -3)))
    w = Value.constant(
        "w", rng.integers(-100, 100, (3, 1, 1, 2)).astype(np.int8), QuantParams([0.1, 0.2, 0.3], [0, 1, -1], axis=0)
    )
    acc = b.op("qnn.conv2d", b.x["x"], w, data_layout="NHWC", kernel_layout="OHWI")
    g = b.done(b.op("qnn.requantize", acc, out_scale=0.5, out_zero_point=1, out_dtype="int8"))
    blob = GraphBlobWriter("q", alignment=1).write(g)
    got = m.graph(blob, "q")
    assert {k: dump(blob)[k] for k in got} == got
    t = {x["name"]: x for x in got["tensors"]}
    axis, scale, zp = t["x"]["quant"]
    assert (axis, zp) == (-1, [-3]) and scale == [pytest.approx(0.05)]
    axis, scale, zp = t["w"]["quant"]
    assert axis == 0 and np.allclose(scale, [0.1, 0.2, 0.3]) and zp == [0, 1, -1]
    assert t["w"]["flags"] == CONSTANT | QUANTIZED and t["w"]["data"] == w.const.tobytes()
    out = t[g.outputs[0].name]
    assert out["dtype"] == DTYPE_CODES["int8"] and out["quant"][0] == -1


def test_the_writer_refuses_what_the_reader_would_refuse():
    body = partition(np.random.default_rng(5))
    with pytest.raises(PartitionError, match=r"kind must be 1\.\.64 bytes"):
        GraphBlobWriter("")
    with pytest.raises(PartitionError, match="alignment must be a power of two in"):
        GraphBlobWriter("k", alignment=8192)
    cases = [
        (lambda n, labels: "npu_conv", "not a Kernel with a name"),
        (lambda n, labels: Kernel("k", {"x": object()}), "object is not an attribute value"),
        (lambda n, labels: Kernel("k", {"x": n.inputs[0]} if n.op == CALL_OP else {}), "must be a constant"),
        (lambda n, labels: Kernel("k", {"x": np.zeros((2, 2))}), "must be 1-D"),
        (lambda n, labels: Kernel("k", {1: 2}), "attribute names must be non-empty strings"),
        (lambda n, labels: Kernel("k", {"deep": [[[[[[[[[1, "a"]]]]]]]]]}), "nested deeper than 8"),
        (lambda n, labels: Kernel("k", {"big": 1 << 63}), "does not fit in a i64"),
        (lambda n, labels: Kernel("k", {}, inputs=[n.outputs[0]]), "not defined before it"),
    ]
    for lower, message in cases:
        with pytest.raises(PartitionError, match=message):
            GraphBlobWriter("npu", lower=lower).write(body)
    call = next(n for n in body.nodes if n.op == CALL_OP)
    other = next(n for n in body.nodes if n.op != CALL_OP)
    with pytest.raises(PartitionError, match=r"label 'conv' names nn\.max_pool2d"):
        GraphBlobWriter("npu").write(body, matches={call: {"conv": other}})


# -- blobs written by hand: what a damaged or hostile blob gets ---------------------------


def raw_blob(
    tensors, inputs, outputs, nodes, *, kind="t", kind_version=1, version=1, flags=0, alignment=8,
    constants=b"", const_offset=None, const_size=None, padding=0,
) -> bytes:  # fmt: skip
    """A graph blob from plain data, so each field can be wrong on purpose.

    tensors: (name, dtype, shape, flags, quant (axis, scales, zps) or None, constant (offset, nbytes) or None);
    nodes: (name, kind, kernel, source, ins, outs, attrs [(key, value)], parts [(label, op, attrs, ins, outs)],
    labels [(label, id)]); an attribute value is None, bool, int, float, str, tuple of ints, ("tensor", id),
    ("list", [values]) or ("tag", n, raw bytes) for a raw tag byte and what follows it.
    """
    t = BlobWriter()
    t.u32(len(tensors))
    for name, dtype, shape, tflags, quant, const in tensors:
        t.string(name)
        t.u8(dtype)
        t.u8(len(shape))
        t.array("i64", shape)
        t.u8(tflags)
        if quant is not None:
            t.i32(quant[0])
            t.counted_array("f32", quant[1])
            t.array("i32", quant[2])
        if const is not None:
            t.u64(const[0])
            t.u64(const[1])
    t.counted_array("u32", inputs)
    t.counted_array("u32", outputs)
    t.u32(len(nodes))

    def value(v):
        if isinstance(v, tuple) and v and v[0] == "tensor":
            t.u8(8)
            t.u32(v[1])
        elif isinstance(v, tuple) and v and v[0] == "list":
            t.u8(7)
            t.u32(len(v[1]))
            for x in v[1]:
                value(x)
        elif isinstance(v, tuple) and v and v[0] == "tag":
            t.u8(v[1])
            t.raw(v[2] if len(v) > 2 else b"")
        elif v is None:
            t.u8(0)
        elif isinstance(v, bool):
            t.u8(1)
            t.u8(int(v))
        elif isinstance(v, int):
            t.u8(2)
            t.i64(v)
        elif isinstance(v, float):
            t.u8(3)
            t.f64(v)
        elif isinstance(v, str):
            t.u8(4)
            t.string(v)
        else:
            t.u8(5)
            t.counted_array("i64", v)

    def attrs(items):
        t.u32(len(items))
        for key, v in items:
            t.string(key)
            value(v)

    for name, kind_, kernel, source, ins, outs, node_attrs, parts, labels in nodes:
        t.string(name)
        t.u8(kind_)
        t.string(kernel)
        t.string(source)
        t.counted_array("u32", ins)
        t.counted_array("u32", outs)
        attrs(node_attrs)
        t.u32(len(parts))
        for label, op, part_attrs, pins, pouts in parts:
            t.string(label)
            t.string(op)
            attrs(part_attrs)
            t.counted_array("u32", pins)
            t.counted_array("u32", pouts)
        t.u32(len(labels))
        for label, tid in labels:
            t.string(label)
            t.u32(tid)
    h = BlobWriter()
    h.magic(b"AGRB")
    h.u32(version)
    h.u32(flags)
    h.string(kind)
    h.u32(kind_version)
    h.u32(alignment)
    header_end = h.tell() + 16
    table_end = header_end + len(t)
    start = table_end + (-table_end % alignment if alignment & (alignment - 1) == 0 and alignment else 0) + padding
    h.u64(start if const_offset is None else const_offset)
    h.u64(len(constants) if const_size is None else const_size)
    return h.getvalue() + t.getvalue() + bytes(start - table_end) + constants


F32 = DTYPE_CODES["float32"]
X = ("x", F32, (2, 3), 0, None, None)
Y = ("y", F32, (2, 3), 0, None, None)
W = ("w", F32, (2,), CONSTANT, None, (0, 8))
INNER = ("i", F32, (2, 3), INTERNAL, None, None)
RELU = ("r", 0, "relu", "nn.relu", [0], [1], [], [], [])
GOOD = raw_blob([X, Y, W], [0], [1], [RELU], constants=bytes(8))


def test_a_hand_written_blob_parses(m):
    g = m.graph(GOOD, "t")
    assert g["nodes"][0]["kernel"] == "relu" and g["tensors"][2]["data"] == bytes(8)


def cblob(nodes):
    """A blob of x, y, a constant w and an internal i, with nodes."""
    return raw_blob([X, Y, W, INNER], [0], [1], nodes, constants=bytes(8))


def composite(parts, labels=(), ins=(0, 2), outs=(1,)):
    return ("c", 1, "k", "t.c", list(ins), list(outs), [], parts, list(labels))


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (raw_blob([X, Y], [0], [1], [RELU], version=2), r"blob offset 4: format version 2 is not supported"),
        (raw_blob([X, Y], [0], [1], [RELU], flags=1), r"blob offset 8: flags must be 0"),
        (raw_blob([X, Y], [0], [1], [RELU], kind="u"), r"blob offset 12: a 'u' graph blob, this runtime reads 't'"),
        (raw_blob([X, Y], [0], [1], [RELU], kind_version=7), r"t version 7 is not supported \(this runtime reads 1..1\)"),
        (raw_blob([X, Y], [0], [1], [RELU], alignment=3), r"alignment 3 is not a power of two"),
        (raw_blob([X, Y], [0], [1], [RELU], const_offset=4), r"constant section at 4 \(\+0 bytes\) is not an aligned section"),
        (raw_blob([X, Y, W], [0], [1], [RELU], constants=bytes(8), const_size=9), r"\(\+9 bytes\): needs \d+ bytes, \d+ left"),
        (raw_blob([X, Y, W], [0], [1], [RELU], constants=bytes(8), const_size=7), r"is not an aligned section ending the"),
        (raw_blob([X, Y], [0], [1], [RELU], padding=8), r"8 unexpected trailing bytes"),
        (raw_blob([X, Y], [0], [1], [RELU], const_offset=8, const_size=None), r"constant section at 8"),
        (raw_blob([("x", 12, (2,), 0, None, None)], [], [], []), r"dtype=12, must be in \[0, 11\]"),
        (raw_blob([("x", F32, (1,) * 9, 0, None, None)], [], [], []), r"rank=9, must be in \[0, 8\]"),
        (raw_blob([("x", F32, (-1,), 0, None, None)], [], [], []), r"dimension=-1, must be in"),
        (raw_blob([("x", F32, (1 << 21, 1 << 21), 0, None, None)], [], [], []), r"has more than 1099511627776 elements"),
        (raw_blob([("x", F32, (2,), 8, None, None)], [], [], []), r"tensor flags=8, must be in \[0, 7\]"),
        (raw_blob([("x", F32, (2,), CONSTANT | INTERNAL, None, (0, 8))], [], [], [], constants=bytes(8)), r"both constant and internal"),
        (raw_blob([("w", F32, (2,), CONSTANT, None, (0, 7))], [], [], [], constants=bytes(8)), r"needs 8 bytes, its constant has 7"),
        (raw_blob([("w", F32, (2,), CONSTANT, None, (4, 8))], [], [], [], constants=bytes(16)), r"constant at 4 \(\+8 bytes\) is not an aligned range"),
        (raw_blob([("w", F32, (2,), CONSTANT, None, (8, 8))], [], [], [], constants=bytes(8)), r"constant at 8 \(\+8 bytes\) is not an aligned range of the 8-byte"),
        (raw_blob([("q", F32, (2,), QUANTIZED, (1, [1.0], [0]), None)], [], [], []), r"quantization axis 1 out of range for rank 1"),
        (raw_blob([("q", F32, (3,), QUANTIZED, (0, [1.0, 1.0], [0, 0]), None)], [], [], []), r"2 quantization scales, expected 3"),
        (raw_blob([("q", F32, (2,), QUANTIZED, (-1, [float("nan")], [0]), None)], [], [], []), r"scale is not finite and > 0"),
        (raw_blob([("q", F32, (2,), QUANTIZED, (-1, [0.0], [0]), None)], [], [], []), r"scale is not finite and > 0"),
        (raw_blob([X, Y], [5], [1], [RELU]), r"graph input id 5 out of range \(2 tensors\)"),
        (raw_blob([X, Y, W], [2], [1], [RELU], constants=bytes(8)), r"graph input 2 is a constant"),
        (raw_blob([X, Y], [0, 0], [1], [RELU]), r"graph input 0 is listed twice"),
        (raw_blob([X, Y], [0], [0], []), r"graph output 0 is also a graph input"),
        (raw_blob([X, Y], [0], [1], []), r"graph output 1 is never written"),
        (raw_blob([X, Y, INNER], [0], [2], []), r"graph output 2 is a composite's internal tensor"),
        (raw_blob([X, Y], [], [1], [RELU]), r"node 'r' \(relu\): reads tensor 0 before it is written"),
        (raw_blob([X, Y], [0], [1], [RELU, RELU]), r"node 'r' \(relu\): writes tensor 1, which is already defined"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "relu", "nn.relu", [0], [9], [], [], [])]), r"node output id 9 out of range"),
        (raw_blob([X, Y], [0], [1], [("r", 2, "relu", "nn.relu", [0], [1], [], [], [])]), r"node kind=2, must be in \[0, 1\]"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "", "nn.relu", [0], [1], [], [], [])]), r"kernel name is empty"),
        (raw_blob([X, Y, INNER], [0], [1], [("r", 0, "relu", "nn.relu", [0], [2], [], [], []), RELU]), r"writes tensor 2, a composite's internal tensor"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "relu", "nn.relu", [0], [1], [], [("a", "nn.relu", [], [0], [1])], [])]), r"an op has no parts"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "k", "s", [0], [1], [("b", 1), ("a", 1)], [], [])]), r"attribute 'a' is out of order or repeated"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "k", "s", [0], [1], [("a", 1), ("a", 2)], [], [])]), r"attribute 'a' is out of order or repeated"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "k", "s", [0], [1], [("a", ("tag", 9))], [], [])]), r"attribute tag=9, must be in \[0, 8\]"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "k", "s", [0], [1], [("a", ("tensor", 0))], [], [])]), r"tensor attribute 0 is not a constant"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "k", "s", [0], [1], [("a", ("tensor", 7))], [], [])]), r"tensor attribute id 7 out of range"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "k", "s", [0], [1], [("a", ("list", [("list", [("list", [1])])]))], [], [])]), r"list attribute nested deeper than 2"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "k", "s", [0], [1], [("a", ("tag", 1, b"\x02"))], [], [])]), r"bool=2, must be in \[0, 1\]"),
        # composites: parts read what is defined, write the node's outputs or internal tensors, once
        (cblob([composite([("a", "nn.conv2d", [], [0, 2], [3]), ("b", "nn.relu", [], [3], [1])])]), None),
        (cblob([composite([("a", "nn.relu", [], [3], [1])])]), r"part 0 \(nn.relu\) reads tensor 3 before it is written"),
        (cblob([composite([("a", "nn.relu", [], [0], [0])])]), r"writes tensor 0, which is not an unwritten output or internal tensor"),
        (cblob([composite([("a", "x", [], [0], [3]), ("b", "y", [], [3], [3]), ("c", "z", [], [3], [1])])]), r"part 1 \(y\) writes tensor 3"),
        (cblob([composite([("a", "nn.relu", [], [0], [3])])]), r"output tensor 1 is written by none of its parts"),
        (cblob([composite([("a", "x", [], [0], [3]), ("a", "y", [], [3], [1])])]), r"label 'a' is used twice"),
        (cblob([composite([("a", "x", [], [0], [1])], labels=[("a", 2)])]), r"label 'a' is used twice"),
        (cblob([composite([("a", "x", [], [0], [1])], labels=[("w", 9)])]), r"labelled tensor id 9 out of range"),
        (cblob([composite([], ins=(3,))]), r"reads tensor 3, a composite's internal tensor"),
        (raw_blob([X, Y], [0], [1], [("r", 0, "relu", "nn.relu", [0], [1], [], [], [("a", 0)])]), r"an op has no labels"),
    ],
)  # fmt: skip
def test_malformed_graph_blobs_are_refused_naming_the_problem(m, blob, message):
    if message is None:
        assert m.graph(blob, "t")["nodes"][0]["kernel"] == "k"
        return
    with pytest.raises(m.BlobError, match=message) as info:
        m.graph(blob, "t", limits={"max_depth": 2})
    assert str(info.value).startswith(f"blob offset {info.value.offset}: ")
    assert 0 <= info.value.offset <= len(blob)


@pytest.mark.parametrize(
    ("limit", "value", "message"),
    [
        ("max_table_bytes", 100, r"^blob offset 25: the tables take 200 bytes, more than the limit 100$"),
        ("max_tensors", 2, r"tensor count=3, at most 2"),
        ("max_nodes", 0, r"node count=1, at most 0"),
        ("max_ids", 0, r"graph input=1, at most 0"),
        ("max_string", 0, r"tensor name: length 1 exceeds 0"),
        ("max_elements", 5, r"tensor 0 'x' has more than 5 elements"),
    ],
)
def test_limits_bound_every_table(m, limit, value, message):
    with pytest.raises(m.BlobError, match=message):
        m.graph(GOOD, "t", limits={limit: value})


def test_every_truncation_of_a_real_blob_is_refused(m):
    body = partition(np.random.default_rng(6))
    blob = GraphBlobWriter("npu", alignment=16).write(body, matches=match_composites(body, {"conv": conv_pattern()}))
    m.graph(blob, "npu")
    for cut in range(len(blob)):
        with pytest.raises(m.BlobError) as info:
            m.graph(blob[:cut], "npu")
        assert info.value.offset is None or info.value.offset <= cut
        # as the conformance kit requires of a runtime: the bytes needed and the bytes left
        stated = shortfall(str(info.value))
        assert stated is not None and stated[0] > stated[1] and stated[1] <= cut, str(info.value)


def test_a_flipped_byte_is_refused_or_parses_consistently(m):
    body = partition(np.random.default_rng(7))
    blob = GraphBlobWriter("npu", alignment=16).write(body, matches=match_composites(body, {"conv": conv_pattern()}))
    rng = np.random.default_rng(8)
    refused = 0
    for _ in range(2000):
        bad = bytearray(blob)
        i = int(rng.integers(0, len(bad)))
        bad[i] ^= 1 << int(rng.integers(0, 8))
        try:
            g = m.graph(bytes(bad), "npu")
        except m.BlobError:
            refused += 1
            continue
        assert len(g["tensors"]) >= len(g["inputs"]) + len(g["outputs"])
    assert refused > 100


NO_LIMITS = {k: 0xFFFFFFFF for k in ("max_tensors", "max_nodes", "max_ids", "max_attrs", "max_list")}
HUGE = (0x80000000, 0xFFFFFFFF)  # a negative int32 read as a count, and -1


def _u32(n: int) -> bytes:
    return n.to_bytes(4, "little")


@pytest.mark.parametrize("count", HUGE)
@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("tensors", r"tensor count=\d+ does not fit in the \d+ bytes left"),
        ("list", r"list=\d+ does not fit in the \d+ bytes left"),
        ("ints", r"ints=\d+ does not fit in the \d+ bytes left"),
        ("floats", r"floats=\d+ does not fit in the \d+ bytes left"),
    ],
)
def test_huge_counts_are_refused_before_anything_is_allocated(m, where, count, message):
    """A count of 2^31 or 2^32 - 1 (a negative int32, or -1, written as a u32) is refused by the bytes left,
    with every configurable limit out of the way: never a failed allocation."""
    if where == "tensors":
        blob = bytearray(GOOD)
        at = GOOD.index(_u32(3) + _u32(1) + b"x")  # n_tensors = 3, then the first name's length and byte
        blob[at : at + 4] = _u32(count)
        blob = bytes(blob)
    else:
        tag = {"list": 7, "ints": 5, "floats": 6}[where]
        node = ("r", 0, "k", "s", [0], [1], [("a", ("tag", tag, _u32(count)))], [], [])
        blob = raw_blob([X, Y], [0], [1], [node])
    with pytest.raises(m.BlobError, match=message):
        m.graph(blob, "t", limits=NO_LIMITS)
