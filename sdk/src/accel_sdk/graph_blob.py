"""The graph blob: one partition as a graph of kernels, for any backend that wants one.

A backend whose runtime walks a graph of kernels (the shape of TVM's
JSONSerializer/JSONRuntimeBase, which carry ACL, DNNL and TensorRT) writes its
partitions with :class:`GraphBlobWriter` and reads them in C++ with
``accel_sdk/graph_blob.hpp`` (``accel_sdk::GraphBlob::parse``), which checks every
id, count, offset and size against limits before the runtime sees anything. The
backend keeps one decision for itself: which kernel, with which attributes, each
op or composite becomes (its ``lower`` function).

Format (version 1; every number little-endian, strings are a u32 byte length and
UTF-8 bytes, written with :class:`accel_sdk.blob.BlobWriter`)::

    "AGRB" u32 version=1 u32 flags=0
    string kind, u32 kind_version        the backend's name for its flavour and its own schema version
    u32 alignment                        of the constant section and of each constant (a power of two <= 4096)
    u64 constants_offset, u64 constants_size   the section, a multiple of alignment, runs to the end of the blob
    u32 n_tensors, per tensor:
        string name, u8 dtype (accel_dtype), u8 rank, rank x i64 dims,
        u8 flags (1 constant, 2 quantized, 4 internal: an intermediate inside a composite)
        quantized: i32 axis (-1: per tensor), u32 n, n x f32 scale, n x i32 zero point
        constant:  u64 offset (in the section, a multiple of alignment), u64 nbytes
    u32 n_inputs,  n x u32 tensor id      graph inputs
    u32 n_outputs, n x u32 tensor id      graph outputs
    u32 n_nodes, per node (in an order where every input is defined before use):
        string name, u8 kind (0 op, 1 composite), string kernel, string source (IR op or composite name)
        u32 n, n x u32 input ids; u32 n, n x u32 output ids; attributes
        u32 n_parts, per part (a composite's body nodes, producers first):
            string label ("" when the pattern gave the node no label), string op, attributes,
            u32 n, n x u32 input ids; u32 n, n x u32 output ids
        u32 n_value_labels, per label: string label, u32 tensor id
    zero bytes up to constants_offset, then the constant section
    attributes: u32 n, per attribute: string key, value
    value: u8 tag, then 0 none | 1 bool (u8 0/1) | 2 int (i64) | 3 float (f64) | 4 string
           | 5 ints (u32 n, n x i64) | 6 floats (u32 n, n x f64) | 7 list (u32 n, n values) | 8 tensor (u32 id)

Writing a partition, in a backend::

    from accel_sdk.graph_blob import GraphBlobWriter, Kernel

    def lower(node, labels):
        if node.op == "call":               # a composite: labels are its pattern's labels
            conv = labels["conv"]
            return Kernel("mynpu_conv", {"strides": conv.attrs["strides"], "relu": "relu" in labels})
        return Kernel(node.op.replace("nn.", "mynpu_"), node.attrs)

    WRITER = GraphBlobWriter("mynpu", 1, lower=lower)

    class MyBackend(Backend):
        def serialize(self, graph):
            return WRITER.write(graph)     # write(graph, matches={call: match}) with each composite's Match

and reading it (C++, in the runtime's ``create``)::

    accel_sdk::GraphBlob g = accel_sdk::GraphBlob::parse(blob, {"mynpu", 1, 1});
    for (const auto& node : g.nodes()) {
      if (node.kernel == "mynpu_conv") { auto s = node.attrs.ints("strides", 2); bool relu = node.attrs.boolean("relu"); }
    }

Without ``lower`` an op keeps its IR name and attributes and a composite becomes a
kernel named after it (``mynpu.conv2d``) with no attributes, reading its inputs
and then its body's constants; its parts carry the whole body either way.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from accel.abi import MAX_RANK, dtype_code
from accel.errors import PartitionError
from accel.ir import CALL_OP, Graph, Node, TensorType, Value
from accel_sdk.blob import BlobWriter

MAGIC = b"AGRB"
VERSION = 1

#: Tensor flags.
CONSTANT, QUANTIZED, INTERNAL = 1, 2, 4
#: Node kinds.
OP, COMPOSITE = 0, 1
#: Attribute value tags.
NONE, BOOL, INT, FLOAT, STRING, INTS, FLOATS, LIST, TENSOR = range(9)

#: Nesting of list attributes the C++ reader accepts by default (``GraphBlob::Limits::max_depth``).
MAX_DEPTH = 8

Labels = Mapping[str, "Node | Value"]


@dataclass(frozen=True)
class Kernel:
    """What one op or composite becomes in the blob: the backend's kernel name and attributes.

    ``inputs`` replaces the node's inputs (``None``: keep them); an entry may be a
    :class:`~accel.ir.Value` of the partition or a new constant (a numpy array, or a
    ``Value.constant(...)`` to give it a name or quantization), for weights the
    backend repacks. An attribute value may be None, a bool, int, float, str, a
    sequence of them (nested up to :data:`MAX_DEPTH`), a 1-D numpy array, or a
    constant ``Value`` (written as a tensor id).
    """

    name: str
    attrs: Mapping[str, Any] = field(default_factory=dict)
    inputs: Sequence[Value | np.ndarray] | None = None


#: ``lower(node, labels) -> Kernel``: labels are a composite's pattern labels (empty for an op).
Lower = Callable[[Node, Labels], Kernel]


def default_kernel(node: Node, labels: Labels) -> Kernel:
    """An op keeps its IR name, attributes and inputs. A composite is named after its pattern,
    has no attributes, and reads its inputs and then the constants of its body (in first-use order)."""
    if node.op == CALL_OP:
        return Kernel(str(node.attrs["composite"]), {}, [*node.inputs, *composite_constants(node)])
    return Kernel(node.op, node.attrs)


def composite_constants(call: Node) -> list[Value]:
    """The distinct constants a composite's body reads, in first-use order."""
    seen: dict[int, Value] = {}
    for n in call.body.nodes if call.body is not None else ():
        for v in n.inputs:
            if v.const is not None:
                seen.setdefault(id(v), v)
    return list(seen.values())


