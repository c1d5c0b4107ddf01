"""ONNX → IR.

:func:`import_model` parses an ONNX model (path, bytes or ``onnx.ModelProto``)
and builds an :class:`accel.ir.Graph` with static shapes:

- the model is refused with a one-line :class:`ModelError` when it is not a
  valid ModelProto (empty, truncated, garbage, no graph, no opset);
- external tensor data is loaded by :mod:`accel.frontend.external_data`,
  confined to the model's folder;
- initializers become constants; symbolic input dimensions come from
  ``input_shapes`` (an unknown leading batch dimension defaults to 1);
- each ONNX node maps to one or a few IR ops (see ``docs/ops.md``). Shape
  computations whose inputs are all constant (Shape → Gather → Concat →
  Reshape ...) are evaluated at import, so the graph only keeps the work that
  depends on run-time data. A ``DequantizeLinear`` of a constant stays a
  ``qnn.dequantize`` node on a quantized constant, so a later pass can turn
  DQ → op → Q groups into qnn ops;
- an op or a feature accel cannot express is refused with
  :class:`UnsupportedOpError` naming the op, its domain, the opset and the node.

Value names are the ONNX tensor names; values created by a decomposition are
named after the ONNX tensor they help compute (``y/reshape``).

This module is the importer: loading, attribute access (:class:`_Attrs`),
:class:`_Importer` (names, values, small builders, operand access, the node
loop), the handler registry (``_op``) and the entry points. The op handlers
live in modules by op family, as the IR ops do in :mod:`accel.ops`:
:mod:`.elementwise`, :mod:`.nn`, :mod:`.tensor` and :mod:`.qnn`. They import
what they need from this module, which imports them at its end, so importing
``accel.frontend.onnx`` registers every handler. The budgets
``MAX_FOLD_BYTES`` and ``MAX_MODEL_FILE_BYTES`` are read as attributes of this
module, where a caller may lower them.
"""

from __future__ import annotations

import builtins
import difflib
import itertools
import operator
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from types import MappingProxyType
from typing import Any, overload

import numpy as np
import onnx
from onnx import AttributeProto, ModelProto, NodeProto, TensorProto, numpy_helper

from accel.errors import AccelError, ExternalDataError, GraphError, InputError, ModelError, UnsupportedOpError
from accel.files import read_regular
from accel.frontend.external_data import load_external_data, scan_graph, subgraph_depth
from accel.ir import (
    MAX_ELEMENTS,
    Graph,
    Node,
    QuantParams,
    TensorType,
    Value,
    collector_paused,
    stable_topological_order,
)
from accel.limits import MAX_FOLD_BYTES, check_depth, fmt_bytes
from accel.ops.registry import OpContext, Qdq, get_op, infer_node_types
from accel.tensor_types import np_dtype_name

__all__ = [
    "FOLD_ONLY_OPS",
    "MAX_OPSET",
    "MIN_OPSET",
    "SUPPORTED_OPS",
    "ConstantOperandRequired",
    "describe_fixed_dims",
    "import_model",
    "load_model_proto",
    "symbolic_input_dims",
]

#: Oldest and newest opset of the default ONNX domain the frontend knows.
MIN_OPSET = 7
MAX_OPSET = 28

_ONNX_DTYPES: dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.DOUBLE: "float64",
    TensorProto.FLOAT16: "float16",
    TensorProto.INT8: "int8",
    TensorProto.UINT8: "uint8",
    TensorProto.INT16: "int16",
    TensorProto.UINT16: "uint16",
    TensorProto.INT32: "int32",
    TensorProto.UINT32: "uint32",
    TensorProto.INT64: "int64",
    TensorProto.UINT64: "uint64",
    TensorProto.BOOL: "bool",
}
_FLOATS = ("float16", "float32", "float64")
_ITEMSIZES = {name: np.dtype(name).itemsize for name in _ONNX_DTYPES.values()}
#: ONNX keeps raw data little-endian: on such a machine it is read as it is
_RAW_LITTLE_ENDIAN = sys.byteorder == "little"


class ConstantOperandRequired(UnsupportedOpError):
    """An operand that fixes a shape or a parameter (a Reshape's shape, a Resize's
    sizes, quantization scales ...) is computed at run time; the IR is static.

    ``tensor`` is the ONNX name of that operand, so a caller that knows its
    value (e.g. a test harness) can bind it as an initializer and retry.
    """

    def __init__(self, message: str, tensor: str):
        super().__init__(message)
        self.tensor = tensor


# ---------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------


def _parse(data: bytes, what: str) -> ModelProto:
    if len(data) == 0:
        raise ModelError(f"{what} is empty: not an ONNX model")
    if data[:4] == b"PK\x03\x04":  # a zip: perhaps an artifact given where a model was expected
        from accel.artifact import is_artifact

        if is_artifact(data):
            raise ModelError(
                f"{what} is a compiled accel artifact, not an ONNX model: run it with `accel run` "
                "(accel.load() in Python) or look inside with `accel inspect`; compile the original ONNX model"
            )
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError or RuntimeError by backend
        raise ModelError(f"{what} is not a valid ONNX model (truncated or corrupt protobuf: {exc})") from None
    return proto


#: Largest model file read: what one protobuf message can hold (larger models keep their weights as external data).
MAX_MODEL_FILE_BYTES = (2 << 30) - 1


def read_model_file(path: Path) -> bytes:
    """The bytes of a model file: a regular file no larger than a protobuf can be (:mod:`accel.files`)."""
    return read_regular(
        path,
        f"model file {str(path)!r}",
        ModelError,
        limit=MAX_MODEL_FILE_BYTES,
        why="a protobuf message can hold (large models keep their weights as external data)",
    )