def labels_of(match: Any) -> Labels:
    """The label → node/value map of a pattern ``Match`` (its ``bindings``) or of a plain mapping."""
    if match is None:
        return MappingProxyType({})
    bindings = getattr(match, "bindings", match)
    if not isinstance(bindings, Mapping):
        raise PartitionError(f"a composite's match must be a Match or a label mapping, got {type(match).__name__}")
    return MappingProxyType(dict(bindings))


def match_composites(graph: Graph, patterns: Mapping[str, Any]) -> dict[Node, Any]:
    """Each composite call's ``Match``, found again by matching its pattern on its body.

    ``patterns`` maps a composite name (``"mynpu.conv2d"``, or the part after the
    backend's name, ``"conv2d"``) to the pattern of its table entry. For a
    serializer that is handed the partition alone: ``write(graph,
    matches=match_composites(graph, {"conv2d": conv2d_pattern()}))``.
    """
    out: dict[Node, Any] = {}
    for node in graph.nodes:
        if node.op != CALL_OP or node.body is None or "composite" not in node.attrs:
            continue
        name = str(node.attrs["composite"])
        pattern = patterns.get(name, patterns.get(name.partition(".")[2]))
        if pattern is None or not node.body.nodes:
            continue
        match = pattern.match(node.body.nodes[-1], node.body)
        if match is None:
            raise PartitionError(f"graph blob: composite {node.name!r} ({name}) does not match its own pattern")
        out[node] = match
    return out


class GraphBlobWriter:
    """Writes partitions as graph blobs of one backend flavour (``kind``, ``kind_version``)."""

    def __init__(self, kind: str, kind_version: int = 1, *, lower: Lower | None = None, alignment: int = 64):
        if not kind or len(kind.encode("utf-8")) > 64:
            raise PartitionError(f"graph blob kind must be 1..64 bytes, got {kind!r}")
        if not isinstance(alignment, int) or not 1 <= alignment <= 4096 or alignment & (alignment - 1):
            raise PartitionError(f"graph blob alignment must be a power of two in [1, 4096], got {alignment!r}")
        self.kind = kind
        self.kind_version = kind_version
        self.lower: Lower = lower or default_kernel
        self.alignment = alignment

    def write(self, graph: Graph, *, matches: Mapping[Node, Any] | None = None) -> bytes:
        """The blob of one partition body: graph inputs and outputs, ops and composite calls.

        ``matches`` maps a composite call node to its pattern ``Match`` (or a plain
        label → node/value mapping): its labels name the composite's parts and are
        handed to ``lower``. The same graph always gives the same bytes.
        """
        return _Encoder(self, graph, matches or {}).encode()


class _Tensors:
    """Tensor numbering (in first-met order) and the tensor table."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.records: list[tuple[str, TensorType, int]] = []  # name, type, flags
        self.constants: list[tuple[int, bytes]] = []  # tensor id, data
        self.keep: list[Any] = []  # keeps the objects whose id() is a key alive

    def add(self, v: Value, flags: int = 0) -> int:
        tid = self.ids.get(id(v))
        if tid is not None:
            return tid
        tid = self.ids[id(v)] = len(self.records)
        self.keep.append(v)
        if v.const is not None:
            flags |= CONSTANT
            self.constants.append((tid, np.ascontiguousarray(v.const, v.type.np_dtype.newbyteorder("<")).tobytes()))
        if v.type.quant is not None:
            flags |= QUANTIZED
        self.records.append((v.name, v.type, flags))
        return tid

    def alias(self, v: Value, tid: int) -> None:
        self.ids[id(v)] = tid
        self.keep.append(v)


class _Encoder:
    def __init__(self, spec: GraphBlobWriter, graph: Graph, matches: Mapping[Node, Any]):
        self.spec = spec
        self.graph = graph
        self.matches = matches
        self.t = _Tensors()
        self.nodes = BlobWriter()
        self.n_nodes = 0
        self.new_constants = 0

    # -- tensors -------------------------------------------------------------------
    def known(self, v: Value, where: str) -> int:
        tid = self.t.ids.get(id(v))
        if tid is not None:
            return tid
        if v.const is not None:
            return self.t.add(v)
        raise PartitionError(f"graph blob: {where} reads %{v.name}, which is not defined before it")

    def operand(self, x: Value | np.ndarray, where: str) -> int:
        if isinstance(x, np.ndarray):
            self.new_constants += 1
            return self.t.add(Value.constant(f"{where}.const{self.new_constants}", x))
        if not isinstance(x, Value):
            raise PartitionError(f"graph blob: {where}: an input must be a Value or a numpy array, got {x!r}")
        return self.known(x, where)

    # -- attributes ----------------------------------------------------------------
    def attrs(self, w: BlobWriter, attrs: Mapping[str, Any], where: str) -> None:
        if not isinstance(attrs, Mapping):
            raise PartitionError(f"graph blob: {where}: attributes must be a mapping, got {type(attrs).__name__}")
        w.u32(len(attrs))
        for key in sorted(attrs):
            if not isinstance(key, str) or not key:
                raise PartitionError(f"graph blob: {where}: attribute names must be non-empty strings, got {key!r}")
            w.string(key)
            self.value(w, attrs[key], f"{where} attribute {key!r}", 1)

    def value(self, w: BlobWriter, v: Any, where: str, depth: int) -> None:
        if v is None:
            w.u8(NONE)
        elif isinstance(v, (bool, np.bool_)):
            w.u8(BOOL)
            w.u8(int(bool(v)))
        elif isinstance(v, (int, np.integer)):
            w.u8(INT)
            w.i64(int(v), where)
        elif isinstance(v, (float, np.floating)):
            w.u8(FLOAT)
            w.f64(float(v), where)
        elif isinstance(v, str):
            w.u8(STRING)
            w.string(v, where)
        elif isinstance(v, Value):
            if v.const is None:
                raise PartitionError(f"graph blob: {where}: a tensor attribute must be a constant, %{v.name} is not")
            w.u8(TENSOR)
            w.u32(self.t.add(v))
        elif isinstance(v, (np.ndarray, list, tuple)):
            if isinstance(v, np.ndarray):
                if v.ndim != 1:
                    raise PartitionError(f"graph blob: {where}: an array attribute must be 1-D (use a constant Value)")
                v = v.tolist()
            if v and all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in v):
                w.u8(INTS)
                w.counted_array("i64", [int(x) for x in v], where)
            elif v and all(isinstance(x, (float, np.floating)) for x in v):
                w.u8(FLOATS)
                w.counted_array("f64", [float(x) for x in v], where)
            else:
                if depth > MAX_DEPTH:
                    raise PartitionError(f"graph blob: {where}: lists nested deeper than {MAX_DEPTH}")
                w.u8(LIST)
                w.u32(len(v))
                for x in v:
                    self.value(w, x, where, depth + 1)
        else:
            raise PartitionError(f"graph blob: {where}: {type(v).__name__} is not an attribute value")

    # -- nodes ---------------------------------------------------------------------
    def node(self, node: Node) -> None:
        w = self.nodes
        where = f"{node.op} {node.name!r}"
        composite = node.op == CALL_OP
        if composite and (node.body is None or "composite" not in node.attrs):
            raise PartitionError(f"graph blob: {where} is a call but not a composite")
        labels = labels_of(self.matches.get(node)) if composite else MappingProxyType({})
        kernel = self.spec.lower(node, labels)
        if not isinstance(kernel, Kernel) or not kernel.name:
            raise PartitionError(f"graph blob: lowering {where} gave {kernel!r}, not a Kernel with a name")
        ins = [self.operand(x, where) for x in (node.inputs if kernel.inputs is None else kernel.inputs)]
        outs = []
        for v in node.outputs:
            if id(v) in self.t.ids:
                raise PartitionError(f"graph blob: {where} writes %{v.name}, which is already defined")
            outs.append(self.t.add(v))
        parts = BlobWriter()
        n_parts = self.parts(parts, node, labels, where) if composite else 0
        w.string(node.name)
        w.u8(COMPOSITE if composite else OP)
        w.string(kernel.name)
        w.string(str(node.attrs["composite"]) if composite else node.op)
        w.counted_array("u32", ins)
        w.counted_array("u32", outs)
        self.attrs(w, kernel.attrs, where)
        w.u32(n_parts)
        w.raw(parts.getvalue())
        self.n_nodes += 1
        # the value labels are written after the parts: they may name tensors the parts defined
        self.value_labels(w, node, labels, where)

    def parts(self, w: BlobWriter, call: Node, labels: Labels, where: str) -> int:
        body = call.body
        assert body is not None
        for p, a in zip(body.inputs, call.inputs):
            self.t.alias(p, self.known(a, where))
        # the composite's outputs: the call's own outputs, numbered when the call is
        outer = {id(o): v for o, v in zip(body.outputs, call.outputs)}
        label_of = {id(n): label for label, n in labels.items() if isinstance(n, Node)}
        members = {id(n) for n in body.nodes}
        for label, n in labels.items():
            if isinstance(n, Node) and id(n) not in members:
                raise PartitionError(
                    f"graph blob: {where}: label {label!r} names {n.op} {n.name!r}, not in the composite"
                )
        for n in body.nodes:
            w.string(label_of.get(id(n), ""))
            w.string(n.op)
            self.attrs(w, n.attrs, f"{where} part {n.op} {n.name!r}")
            w.counted_array("u32", [self.known(v, f"{where} part {n.name!r}") for v in n.inputs])
            out_ids = []
            for v in n.outputs:
                if id(v) in outer:
                    tid = self.t.ids[id(outer[id(v)])]
                    self.t.alias(v, tid)
                else:
                    tid = self.t.add(v, INTERNAL)
                out_ids.append(tid)
            w.counted_array("u32", out_ids)
        return len(body.nodes)

    def value_labels(self, w: BlobWriter, call: Node, labels: Labels, where: str) -> None:
        values = [(label, v) for label, v in labels.items() if isinstance(v, Value)]
        w.u32(len(values))
        by_name = {v.name: v for v in call.inputs}
        for label, v in sorted(values, key=lambda lv: lv[0]):
            tid = self.t.ids.get(id(v))
            if tid is None and v.const is not None:
                tid = self.t.add(v)
            if tid is None and v.name in by_name:  # an outer value, seen by the body through a parameter
                tid = self.t.ids.get(id(by_name[v.name]))
            if tid is None:
                raise PartitionError(f"graph blob: {where}: label {label!r} names %{v.name}, not a tensor of the blob")
            w.string(label)
            w.u32(tid)

    # -- the blob ------------------------------------------------------------------
    def encode(self) -> bytes:
        g = self.graph
        inputs = []
        for v in g.inputs:
            if id(v) in self.t.ids:
                raise PartitionError(f"graph blob: graph input %{v.name} is listed twice")
            inputs.append(self.t.add(v))
        for node in g.nodes:
            self.node(node)
        outputs = [self.known(v, "the graph's outputs") for v in g.outputs]
        for v, tid in zip(g.outputs, outputs):
            if tid in inputs or v.const is not None or len(set(outputs)) != len(outputs):
                raise PartitionError(f"graph blob: graph output %{v.name} is a graph input, a constant or listed twice")
        t = self.t
        if len(t.records) > (1 << 32) - 1:
            raise PartitionError("graph blob: more than 2^32 - 1 tensors")
        # constant section: each constant at a multiple of the alignment
        a = self.spec.alignment
        offsets: dict[int, tuple[int, int]] = {}
        section = bytearray()
        for tid, data in t.constants:
            section += bytes(-len(section) % a)
            offsets[tid] = (len(section), len(data))
            section += data
        tables = BlobWriter()
        tables.u32(len(t.records))
        for tid, (name, ty, flags) in enumerate(t.records):
            if ty.rank > MAX_RANK:
                raise PartitionError(f"graph blob: %{name} has rank {ty.rank}, more than {MAX_RANK}")
            tables.string(name)
            tables.u8(dtype_code(ty.dtype))
            tables.u8(ty.rank)
            tables.array("i64", ty.shape)
            tables.u8(flags)
            if flags & QUANTIZED:
                q = ty.quant
                assert q is not None
                if q.axis is not None and not (0 <= q.axis < ty.rank and q.scale.size == ty.shape[q.axis]):
                    raise PartitionError(f"graph blob: %{name} ({ty}) has per-axis quantization that does not fit it")
                tables.i32(-1 if q.axis is None else q.axis, f"%{name} quantization axis")
                scale = np.asarray(q.scale, np.float32).reshape(-1)
                if not all(math.isfinite(s) and s > 0 for s in scale.tolist()):
                    raise PartitionError(f"graph blob: %{name} has a scale that is not finite and positive")
                tables.counted_array("f32", scale)
                tables.array("i32", np.asarray(q.zero_point).reshape(-1), f"%{name} zero point")
            if flags & CONSTANT:
                off, size = offsets[tid]
                tables.u64(off)
                tables.u64(size)
        tables.counted_array("u32", inputs)
        tables.counted_array("u32", outputs)
        tables.u32(self.n_nodes)
        tables.raw(self.nodes.getvalue())

        out = BlobWriter()
        out.magic(MAGIC)
        out.u32(VERSION)
        out.u32(0)
        out.string(self.spec.kind)
        out.u32(self.spec.kind_version, "kind_version")
        out.u32(a)
        at = out.reserve("u64")
        out.u64(len(section))
        out.raw(tables.getvalue())
        out.align(a)
        out.patch(at, "u64", out.tell())
        out.raw(section)
        return out.getvalue()


class _Cursor:
    """A little-endian cursor for :func:`dump` (PartitionError past the end)."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise PartitionError(f"graph blob offset {self.pos}: needs {n} bytes, {len(self.data) - self.pos} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str) -> Any:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def array(self, fmt: str, n: int) -> list[Any]:
        return list(struct.unpack(f"<{n}{fmt}", self.take(n * struct.calcsize(fmt))))

    def string(self) -> str:
        return self.take(self.scalar("I")).decode("utf-8", "replace")