def load_model_proto(
    model: str | os.PathLike[str] | bytes | bytearray | memoryview | ModelProto,
    *,
    base_dir: str | os.PathLike[str] | None = None,
) -> ModelProto:
    """Parse and check the container; inline external data. Returns a private copy."""
    if isinstance(model, ModelProto):
        what = "the ModelProto"
        if model.HasField("graph"):  # a file's nesting is bounded by the parser; a message's is not
            check_depth(subgraph_depth(model.graph), what, ModelError)
        proto = ModelProto()
        try:
            proto.CopyFrom(model)
        except Exception as exc:  # protobuf refuses what it cannot copy (DecodeError and the like)
            raise ModelError(f"{what} cannot be copied ({type(exc).__name__}: {exc})") from None
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "the model bytes")
        what = "the model bytes"
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        what = f"{str(path)!r}"
        data = read_model_file(path)
        proto = _parse(data, f"model file {what}")
        if base_dir is None:
            base_dir = path.resolve().parent
    else:
        raise ModelError(f"cannot import a {type(model).__name__}: pass a path, bytes or an onnx.ModelProto")

    if not proto.HasField("graph"):
        raise ModelError(f"{what} has no graph: not an ONNX model, or a truncated one")
    depth, graph_tensors = scan_graph(proto.graph)
    check_depth(depth, what, ModelError)
    if proto.ir_version <= 0:
        raise ModelError(f"{what} has no ir_version: not an ONNX model, or a corrupt one")
    if not any(op.domain in ("", "ai.onnx") for op in proto.opset_import):
        raise ModelError(f"{what} imports no opset of the default ONNX domain (truncated or corrupt model?)")
    load_external_data(proto, base_dir, graph_tensors=graph_tensors)
    return proto


# ---------------------------------------------------------------------------------
# attribute access
# ---------------------------------------------------------------------------------


_NO_ATTRIBUTES: Mapping[str, AttributeProto] = MappingProxyType({})
_ATTR_INT = AttributeProto.INT
_ATTR_INTS = AttributeProto.INTS
_ATTR_FLOAT = AttributeProto.FLOAT
_ATTR_STRING = AttributeProto.STRING


class _Attrs:
    """A node's attributes by name, decoded (strings as str).

    Its methods ``int``, ``float`` and ``str`` shadow the builtins in the class
    body, so annotations there name ``builtins.int`` and so on.
    """

    __slots__ = ("label", "_by_name")

    def __init__(self, node: NodeProto, label: str):
        self.label = label
        attributes = node.attribute
        if not attributes:  # most nodes of a large model (activations, adds) have none
            self._by_name = _NO_ATTRIBUTES
            return
        by_name: dict[str, AttributeProto] = {}
        for attr in attributes:
            name = attr.name
            if name in by_name:
                raise ModelError(f"node {label}: attribute {name!r} is given twice")
            by_name[name] = attr
        self._by_name = by_name

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def get(self, name: str, default: Any = None) -> Any:
        attr = self._by_name.get(name)
        if attr is None:
            return default
        if attr.ref_attr_name:
            raise UnsupportedOpError(f"node {self.label}: attribute {name!r} refers to a function attribute")
        # the common kinds read straight from their field (as onnx.helper.get_attribute_value does)
        kind = attr.type
        if kind == _ATTR_INT:
            return attr.i
        if kind == _ATTR_INTS:
            return list(attr.ints)
        if kind == _ATTR_FLOAT:
            return attr.f
        if kind == _ATTR_STRING:
            return attr.s.decode("utf-8", "replace")
        value = onnx.helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, list) and value and isinstance(value[0], bytes):
            return [v.decode("utf-8", "replace") for v in value]
        return value

    def int(self, name: builtins.str, default: builtins.int | None = None) -> builtins.int:
        attr = self._by_name.get(name)
        if attr is not None and attr.type == _ATTR_INT and not attr.ref_attr_name:
            return attr.i
        v = self.get(name, default)
        if not isinstance(v, (int, np.integer)):
            raise ModelError(f"node {self.label}: attribute {name!r} must be an integer, got {v!r}")
        return int(v)

    def float(self, name: builtins.str, default: builtins.float | None = None) -> builtins.float:
        v = self.get(name, default)
        if not isinstance(v, (int, float, np.number)):
            raise ModelError(f"node {self.label}: attribute {name!r} must be a number, got {v!r}")
        return float(v)

    @overload
    def ints(self, name: builtins.str) -> list[builtins.int] | None: ...
    @overload
    def ints(self, name: builtins.str, default: Sequence[builtins.int]) -> list[builtins.int]: ...

    def ints(self, name: builtins.str, default: Sequence[builtins.int] | None = None) -> list[builtins.int] | None:
        """The integer list ``name``, else a copy of ``default`` (``None`` when neither is given)."""
        attr = self._by_name.get(name)
        if attr is not None and attr.type == _ATTR_INTS and not attr.ref_attr_name:
            return list(attr.ints)
        v = self.get(name, None)
        if v is None:
            return None if default is None else list(default)
        if not isinstance(v, (list, tuple)) or not all(isinstance(i, (int, np.integer)) for i in v):
            raise ModelError(f"node {self.label}: attribute {name!r} must be a list of integers, got {v!r}")
        return [int(i) for i in v]

    def str(self, name: builtins.str, default: builtins.str | None = None) -> builtins.str:
        v = self.get(name, default)
        if not isinstance(v, str):
            raise ModelError(f"node {self.label}: attribute {name!r} must be a string, got {v!r}")
        return v


# ---------------------------------------------------------------------------------
# the importer
# ---------------------------------------------------------------------------------

Handler = Callable[["_Importer", NodeProto, _Attrs, list], list]
_HANDLERS: dict[str, Handler] = {}