def dump(blob: bytes) -> dict[str, Any]:
    """A graph blob as plain Python data, for reading one by eye or in a test.

    It decodes; it does not validate as ``GraphBlob::parse`` does (a runtime must
    parse in C++). Tensors are dicts (``name``, ``dtype`` code, ``shape``, ``flags``,
    ``quant`` as (axis, scales, zero points), ``offset`` and ``data`` for constants);
    nodes have ``kernel``, ``source``, ``inputs``, ``outputs``, ``attrs``, ``parts``
    as (label, op, attrs, inputs, outputs) and ``value_labels``. Ints lists are tuples;
    a tensor attribute is ``{"tensor": id}``.
    """
    c = _Cursor(bytes(blob))
    if c.take(4) != MAGIC:
        raise PartitionError("not a graph blob (bad magic)")
    out: dict[str, Any] = {"version": c.scalar("I"), "flags": c.scalar("I"), "kind": c.string()}
    out["kind_version"], out["alignment"] = c.scalar("I"), c.scalar("I")
    const_offset, _ = c.scalar("Q"), c.scalar("Q")
    tensors = []
    for _ in range(c.scalar("I")):
        t: dict[str, Any] = {"name": c.string(), "dtype": c.scalar("B")}
        t["shape"] = tuple(c.array("q", c.scalar("B")))
        t["flags"] = c.scalar("B")
        if t["flags"] & QUANTIZED:
            axis, n = c.scalar("i"), c.scalar("I")
            t["quant"] = (axis, c.array("f", n), c.array("i", n))
        if t["flags"] & CONSTANT:
            off, size = c.scalar("Q"), c.scalar("Q")
            t["offset"] = const_offset + off
            t["data"] = bytes(blob[const_offset + off : const_offset + off + size])
        tensors.append(t)
    out["tensors"] = tensors
    out["inputs"] = c.array("I", c.scalar("I"))
    out["outputs"] = c.array("I", c.scalar("I"))

    def value() -> Any:
        tag = c.scalar("B")
        readers: dict[int, Callable[[], Any]] = {
            NONE: lambda: None,
            BOOL: lambda: bool(c.scalar("B")),
            INT: lambda: c.scalar("q"),
            FLOAT: lambda: c.scalar("d"),
            STRING: c.string,
            INTS: lambda: tuple(c.array("q", c.scalar("I"))),
            FLOATS: lambda: tuple(c.array("d", c.scalar("I"))),
            LIST: lambda: tuple(value() for _ in range(c.scalar("I"))),
            TENSOR: lambda: {"tensor": c.scalar("I")},
        }
        if tag not in readers:
            raise PartitionError(f"graph blob offset {c.pos - 1}: attribute tag {tag}")
        return readers[tag]()

    def attrs() -> dict[str, Any]:
        return {c.string(): value() for _ in range(c.scalar("I"))}

    nodes = []
    for _ in range(c.scalar("I")):
        node: dict[str, Any] = {"name": c.string(), "kind": c.scalar("B"), "kernel": c.string(), "source": c.string()}
        node["inputs"] = c.array("I", c.scalar("I"))
        node["outputs"] = c.array("I", c.scalar("I"))
        node["attrs"] = attrs()
        node["parts"] = [
            (c.string(), c.string(), attrs(), c.array("I", c.scalar("I")), c.array("I", c.scalar("I")))
            for _ in range(c.scalar("I"))
        ]
        node["value_labels"] = {c.string(): c.scalar("I") for _ in range(c.scalar("I"))}
        nodes.append(node)
    out["nodes"] = nodes
    return out


__all__ = [
    "MAGIC",
    "MAX_DEPTH",
    "VERSION",
    "GraphBlobWriter",
    "Kernel",
    "Labels",
    "Lower",
    "composite_constants",
    "default_kernel",
    "dump",
    "labels_of",
    "match_composites",
]