def _op(*names: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for n in names:
            _HANDLERS[n] = fn
        return fn

    return deco


def _dtype(elem_type: int, what: str) -> str:
    name = _ONNX_DTYPES.get(elem_type)
    if name is not None:
        return name
    if elem_type == TensorProto.UNDEFINED:
        raise ModelError(f"{what} has no element type")
    try:
        onnx_name = TensorProto.DataType.Name(elem_type)
    except ValueError:
        raise ModelError(f"{what} has an unknown element type {elem_type}") from None
    raise UnsupportedOpError(
        f"{what} has dtype {onnx_name.lower()}, which accel does not support "
        f"(supported: {', '.join(sorted(set(_ONNX_DTYPES.values())))})"
    )


def _prod(dims: Iterable[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


class _Importer:
    """One import: ONNX names → IR values, nodes appended in topological order."""

    def __init__(
        self,
        proto: ModelProto,
        input_shapes: Mapping[str, Sequence[int]] | None,
        input_values: Mapping[str, Any] | None = None,
    ):
        self.proto = proto
        self.g = proto.graph
        self.opsets: dict[str, int] = {}
        for imp in proto.opset_import:
            domain = "" if imp.domain in ("", "ai.onnx") else imp.domain
            self.opsets[domain] = int(imp.version)
        self.opset = self.opsets[""]
        if self.opset < MIN_OPSET:
            raise ModelError(
                f"the model uses opset {self.opset} of the default ONNX domain; accel supports opsets "
                f"{MIN_OPSET} to {MAX_OPSET}: upgrade it with onnx.version_converter.convert_version(model, 17)"
            )
        if self.opset > MAX_OPSET:
            raise UnsupportedOpError(
                f"the model uses opset {self.opset} of the default ONNX domain, newer than the newest "
                f"accel knows ({MAX_OPSET})"
            )
        self.input_shapes = dict(input_shapes or {})
        self.input_values = dict(input_values or {})
        self.env: dict[str, Value] = {}
        self.nodes: list[Node] = []
        # the names the ONNX graph gives, as the sets toposort found them in (not merged into one)
        self.reserved: tuple[AbstractSet[str], ...] = ()
        self.taken: set[str] = set()
        self.node_names: set[str] = set()
        # hint -> the last suffix taken for it (all the lower ones are taken too)
        self._suffixes: dict[str, int] = {}
        self._node_suffixes: dict[str, int] = {}
        # graph inputs no node has read yet (a QDQ graph's input may still take its quantization)
        self.unread: set[Value] = set()
        # (op, id of the attributes, ids of the input types) -> (the input types, the attributes given,
        # the attributes completed, the output types), for ops given no attributes or frozen ones (as
        # _frozen_window_attrs remembers them): the type rule's answer found by identity (most nodes of a
        # large model read types an earlier node made). What the ids name is held, so that no id is
        # another object's meanwhile.
        self._typed: dict[tuple[Any, ...], tuple[tuple[TensorType, ...], Any, Any, tuple[TensorType, ...]]] = {}
        # (op type, input shape, each attribute's bytes) -> a window op's attributes, converted and frozen
        self.window_attrs: dict[tuple[Any, ...], Mapping[str, Any]] = {}
        self.label = ""
        self.hint = "v"
        self.node_name = ""

    # -- names ---------------------------------------------------------------------
    def _fresh(self, hint: str) -> str:
        """The first free name of ``hint``, ``hint_1``, ``hint_2``, ... (taken)."""
        hint = hint or "v"
        taken = self.taken
        name = hint
        if name in taken or self.is_reserved(name):
            # names are only ever added: the suffixes tried before for this hint are still taken
            # (else many nodes of one hint would each try them all again: quadratic)
            i = self._suffixes.get(hint, 0)
            while True:
                i += 1
                name = f"{hint}_{i}"
                if name not in taken and not self.is_reserved(name):
                    break
            self._suffixes[hint] = i
        taken.add(name)
        return name

    def is_reserved(self, name: str) -> bool:
        """Whether the ONNX graph gives ``name`` (to a value a node produces, an input, an initializer
        or an output)."""
        return any(name in names for names in self.reserved)

    def _value_name(self, onnx_name: str | None, hint: str) -> str:
        if onnx_name and onnx_name not in self.taken:
            self.taken.add(onnx_name)
            return onnx_name
        return self._fresh(hint)

    def _fresh_node(self, hint: str, *, take: bool = True) -> str:
        """The first free node name of ``hint``, ``hint_1``, ... (taken unless ``take`` is off)."""
        hint = hint or "node"
        names = self.node_names
        name = hint
        if name in names:  # (ONNX node names need not be unique: many nodes may share one)
            i = self._node_suffixes.get(hint, 0)
            while True:
                i += 1
                name = f"{hint}_{i}"
                if name not in names:
                    break
            self._node_suffixes[hint] = i if take else i - 1
        if take:
            names.add(name)
        return name

    # -- values --------------------------------------------------------------------
    def const(
        self, data: Any, hint: str | None = None, *, out: str | None = None, quant: QuantParams | None = None
    ) -> Value:
        """A constant value (named ``out`` when that ONNX name is free)."""
        arr = _frozen(data)
        try:
            return Value(self._value_name(out, hint or f"{self.hint}/const"), TensorType.of(arr, quant), None, arr)
        except GraphError as exc:
            raise ModelError(f"node {self.label}: {exc}") from None

    def scalar(self, value: Any, dtype: str) -> Value:
        return self.const(np.array(value, dtype=dtype), f"{self.hint}/scalar")

    def emit(
        self, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any] | None = None, *, out: str | None = None
    ) -> Value:
        """Append one IR node with one output (constant inputs fold at once)."""
        return self.emit_multi(op, inputs, attrs, outs=[out])[0]

    def emit_multi(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: Mapping[str, Any] | None = None,
        *,
        outs: Sequence[str | None] | None = None,
    ) -> list[Value]:
        node_name = self.node_name
        in_types = [v.type for v in inputs]
        if not attrs or type(attrs) is MappingProxyType:
            key = (op, id(attrs) if attrs else 0, *map(id, in_types))
            hit = self._typed.get(key)
            if hit is None:
                full, types = infer_node_types(op, in_types, attrs, node=node_name or op)
                self._typed[key] = (tuple(in_types), attrs, full, tuple(types))
            else:
                full, types = hit[2], list(hit[3])
        else:
            full, types = infer_node_types(op, in_types, attrs, node=node_name or op)
        outs = list(outs or ())
        if len(outs) < len(types):
            outs += [None] * (len(types) - len(outs))
        constant = bool(inputs)  # every input a constant: folded at once
        for v in inputs:
            if v.const is None:
                constant = False
                break
        if constant and get_op(op).qdq is not Qdq.DEQUANTIZE and _fold_fits(inputs, types):
            arrays = self._fold(op, full, inputs, types)
            return [self.const(a, out=o, quant=t.quant) for a, t, o in zip(arrays, types, outs, strict=False)]
        short = _short_op(op)
        taken = self.taken
        names = []
        for o in outs:
            if o and o not in taken:  # the ONNX name, as _value_name gives it
                taken.add(o)
                names.append(o)
            else:
                names.append(self._fresh(f"{self.hint}/{short}"))
        if node_name and node_name not in self.node_names:  # as _fresh_node gives it
            self.node_names.add(node_name)
        else:
            node_name = self._fresh_node(node_name or short)
        node = Node(op, inputs, full, types, name=node_name, output_names=names)
        self.nodes.append(node)
        if self.unread:  # (a few graph inputs, read by the first nodes: then empty)
            self.unread.difference_update(inputs)
        return node.outputs

    def _fold(self, op: str, attrs: Any, inputs: Sequence[Value], types: Sequence[TensorType]) -> list[np.ndarray]:
        """Evaluate an op on constants with its reference kernel."""
        arrays = [v.const for v in inputs]
        ctx = OpContext(op, attrs, tuple(v.type for v in inputs), tuple(types), tuple(arrays), self.node_name)
        try:
            with np.errstate(all="ignore"):
                out = get_op(op).bind(ctx)(*arrays)
        except AccelError:
            raise
        except Exception as exc:
            raise ModelError(f"node {self.label}: evaluating {op} on constants failed: {exc}") from None
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        for a, t in zip(outs, types, strict=False):
            if tuple(a.shape) != t.shape or a.dtype.name != t.dtype:
                raise GraphError(f"node {self.label}: kernel of {op} returned {a.dtype.name}{list(a.shape)}, typed {t}")
        return [np.asarray(a) for a in outs]

    # -- small builders ------------------------------------------------------------
    def reshape(self, v: Value, shape: Sequence[int], *, out: str | None = None) -> Value:
        shape = tuple(int(d) for d in shape)
        if shape == v.type.shape:
            return _rename(self, v, out) if out else v
        return self.emit("reshape", [v], {"newshape": shape}, out=out)

    def transpose(self, v: Value, axes: Sequence[int], *, out: str | None = None) -> Value:
        return self.emit("transpose", [v], {"axes": tuple(int(a) for a in axes)}, out=out)

    def concat(self, values: Sequence[Value], axis: int, *, out: str | None = None) -> Value:
        if len(values) == 1 and out is None:
            return values[0]
        return self.emit("concatenate", list(values), {"axis": axis}, out=out)

    def slice_axis(self, v: Value, axis: int, start: int, end: int) -> Value:
        """``v[..., start:end, ...]`` on one axis (step 1) through ``split``."""
        dim = v.type.shape[axis]
        if start == 0 and end == dim:
            return v
        if v.const is not None:
            index = [slice(None)] * v.type.rank
            index[axis] = slice(start, end)
            return self.const(v.const[tuple(index)], quant=v.type.quant)
        points = tuple(p for p, keep in ((start, start > 0), (end, end < dim)) if keep)
        parts = self.emit_multi("split", [v], {"indices_or_sections": points, "axis": axis})
        return parts[1] if start > 0 else parts[0]

    def take(self, v: Value, axis: int, indices: Sequence[int]) -> Value:
        """``np.take(v, indices, axis)`` for run-time data and 1-D constant indices (in range).

        A forward stride becomes slice → pad → reshape → split (a handful of
        nodes); any other index list is cut into runs of consecutive indices,
        one slice each, concatenated.
        """
        idx = [int(i) for i in indices]
        if not idx:
            raise UnsupportedOpError(f"node {self.label}: selecting no element of run-time data is not supported")
        steps = {b - a for a, b in itertools.pairwise(idx)}
        if len(steps) == 1 and (step := steps.pop()) > 1:
            n, start = len(idx), idx[0]
            last = idx[-1] + 1
            t = self.slice_axis(v, axis, start, last)
            missing = n * step - (last - start)
            if missing:
                width = tuple((0, missing) if ax == axis else (0, 0) for ax in range(v.type.rank))
                pv: Any = False if v.type.dtype == "bool" else (0.0 if v.type.dtype in _FLOATS else 0)
                t = self.emit("nn.pad", [t], {"pad_width": width, "pad_mode": "constant", "pad_value": pv})
            shape = v.type.shape
            t = self.reshape(t, (*shape[:axis], n, step, *shape[axis + 1 :]))
            t = self.slice_axis(t, axis + 1, 0, 1)
            return self.reshape(t, (*shape[:axis], n, *shape[axis + 1 :]))
        runs: list[tuple[int, int]] = []
        for i in idx:
            if runs and i == runs[-1][1]:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        if len(runs) > 4096:
            raise UnsupportedOpError(
                f"node {self.label}: gathering {len(runs)} slices of run-time data is not supported"
            )
        return self.concat([self.slice_axis(v, axis, a, b) for a, b in runs], axis)

    def repeat(self, v: Value, times: int, axis: int) -> Value:
        """``v`` concatenated ``times`` times along ``axis`` in O(log times) nodes."""
        result: Value | None = None
        power = v
        while times:
            if times & 1:
                result = power if result is None else self.concat([result, power], axis)
            times >>= 1
            if times:
                power = self.concat([power, power], axis)
        assert result is not None
        return result

    def broadcast_to(self, v: Value, shape: Sequence[int]) -> Value:
        """numpy ``broadcast_to`` for run-time data: reshape then repeat (exact, any dtype)."""
        shape = tuple(shape)
        if v.type.shape == shape:
            return v
        if v.const is not None and _fold_fits([v], [TensorType(shape, v.type.dtype)]):
            return self.const(np.broadcast_to(v.const, shape).copy())
        cur = self.reshape(v, (1,) * (len(shape) - v.type.rank) + v.type.shape)
        for axis, (d, t) in enumerate(zip(cur.type.shape, shape, strict=False)):
            if d != t:
                if d != 1:
                    raise ModelError(f"node {self.label}: cannot broadcast {list(v.type.shape)} to {list(shape)}")
                if t == 0:
                    raise UnsupportedOpError(f"node {self.label}: broadcasting to an empty axis is not supported")
                cur = self.repeat(cur, t, axis)
        return cur

    # -- operand access ------------------------------------------------------------
    def need(self, node: NodeProto, ins: list, i: int, what: str) -> Value:
        v = ins[i] if i < len(ins) else None
        if v is None:
            raise ModelError(f"node {self.label}: {node.op_type} needs input #{i} ({what})")
        return v

    def const_input(self, node: NodeProto, ins: list, i: int, what: str) -> np.ndarray | None:
        """The constant value of optional input ``i`` (None when absent)."""
        v = ins[i] if i < len(ins) else None
        if v is None:
            return None
        if v.const is None:
            name = node.input[i]
            if any(vi.name == name for vi in self.g.input):
                how = (
                    f"{name!r} is a graph input: give its value with the other inputs (accel.execute(model, inputs), "
                    "accel run --input), which specializes the model on it, or bind it with input_values="
                )
            else:
                how = "accel needs it constant (an initializer, or a computation that folds at import)"
            raise ConstantOperandRequired(
                f"node {self.label}: {node.op_type}'s {what} {name!r} is computed at run time; {how}", name
            )
        return v.const

    def need_const(self, node: NodeProto, ins: list, i: int, what: str) -> np.ndarray:
        """The constant value of required input ``i``."""
        arr = self.const_input(node, ins, i, what)
        if arr is None:
            raise ModelError(f"node {self.label}: {node.op_type} needs input #{i} ({what})")
        return arr

    def unsupported(self, node: NodeProto, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{node.op_type} at node {self.label}: {why}")

    # -- graph-level ---------------------------------------------------------------
    def tensor_array(self, t: TensorProto, what: str) -> np.ndarray:
        dtype = _dtype(t.data_type, what)
        dims = [int(d) for d in t.dims]
        if any(d < 0 for d in dims):
            raise ModelError(f"{what} has a negative dimension in {dims}")
        if _prod(dims) > MAX_ELEMENTS:
            raise ModelError(f"{what} has {_prod(dims)} elements, more than the limit 2**40")
        if t.data_location == TensorProto.EXTERNAL:
            raise ExternalDataError(f"{what} keeps its data in an external file that was not loaded")
        if _RAW_LITTLE_ENDIAN and t.HasField("raw_data"):  # most weights: little-endian bytes as they are
            raw = t.raw_data
            size = _prod(dims) * _ITEMSIZES[dtype]
            if len(raw) != size:
                raise ModelError(
                    f"{what}: its data does not match its type and shape ({len(raw)} bytes for {dtype}{dims})"
                )
            return np.frombuffer(raw, dtype=dtype).reshape(dims).copy()
        try:
            arr = numpy_helper.to_array(t)
        except Exception as exc:
            raise ModelError(f"{what}: its data does not match its type and shape ({exc})") from None
        arr = np.asarray(arr)
        if np_dtype_name(arr.dtype) != dtype or tuple(arr.shape) != tuple(dims):
            raise ModelError(f"{what}: decoded {arr.dtype.name}{list(arr.shape)}, declared {dtype}{dims}")
        return arr

    def sparse_array(self, sp: onnx.SparseTensorProto, what: str) -> np.ndarray:
        values = self.tensor_array(sp.values, f"{what} (values)")
        indices = self.tensor_array(sp.indices, f"{what} (indices)").astype(np.int64)
        dims = tuple(int(d) for d in sp.dims)
        if any(d < 0 for d in dims) or _prod(dims) > MAX_ELEMENTS:
            raise ModelError(f"{what}: bad dense shape {list(dims)}")
        dense_bytes = _prod(dims) * values.dtype.itemsize
        stored = values.nbytes + indices.nbytes
        if dense_bytes > MAX_FOLD_BYTES and dense_bytes > _SPARSE_EXPANSION * stored:
            raise ModelError(
                f"{what}: {stored} stored bytes expand to a {fmt_bytes(dense_bytes)} dense tensor {list(dims)}, "
                f"over the {fmt_bytes(MAX_FOLD_BYTES)} limit for tensors more than {_SPARSE_EXPANSION}x sparser"
            )
        dense = np.zeros(dims, dtype=values.dtype)
        n = values.size
        try:
            if indices.ndim == 1 and indices.size == n:
                dense.reshape(-1)[indices] = values.reshape(-1)
            elif indices.ndim == 2 and indices.shape == (n, len(dims)):
                dense[tuple(indices.T)] = values.reshape(-1)
            else:
                raise IndexError(f"indices of shape {list(indices.shape)} for {n} values")
        except IndexError as exc:
            raise ModelError(f"{what}: bad sparse indices ({exc})") from None
        return dense

    def make_input(self, vi: onnx.ValueInfoProto) -> Value:
        name = vi.name
        what = f"input {name!r}"
        if not vi.type.HasField("tensor_type"):
            kind = vi.type.WhichOneof("value") or "value without a type"
            raise UnsupportedOpError(f"{what} is a {kind.replace('_type', '')}; accel supports tensor inputs only")
        tt = vi.type.tensor_type
        dtype = _dtype(tt.elem_type, what)
        override = self.input_shapes.get(name)
        hint = f"pass input_shapes={{{name!r}: (...)}} to import_onnx, or --input-shape {name}=D0,D1,... to accel"
        if override is not None:
            try:  # operator.index: 1.5 and "123" are not dimensions (int() would take both)
                if isinstance(override, (str, bytes)):
                    raise TypeError
                shape = [operator.index(d) for d in override]
            except (TypeError, ValueError):
                raise ModelError(f"input_shapes[{name!r}] must be a tuple of integers, got {override!r}") from None
            if any(d < 0 for d in shape):
                raise ModelError(f"input_shapes[{name!r}] = {shape} has a negative dimension")
            if tt.HasField("shape"):
                dims = list(tt.shape.dim)
                if len(dims) != len(shape):
                    raise ModelError(f"input_shapes[{name!r}] has rank {len(shape)} but {what} has rank {len(dims)}")
                for i, (d, s) in enumerate(zip(dims, shape, strict=False)):
                    if d.HasField("dim_value") and d.dim_value != s:
                        raise ModelError(
                            f"input_shapes[{name!r}] = {shape} disagrees with the model's dimension {d.dim_value} at axis {i}"
                        )
        else:
            if not tt.HasField("shape"):
                raise ModelError(f"{what} has no shape (unknown rank): {hint}")
            shape = []
            for i, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value"):
                    if d.dim_value < 0:
                        raise ModelError(f"{what} has a negative dimension {d.dim_value} at axis {i}")
                    shape.append(int(d.dim_value))
                elif i == 0:
                    shape.append(1)  # an unknown leading (batch) dimension
                else:
                    sym = d.dim_param or "?"
                    raise ModelError(f"{what} has an unknown dimension {sym!r} at axis {i}: {hint}")
        if any(d > MAX_ELEMENTS for d in shape):
            raise ModelError(f"{what} has shape {shape}, beyond the limit of 2**40 elements")
        try:
            t = TensorType(tuple(shape), dtype)
        except GraphError as exc:
            raise ModelError(f"{what}: {exc}") from None
        return Value(self._value_name(name, name), t)

    def bound_input(self, vi: onnx.ValueInfoProto, value: Any) -> Value:
        """Graph input ``vi`` as a constant holding ``value`` (checked against its declared type)."""
        what = f"input {vi.name!r}"
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedOpError(f"{what} is not a tensor; accel supports tensor inputs only")
        tt = vi.type.tensor_type
        dtype = _dtype(tt.elem_type, what)
        arr = np.asarray(value)
        if arr.dtype.name != dtype:
            raise InputError(f"{what} must be {dtype}, got {arr.dtype.name}")
        if tt.HasField("shape"):
            dims = list(tt.shape.dim)
            if len(dims) != arr.ndim or any(
                d.HasField("dim_value") and d.dim_value != s for d, s in zip(dims, arr.shape, strict=False)
            ):
                declared = ",".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)
                raise InputError(f"{what} must have shape [{declared}], got [{','.join(map(str, arr.shape))}]")
        arr = _frozen(arr.astype(arr.dtype.newbyteorder("="), copy=False))
        return Value(self._value_name(vi.name, vi.name), TensorType.of(arr), None, arr)

    def toposort(self) -> tuple[list[int] | None, list[list[str]], list[list[str]]]:
        """A stable topological order of the ONNX nodes (None: the file's own), and their input and
        output names in that order (read from the message once); GraphError on duplicates or a cycle."""
        g = self.g
        defined: set[str] = set()
        for kind, names in (("input", [v.name for v in g.input]), ("initializer", [t.name for t in g.initializer])):
            seen: set[str] = set()
            for n in names:
                if n in seen:
                    raise GraphError(f"{kind} name {n!r} appears twice in the ONNX graph")
                seen.add(n)
            defined.update(names)
        defined.update(sp.values.name for sp in g.sparse_initializer)
        producers: dict[str, int] = {}
        # (the node messages are read one at a time, not held in a list: the protobuf runtime
        # keeps a table of the Python objects alive for its messages, which would hold all of them)
        nodes = g.node
        node_inputs: list[list[str]] = []
        node_outputs: list[list[str]] = []
        late: list[tuple[int, str]] = []  # (node, a name it reads that no earlier node or definition gives)
        # one sweep: a name read is produced by an earlier node or defined (as in most files), or
        # else looked up once every node is seen (an out-of-order file, or an undefined name)
        for i, node in enumerate(nodes):
            ins = node.input[:]  # (a slice is a new list, made faster than list() makes one)
            outs = node.output[:]
            node_inputs.append(ins)
            node_outputs.append(outs)
            for name in ins:
                if name and name not in producers and name not in defined:
                    late.append((i, name))
            for o in outs:
                if not o:
                    continue
                if o in producers:
                    other = nodes[producers[o]]
                    raise GraphError(
                        f"tensor {o!r} is produced twice (nodes {_label(other, producers[o])} and {_label(node, i)})"
                    )
                if o in defined:
                    raise GraphError(f"node {_label(node, i)} writes {o!r}, which is also a graph input or initializer")
                producers[o] = i
        for i, name in late:
            if name not in producers:
                raise ModelError(
                    f"node {_label(nodes[i], i)} reads {name!r}, which no node, graph input or initializer defines"
                )
        order: list[int] | None = None  # without late reads, the stable order is the file's own
        if late:
            deps = [{producers[n] for n in names if n in producers} for names in node_inputs]
            order, stuck = stable_topological_order(deps)
            if stuck is not None:
                raise GraphError(f"the ONNX graph has a cycle through node {_label(nodes[stuck], stuck)}")
            node_inputs = [node_inputs[i] for i in order]
            node_outputs = [node_outputs[i] for i in order]
        # names the ONNX graph gives, in the sets they were gathered in (merging them would hash
        # every name again): what a node reads is produced by a node or defined (an input or an
        # initializer, sparse or not); "" (an omitted optional input) names nothing
        self.reserved = (producers.keys(), defined, {v.name for v in g.output})
        return order, node_inputs, node_outputs

    def run(self) -> Graph:
        g = self.g
        order, nodes_inputs, nodes_outputs = self.toposort()  # also reserves the names the ONNX graph gives

        init_names = {t.name for t in g.initializer}
        # initializers of one type share one type object, as the nodes' outputs of one type do (the
        # type rules' memo gives them): the memos keyed by types then match them by identity
        shared: dict[TensorType, TensorType] = {}
        for t in g.initializer:
            arr = self.tensor_array(t, f"initializer {t.name!r}")
            ty = TensorType.of(arr)
            ty = shared.setdefault(ty, ty)
            self.env[t.name] = Value(self._value_name(t.name, t.name), ty, None, _frozen(arr))
        for sp in g.sparse_initializer:
            name = sp.values.name
            if name in self.env:
                raise GraphError(f"initializer name {name!r} appears twice in the ONNX graph")
            arr = _frozen(self.sparse_array(sp, f"initializer {name!r}"))
            self.env[name] = Value(self._value_name(name, name), TensorType.of(arr), None, arr)

        model_inputs = [v.name for v in g.input if v.name not in init_names]
        for what, given in (("input_shapes", self.input_shapes), ("input_values", self.input_values)):
            unknown = sorted(set(given) - set(model_inputs))
            if unknown:
                raise ModelError(
                    f"{what} names {', '.join(map(repr, unknown))}, not an input of the model "
                    f"(inputs: {', '.join(model_inputs) or 'none'})"
                )
        inputs = []
        for vi in g.input:
            if vi.name in init_names:
                continue  # an initializer listed as input: frozen as a constant
            if vi.name in self.input_values:
                self.env[vi.name] = self.bound_input(vi, self.input_values[vi.name])
                continue
            v = self.make_input(vi)
            self.env[vi.name] = v
            inputs.append(v)
        self.unread.update(inputs)

        nodes = g.node  # (each node message read as it is converted, as in toposort)
        for index, k in enumerate(range(len(nodes)) if order is None else order):
            self.convert(nodes[k], index, nodes_inputs[index], nodes_outputs[index])

        outputs = self.bind_outputs()
        graph = Graph(inputs, outputs, self.nodes, name="main")
        graph.lint(check_types=False)  # each node's types were inferred as it was created
        # every name given went through these (and the ONNX names an output may be renamed to):
        # kept as they are, not merged into one set (a large model's names would all be hashed again)
        graph.adopt_names(self.taken, self.node_names, *self.reserved)
        return graph

    def convert(self, node: NodeProto, index: int, inputs: list[str], outputs: list[str]) -> None:
        """Convert one ONNX node (its input and output names as read by :meth:`toposort`)."""
        op_type, node_name = node.op_type, node.name
        self.label = label = repr(node_name) if node_name else _label(node, index)
        # (free, not taken: the first IR node of this ONNX node takes it)
        self.node_name = self._fresh_node(node_name or f"{op_type}_{index}", take=False)
        self.hint = outputs[0] if outputs and outputs[0] else next((o for o in outputs if o), node_name or op_type)
        domain = node.domain
        if domain == "ai.onnx":
            domain = ""
        handler = _HANDLERS.get(op_type) if domain == "" else None
        if handler is None:
            raise UnsupportedOpError(_unsupported_op_message(op_type, domain, self.opsets.get(domain), label))
        env = self.env
        ins = [env[n] if n else None for n in inputs]
        outs = handler(self, node, _Attrs(node, label), ins)
        for i, name in enumerate(outputs):
            if not name:
                continue
            v = outs[i] if i < len(outs) else None
            if v is None:
                raise UnsupportedOpError(f"{op_type} at node {label}: output #{i} ({name!r}) is not supported")
            env[name] = v

    def bind_outputs(self) -> list[Value]:
        """Graph outputs named as in ONNX: rename an aliased value, or copy when it must keep its name."""
        onnx_outputs = [v.name for v in self.g.output]
        if len(set(onnx_outputs)) != len(onnx_outputs):
            dup = next(n for n in onnx_outputs if onnx_outputs.count(n) > 1)
            raise GraphError(f"graph output {dup!r} is listed twice")
        if not onnx_outputs:
            raise ModelError("the ONNX graph has no outputs")
        outputs: list[Value] = []
        keep = set(onnx_outputs)
        self.node_name, self.label = "", "outputs"
        for name in onnx_outputs:
            v = self.env.get(name)
            if v is None:
                raise ModelError(f"graph output {name!r} is not produced by any node, input or initializer")
            if v.name != name:
                if v.const is not None:
                    v = self.const(v.const, out=name, quant=v.type.quant)
                elif v.producer is not None and v.name not in keep and name not in self.taken:
                    self.taken.add(name)
                    v.name = name
                else:
                    self.hint = name
                    v = self.emit("reshape", [v], {"newshape": v.type.shape}, out=name)
            outputs.append(v)
        return outputs


_SHORT_OPS: dict[str, str] = {}


def _short_op(op: str) -> str:
    """``op`` without its namespace (``nn.conv2d`` → ``conv2d``), a fresh name's hint."""
    short = _SHORT_OPS.get(op)
    if short is None:
        short = _SHORT_OPS[op] = op.rsplit(".", 1)[-1]
    return short


#: How similar (difflib's ratio) a supported op's name must be to an unsupported one to be suggested.
CLOSE_OP_CUTOFF = 0.75


def _unsupported_op_message(op: str, domain: str, version: int | None, label: str) -> str:
    """One line: the op, its domain and opset, the node, the closest supported names, where the list is."""
    shown = domain or "ai.onnx"
    head = f"unsupported op {op!r} (domain {shown!r}, opset {version if version is not None else '?'}) at node {label}"
    where = f"`accel ops` lists the {len(SUPPORTED_OPS)} supported ONNX ops (accel.frontend.onnx.SUPPORTED_OPS)"
    if domain:
        return f"{head}; accel converts ops of the default ONNX domain only; {where}"
    # similar spellings only: a name that merely contains a supported one (NonMaxSuppression, Max)
    # is another operator, and suggesting it would mislead
    by_lower = {name.lower(): name for name in SUPPORTED_OPS}
    close = difflib.get_close_matches(op.lower(), list(by_lower), n=3, cutoff=CLOSE_OP_CUTOFF)
    if close:
        return f"{head}; closest supported: {', '.join(by_lower[k] for k in close)}; {where}"
    return f"{head}; {where}"


def _frozen(data: Any) -> np.ndarray:
    """A read-only C-contiguous array of ``data``, 0-d kept 0-d (np.ascontiguousarray would make it 1-d)."""
    arr = np.asarray(data)
    if not arr.flags.c_contiguous or arr.base is not None or not arr.flags.owndata:
        arr = arr.copy(order="C")
    arr.setflags(write=False)
    return arr


def _label(node: NodeProto, index: int) -> str:
    if node.name:
        return repr(node.name)
    outs = ", ".join(o for o in node.output if o)
    return f"#{index} ({node.op_type} -> {outs})"


def _rename(cv: _Importer, v: Value, name: str) -> Value:
    """Give an internal value the ONNX name it computes (when that name is still free)."""
    if v.name != name and name not in cv.taken and v.producer is not None and not cv.is_reserved(v.name):
        cv.taken.add(name)
        v.name = name
    return v


def _axis(cv: _Importer, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ModelError(f"node {cv.label}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


#: A sparse initializer may expand this many times its stored bytes beyond :data:`MAX_FOLD_BYTES`.
_SPARSE_EXPANSION = 64


def _fold_fits(inputs: Sequence[Value], types: Sequence[TensorType]) -> bool:
    """Whether folding may materialize results of ``types``: within :data:`MAX_FOLD_BYTES`, or no
    larger than its largest constant input (a transposed or cast weight). Larger results stay ops,
    computed at run time, so no constant bigger than the budget or than a given initializer is made."""
    out = sum(t.nbytes for t in types)
    return out <= MAX_FOLD_BYTES or out <= max((v.type.nbytes for v in inputs), default=0)


def _check_fold_size(op: str, shape: Sequence[int], dtype: Any, label: str | None = None) -> None:
    """Refuse a fold-only op whose result would exceed :data:`MAX_FOLD_BYTES`, before allocating it."""
    nbytes = _prod(shape) * np.dtype(dtype).itemsize
    if nbytes > MAX_FOLD_BYTES:
        where = f"node {label}: " if label else ""
        raise ModelError(
            f"{where}{op} on constants would make a {fmt_bytes(nbytes)} tensor {list(shape)}, "
            f"over the {fmt_bytes(MAX_FOLD_BYTES)} limit for values computed at import"
        )


def _check_fold_result(label: str, op: str, arrays: Sequence[np.ndarray]) -> None:
    """Size a fold-only op's result from its operands' shapes before computing it."""
    if op == "NonZero" and arrays:
        x = arrays[0]
        _check_fold_size(op, [x.ndim, int(np.count_nonzero(x))], np.int64, label)
    elif op not in ("Range", "ReduceProd") and arrays:
        try:
            shape = np.broadcast_shapes(*(x.shape for x in arrays))
        except ValueError:
            return  # the op itself reports operands that do not broadcast
        _check_fold_size(op, shape, max((x.dtype for x in arrays), key=lambda d: d.itemsize), label)


def import_model(
    model: str | os.PathLike[str] | bytes | ModelProto,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    input_values: Mapping[str, Any] | None = None,
) -> Graph:
    """Import an ONNX model as an IR graph (no simplification passes).

    ``input_shapes`` binds the shapes of inputs with symbolic dimensions.
    ``input_values`` binds graph inputs to values: each becomes a constant and
    leaves the graph's inputs (how operands that fix a shape, given at run
    time, are specialized on; see :mod:`accel.frontend.specialize`).
    ``base_dir`` is the folder external tensor data lives in; it defaults to the
    model file's folder and is required for bytes/ModelProto models with
    external data.
    """
    proto = load_model_proto(model, base_dir=base_dir)
    with collector_paused():
        return _Importer(proto, input_shapes, input_values).run()


def symbolic_input_dims(model: str | os.PathLike[str] | bytes | ModelProto) -> dict[str, list[tuple[int, str]]]:
    """The model's inputs with dimensions not fixed in the file: ``{input: [(axis, symbol), ...]}``
    (the symbol is ``"?"`` for an unnamed unknown dimension). External data is not read."""
    if isinstance(model, ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "the model bytes")
    else:
        try:
            proto = _parse(read_model_file(Path(model)), f"model file {str(model)!r}")
        except OSError as exc:
            raise ModelError(f"cannot read model file {str(model)!r}: {exc.strerror or exc}") from None
    inits = {t.name for t in proto.graph.initializer}
    found: dict[str, list[tuple[int, str]]] = {}
    for vi in proto.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = [
            (i, d.dim_param or "?") for i, d in enumerate(vi.type.tensor_type.shape.dim) if not d.HasField("dim_value")
        ]
        if dims:
            found[vi.name] = dims
    return found


def describe_fixed_dims(
    symbolic: Mapping[str, Sequence[tuple[int, str]]], graph: Graph, given: Mapping[str, Sequence[int]] | None = None
) -> list[str]:
    """One line per input whose symbolic dimensions ``graph`` fixed: which symbol, which size, and why."""
    shapes = {v.name: v.type.shape for v in graph.inputs}
    lines = []
    for name, dims in symbolic.items():
        shape = shapes.get(name)
        if shape is None:
            continue
        fixed = ", ".join(f"{sym!r} (axis {axis}) = {shape[axis]}" for axis, sym in dims)
        if given and name in given:
            lines.append(f"input {name!r}: symbolic dimension(s) {fixed}, as given")
        else:
            lines.append(
                f"input {name!r}: symbolic dimension(s) {fixed} by default; "
                f"choose with --input-shape {name}={','.join(map(str, shape))} (or input_shapes=)"
            )
    return lines


# =================================================================================
# op handlers: handler(cv, node, attrs, inputs) -> outputs (Values, None = absent)
# =================================================================================
# They live in modules by op family; importing them registers them.

from accel.frontend.onnx import elementwise, nn, qnn  # noqa: E402, F401  (registration side effects)
from accel.frontend.onnx.tensor import FOLD_ONLY_OPS  # noqa: E402  (registers the tensor handlers too)

#: ONNX ops (default domain) the frontend converts, sorted.
SUPPORTED_OPS = tuple(sorted(_HANDLERS))
