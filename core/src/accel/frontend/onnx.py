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
"""

from __future__ import annotations

import builtins
import difflib
import itertools
import math
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
        self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None, *, out: str | None = None
    ) -> Value:
        """Append one IR node with one output (constant inputs fold at once)."""
        return self.emit_multi(op, inputs, attrs, outs=[out])[0]

    def emit_multi(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: dict[str, Any] | None = None,
        *,
        outs: Sequence[str | None] | None = None,
    ) -> list[Value]:
        node_name = self.node_name
        full, types = infer_node_types(op, [v.type for v in inputs], attrs, node=node_name or op)
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
            ins = list(node.input)
            outs = list(node.output)
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


def _unsupported_op_message(op: str, domain: str, version: int | None, label: str) -> str:
    """One line: the op, its domain and opset, the node, the closest supported names, where the list is."""
    shown = domain or "ai.onnx"
    head = f"unsupported op {op!r} (domain {shown!r}, opset {version if version is not None else '?'}) at node {label}"
    where = f"`accel ops` lists the {len(SUPPORTED_OPS)} supported ONNX ops (accel.frontend.onnx.SUPPORTED_OPS)"
    if domain:
        return f"{head}; accel converts ops of the default ONNX domain only; {where}"
    by_lower = {name.lower(): name for name in SUPPORTED_OPS}
    close = difflib.get_close_matches(op.lower(), list(by_lower), n=3, cutoff=0.6)
    close += [k for k in by_lower if k not in close and len(op) >= 3 and (op.lower() in k or k in op.lower())][:2]
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

# -- elementwise ----------------------------------------------------------------------

_UNARY = {
    "Relu": "nn.relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Sqrt": "sqrt",
    "Erf": "erf",
    "Exp": "exp",
    "Abs": "abs",
    "Neg": "negative",
}


@_op(*_UNARY)
def _unary(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    return [cv.emit(_UNARY[node.op_type], [x], out=node.output[0])]


@_op("LeakyRelu")
def _leaky_relu(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    return [cv.emit("nn.leaky_relu", [x], {"alpha": a.float("alpha", 0.01)}, out=node.output[0])]


@_op("Gelu")
def _gelu(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    approx = a.str("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ModelError(f"node {cv.label}: Gelu approximate={approx!r} must be 'none' or 'tanh'")
    return [cv.emit("nn.gelu", [x], {"approximate": approx}, out=node.output[0])]


def _scalar_like(cv: _Importer, value: float, x: Value) -> Value:
    return cv.scalar(value, x.type.dtype)


@_op("Reciprocal")
def _reciprocal(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    return [cv.emit("divide", [_scalar_like(cv, 1, x), x], out=node.output[0])]


@_op("HardSigmoid", "HardSwish")
def _hard_sigmoid(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    if node.op_type == "HardSwish":
        alpha, beta = 1.0 / 6.0, 0.5
    else:
        alpha, beta = a.float("alpha", 0.2), a.float("beta", 0.5)
    t = cv.emit("add", [cv.emit("multiply", [x, _scalar_like(cv, alpha, x)]), _scalar_like(cv, beta, x)])
    if node.op_type == "HardSigmoid":
        return [cv.emit("clip", [t], {"a_min": 0.0, "a_max": 1.0}, out=node.output[0])]
    t = cv.emit("clip", [t], {"a_min": 0.0, "a_max": 1.0})
    return [cv.emit("multiply", [x, t], out=node.output[0])]


@_op("PRelu")
def _prelu(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # max(x, 0) + slope * min(x, 0): exact for either sign of x.
    x, slope = cv.need(node, ins, 0, "X"), cv.need(node, ins, 1, "slope")
    zero = _scalar_like(cv, 0, x)
    pos = cv.emit("maximum", [x, zero])
    neg = cv.emit("multiply", [cv.emit("minimum", [x, zero]), slope])
    return [cv.emit("add", [pos, neg], out=node.output[0])]


@_op("Elu", "Selu", "Celu")
def _elu(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # relu(x) + alpha * (exp(min(x, 0) / k) - 1): the exp term is 0 for x >= 0.
    x = cv.need(node, ins, 0, "X")
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"needs float data, got {x.type.dtype}")
    if node.op_type == "Selu":
        alpha, gamma, k = a.float("alpha", 1.67326319217681884765625), a.float("gamma", 1.05070102214813232421875), 1.0
    elif node.op_type == "Celu":
        alpha = a.float("alpha", 1.0)
        gamma, k = 1.0, alpha
    else:
        alpha, gamma, k = a.float("alpha", 1.0), 1.0, 1.0
    zero = _scalar_like(cv, 0, x)
    neg = cv.emit("minimum", [x, zero])
    if k != 1.0:
        neg = cv.emit("divide", [neg, _scalar_like(cv, k, x)])
    em1 = cv.emit("subtract", [cv.emit("exp", [neg]), _scalar_like(cv, 1, x)])
    y = cv.emit("add", [cv.emit("nn.relu", [x]), cv.emit("multiply", [em1, _scalar_like(cv, alpha, x)])])
    if gamma != 1.0:
        return [cv.emit("multiply", [y, _scalar_like(cv, gamma, x)], out=node.output[0])]
    return [_rename(cv, y, node.output[0])]


@_op("Softsign")
def _softsign(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    den = cv.emit("add", [cv.emit("abs", [x]), _scalar_like(cv, 1, x)])
    return [cv.emit("divide", [x, den], out=node.output[0])]


def _rename(cv: _Importer, v: Value, name: str) -> Value:
    """Give an internal value the ONNX name it computes (when that name is still free)."""
    if v.name != name and name not in cv.taken and v.producer is not None and not cv.is_reserved(v.name):
        cv.taken.add(name)
        v.name = name
    return v


@_op("Clip")
def _clip(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    out = node.output[0]
    if cv.opset < 11:
        lo = a.float("min") if "min" in a else None
        hi = a.float("max") if "max" in a else None
        lo_v = hi_v = None
    else:
        lo_v = ins[1] if len(ins) > 1 else None
        hi_v = ins[2] if len(ins) > 2 else None
        lo = hi = None
        if lo_v is not None and lo_v.const is not None:
            lo, lo_v = lo_v.const.item(), None
        if hi_v is not None and hi_v.const is not None:
            hi, hi_v = hi_v.const.item(), None
    is_float = x.type.dtype in _FLOATS
    conv = float if is_float else int
    if lo is not None and hi is not None and lo_v is None and hi_v is None:
        return [cv.emit("clip", [x], {"a_min": conv(lo), "a_max": conv(hi)}, out=out)]
    y = x
    # one bound, or run-time bounds: maximum then minimum (ONNX order: min applies first)
    if lo is not None:
        y = cv.emit("maximum", [y, cv.scalar(lo, x.type.dtype)])
    elif lo_v is not None:
        y = cv.emit("maximum", [y, lo_v])
    if hi is not None:
        y = cv.emit("minimum", [y, cv.scalar(hi, x.type.dtype)])
    elif hi_v is not None:
        y = cv.emit("minimum", [y, hi_v])
    return [_rename(cv, y, out)]


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power"}


@_op(*_BINARY)
def _binary(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, y = cv.need(node, ins, 0, "A"), cv.need(node, ins, 1, "B")
    if "broadcast" in a or "axis" in a:
        raise cv.unsupported(node, "the legacy 'broadcast'/'axis' attributes are not supported")
    if node.op_type == "Pow" and y.type.dtype != x.type.dtype:
        # ONNX Pow allows an exponent of another type; compute in the base's type.
        y = cv.emit("cast", [y], {"dtype": x.type.dtype})
    return [cv.emit(_BINARY[node.op_type], [x, y], out=node.output[0])]


@_op("Max", "Min", "Sum", "Mean")
def _variadic(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    vals = [v for v in ins if v is not None]
    if not vals:
        raise ModelError(f"node {cv.label}: {node.op_type} needs at least one input")
    op = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[node.op_type]
    out = node.output[0]
    acc = vals[0]
    last = len(vals) - 1
    for i, v in enumerate(vals[1:], start=1):
        final = i == last and node.op_type != "Mean"
        acc = cv.emit(op, [acc, v], out=out if final else None)
    if node.op_type == "Mean" and len(vals) > 1:
        acc = cv.emit("divide", [acc, cv.scalar(len(vals), acc.type.dtype)], out=out)
    return [acc]


@_op("Softmax")
def _softmax(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    rank = x.type.rank
    if cv.opset >= 13:
        axis = a.int("axis", -1)
        return [cv.emit("nn.softmax", [x], {"axis": axis}, out=node.output[0])]
    # before opset 13: softmax over the flattened trailing axes [axis:]
    axis = a.int("axis", 1)
    if not -rank <= axis < max(rank, 1):
        raise ModelError(f"node {cv.label}: axis {axis} is out of range for rank {rank}")
    axis %= max(rank, 1)
    if axis == rank - 1:
        return [cv.emit("nn.softmax", [x], {"axis": -1}, out=node.output[0])]
    shape = x.type.shape
    flat = cv.reshape(x, (_prod(shape[:axis]), _prod(shape[axis:])))
    y = cv.emit("nn.softmax", [flat], {"axis": -1})
    return [cv.reshape(y, shape, out=node.output[0])]


# -- convolution, dense, pooling ---------------------------------------------------------


def _auto_pads(
    cv: _Importer,
    a: _Attrs,
    in_sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[int]:
    """ONNX pads (begins then ends) from ``auto_pad`` / ``pads``."""
    nd = len(in_sizes)
    auto = a.str("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = a.ints("pads", [0] * 2 * nd)
        if len(pads) != 2 * nd:
            raise ModelError(f"node {cv.label}: pads {pads} must have {2 * nd} values")
        if any(p < 0 for p in pads):
            raise UnsupportedOpError(f"node {cv.label}: negative pads {pads} are not supported")
        return pads
    if auto == "VALID":
        return [0] * 2 * nd
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ModelError(f"node {cv.label}: unknown auto_pad {auto!r}")
    begins, ends = [], []
    for n, k, s, d in zip(in_sizes, kernel, strides, dilations, strict=False):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else big)
        ends.append(big if auto == "SAME_UPPER" else small)
    return begins + ends


def _weight_kernel(cv: _Importer, node: NodeProto, a: _Attrs, w: Value) -> list[int]:
    """A convolution's kernel_shape: the weight's spatial dimensions, which the attribute (optional) must repeat."""
    spatial = list(w.type.shape[2:])
    kernel = a.ints("kernel_shape", spatial)
    if kernel != spatial:
        raise ModelError(
            f"node {cv.label}: kernel_shape {kernel} disagrees with the weight {w.name!r} of shape "
            f"{list(w.type.shape)} (its spatial dimensions are {spatial})"
        )
    return kernel


def _spatial_params(cv: _Importer, node: NodeProto, a: _Attrs, x: Value, kernel: Sequence[int]) -> dict[str, Any]:
    """strides, dilations and pads of a 1-D or 2-D window op, as 2-D IR attributes."""
    nd = x.type.rank - 2
    if nd not in (1, 2):
        raise cv.unsupported(node, f"{nd}-D windows are not supported (1-D and 2-D are)")
    if len(kernel) != nd:
        raise ModelError(f"node {cv.label}: kernel_shape {list(kernel)} does not match a {nd}-D input")
    strides = a.ints("strides", [1] * nd)
    dilations = a.ints("dilations", [1] * nd)
    if len(strides) != nd or len(dilations) != nd:
        raise ModelError(f"node {cv.label}: strides {strides} / dilations {dilations} must have {nd} values")
    pads = _auto_pads(cv, a, x.type.shape[2:], kernel, strides, dilations)
    return {**_window_2d(strides, dilations, pads), "kernel": (1, kernel[0]) if nd == 1 else tuple(kernel)}


def _window_2d(strides: Sequence[int], dilations: Sequence[int], pads: Sequence[int]) -> dict[str, tuple[int, ...]]:
    """ONNX strides, dilations and pads (begins, then ends) of a 1-D or 2-D window as 2-D IR
    attributes; a 1-D window runs on a height of 1."""
    if len(strides) == 1:
        return {"strides": (1, strides[0]), "dilation": (1, dilations[0]), "padding": (0, pads[0], 0, pads[1])}
    return {"strides": tuple(strides), "dilation": tuple(dilations), "padding": (pads[0], pads[1], pads[2], pads[3])}


def _to_2d(cv: _Importer, x: Value) -> Value:
    """[N, C, L] → [N, C, 1, L] so 1-D windows run as 2-D ones."""
    if x.type.rank == 3:
        n, c, length = x.type.shape
        return cv.reshape(x, (n, c, 1, length))
    return x


def _from_2d(cv: _Importer, y: Value, rank: int, out: str) -> Value:
    if rank == 3:
        n, c, _, length = y.type.shape
        return cv.reshape(y, (n, c, length), out=out)
    return _rename(cv, y, out)


def _emit_conv(cv: _Importer, op: str, x: Value, w: Value, b: Value | None, attrs: dict[str, Any], out: str) -> Value:
    """``op`` (a 2-D convolution) on ``x`` and ``w`` seen as 2-D, then the bias ``b``; back to ``x``'s rank as ``out``."""
    y = cv.emit(op, [_to_2d(cv, x), _to_2d(cv, w)], attrs)
    if b is not None:
        y = cv.emit("nn.bias_add", [y, b], {"axis": 1})
    return _from_2d(cv, y, x.type.rank, out)


@_op("Conv")
def _conv(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, w = cv.need(node, ins, 0, "X"), cv.need(node, ins, 1, "W")
    b = ins[2] if len(ins) > 2 else None
    rank = x.type.rank
    kernel = _weight_kernel(cv, node, a, w)
    p = _spatial_params(cv, node, a, x, kernel)
    if w.type.rank != rank:
        raise ModelError(f"node {cv.label}: weight of rank {w.type.rank} for data of rank {rank}")
    attrs = {"strides": p["strides"], "padding": p["padding"], "dilation": p["dilation"], "groups": a.int("group", 1)}
    return [_emit_conv(cv, "nn.conv2d", x, w, b, attrs, node.output[0])]


@_op("ConvTranspose")
def _conv_transpose(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, w = cv.need(node, ins, 0, "X"), cv.need(node, ins, 1, "W")
    b = ins[2] if len(ins) > 2 else None
    rank = x.type.rank
    nd = rank - 2
    if nd not in (1, 2):
        raise cv.unsupported(node, f"{nd}-D transposed convolution is not supported (1-D and 2-D are)")
    kernel = _weight_kernel(cv, node, a, w)
    strides = a.ints("strides", [1] * nd)
    dilations = a.ints("dilations", [1] * nd)
    out_pad = a.ints("output_padding", [0] * nd)
    if len(out_pad) == 2 * nd:  # some exporters write begins and ends
        out_pad = [out_pad[i] + out_pad[i + nd] for i in range(nd)]
    out_shape = a.ints("output_shape")
    auto = a.str("auto_pad", "NOTSET")
    sizes = x.type.shape[2:]
    if any(len(v) != nd for v in (kernel, strides, dilations, out_pad)):
        raise ModelError(f"node {cv.label}: kernel_shape/strides/dilations/output_padding must have {nd} values")
    natural = [
        s * (n - 1) + op + (k - 1) * d + 1
        for n, k, s, d, op in zip(sizes, kernel, strides, dilations, out_pad, strict=False)
    ]
    if "pads" in a or (auto == "NOTSET" and out_shape is None) or auto == "VALID":
        pads = [0] * 2 * nd if auto == "VALID" else a.ints("pads", [0] * 2 * nd)
        if len(pads) != 2 * nd or any(p < 0 for p in pads):
            raise ModelError(f"node {cv.label}: bad pads {pads}")
        if out_shape is not None:
            want = out_shape[-nd:]
            for i in range(nd):
                extra = want[i] - (natural[i] - pads[i] - pads[i + nd])
                if extra < 0:
                    raise ModelError(f"node {cv.label}: output_shape {out_shape} is smaller than the padded output")
                out_pad[i] += extra
    else:
        want = out_shape[-nd:] if out_shape is not None else [n * s for n, s in zip(sizes, strides, strict=False)]
        begins, ends = [], []
        for i in range(nd):
            total = natural[i] - want[i]
            if total < 0:  # the output is larger than the natural size: grow it at the end
                out_pad[i] += -total
                total = 0
            if auto == "SAME_UPPER":
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                begins.append(total - total // 2)
                ends.append(total // 2)
        pads = begins + ends
    attrs = {
        **_window_2d(strides, dilations, pads),
        "output_padding": (0, out_pad[0]) if nd == 1 else tuple(out_pad),
        "groups": a.int("group", 1),
        "kernel_layout": "IOHW",
    }
    return [_emit_conv(cv, "nn.conv2d_transpose", x, w, b, attrs, node.output[0])]


@_op("Gemm")
def _gemm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    A, B = cv.need(node, ins, 0, "A"), cv.need(node, ins, 1, "B")
    C = ins[2] if len(ins) > 2 else None
    alpha, beta = a.float("alpha", 1.0), a.float("beta", 1.0)
    if A.type.rank != 2 or B.type.rank != 2:
        raise ModelError(f"node {cv.label}: Gemm needs 2-D A and B, got {list(A.type.shape)} and {list(B.type.shape)}")
    out = node.output[0]
    dtype = A.type.dtype
    data = cv.transpose(A, (1, 0)) if a.int("transA", 0) else A
    weight = B if a.int("transB", 0) else cv.transpose(B, (1, 0))  # nn.dense wants [N, K]; folds for constants
    post_alpha = False
    if alpha != 1.0:
        if weight.const is not None:
            weight = cv.emit("multiply", [weight, cv.scalar(alpha, dtype)])
        else:
            post_alpha = True
    y = cv.emit("nn.dense", [data, weight], out=None if (C is not None and beta != 0) or post_alpha else out)
    if post_alpha:
        y = cv.emit("multiply", [y, cv.scalar(alpha, dtype)], out=None if C is not None and beta != 0 else out)
    if C is None or beta == 0:
        return [y]
    if beta != 1.0:
        C = cv.emit("multiply", [C, cv.scalar(beta, C.type.dtype)])
    n = y.type.shape[1]
    if C.const is not None and C.type.size == n and C.type.shape in ((n,), (1, n)) and n > 1:
        return [cv.emit("nn.bias_add", [y, cv.reshape(C, (n,))], {"axis": 1}, out=out)]
    return [cv.emit("add", [y, C], out=out)]


@_op("MatMul")
def _matmul(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    A, B = cv.need(node, ins, 0, "A"), cv.need(node, ins, 1, "B")
    return [_matmul_values(cv, A, B, node.output[0])]


def _matmul_values(cv: _Importer, A: Value, B: Value, out: str | None) -> Value:
    """numpy ``matmul`` semantics with nn.dense (constant 2-D B) or nn.batch_matmul."""
    if A.type.rank == 0 or B.type.rank == 0:
        raise ModelError(f"node {cv.label}: MatMul of a scalar")
    a1, b1 = A.type.rank == 1, B.type.rank == 1
    if B.const is not None and B.type.rank == 2:
        data = cv.reshape(A, (1, A.type.shape[0])) if a1 else A
        y = cv.emit("nn.dense", [data, cv.transpose(B, (1, 0))], out=None if a1 else out)
        return cv.reshape(y, (y.type.shape[-1],), out=out) if a1 else y
    a = cv.reshape(A, (1, A.type.shape[0])) if a1 else A
    b = cv.reshape(B, (B.type.shape[0], 1)) if b1 else B
    (m, k), (k2, n) = a.type.shape[-2:], b.type.shape[-2:]
    if k != k2:
        raise ModelError(
            f"node {cv.label}: MatMul of {list(A.type.shape)} and {list(B.type.shape)}: inner dimensions differ"
        )
    ba, bb = a.type.shape[:-2], b.type.shape[:-2]
    try:
        batch = tuple(np.broadcast_shapes(ba, bb))
    except ValueError:
        raise ModelError(
            f"node {cv.label}: MatMul batch dimensions {list(ba)} and {list(bb)} do not broadcast"
        ) from None

    def to3(v: Value, vb: tuple[int, ...], rows: int, cols: int) -> Value:
        full = (1,) * (len(batch) - len(vb)) + vb
        if full != batch and _prod(vb) != 1:
            v = cv.broadcast_to(v, (*batch, rows, cols))
            vb = batch
        return cv.reshape(v, (_prod(vb), rows, cols))

    y = cv.emit("nn.batch_matmul", [to3(a, ba, m, k), to3(b, bb, k, n)], {"transpose_a": False, "transpose_b": False})
    shape = batch + ((m,) if not a1 else ()) + ((n,) if not b1 else ())
    return cv.reshape(y, shape, out=out)


@_op("BatchNormalization")
def _batch_norm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    params = [cv.need(node, ins, i, w) for i, w in enumerate(("scale", "B", "mean", "var"), start=1)]
    if a.int("training_mode", 0) or any(o for o in node.output[1:]):
        raise cv.unsupported(node, "training mode (running statistics outputs) is not supported; export for inference")
    if cv.opset < 9 and a.int("spatial", 1) == 0:
        raise cv.unsupported(node, "spatial=0 is not supported")
    y = cv.emit("nn.batch_norm", [x, *params], {"axis": 1, "epsilon": a.float("epsilon", 1e-5)}, out=node.output[0])
    return [y]


@_op("InstanceNormalization")
def _instance_norm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, s, b = (cv.need(node, ins, i, w) for i, w in enumerate(("input", "scale", "B")))
    return [
        cv.emit("nn.instance_norm", [x, s, b], {"axis": 1, "epsilon": a.float("epsilon", 1e-5)}, out=node.output[0])
    ]


@_op("LRN")
def _lrn(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    if x.type.rank < 3:
        raise ModelError(f"node {cv.label}: LRN needs input of rank >= 3 (N, C, spatial...), got {list(x.type.shape)}")
    size = a.int("size")
    if size < 1:
        raise ModelError(f"node {cv.label}: LRN size must be positive, got {size}")
    attrs = {
        "size": size,
        "alpha": a.float("alpha", 1e-4),
        "beta": a.float("beta", 0.75),
        "bias": a.float("bias", 1.0),
        "axis": 1,
    }
    return [cv.emit("nn.lrn", [x], attrs, out=node.output[0])]


@_op("LayerNormalization")
def _layer_norm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # (x - mean) / sqrt(var + eps) * scale + bias over the axes [axis:].
    x, scale = cv.need(node, ins, 0, "X"), cv.need(node, ins, 1, "Scale")
    bias = ins[2] if len(ins) > 2 else None
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"needs float data, got {x.type.dtype}")
    stash = a.int("stash_type", 1)
    rank = x.type.rank
    axis = a.int("axis", -1)
    if not -rank <= axis < rank:
        raise ModelError(f"node {cv.label}: axis {axis} is out of range for rank {rank}")
    axes = tuple(range(axis % rank, rank))
    dt = x.type.dtype
    xs = cv.emit("cast", [x], {"dtype": "float32"}) if stash == 1 and dt != "float32" and dt != "float64" else x
    sdt = xs.type.dtype
    outs = [*list(node.output), "", ""]
    mean = cv.emit("mean", [xs], {"axis": axes, "keepdims": True}, out=outs[1] or None)
    d = cv.emit("subtract", [xs, mean])
    var = cv.emit("mean", [cv.emit("multiply", [d, d])], {"axis": axes, "keepdims": True})
    std = cv.emit("sqrt", [cv.emit("add", [var, cv.scalar(a.float("epsilon", 1e-5), sdt)])])
    y = cv.emit("divide", [d, std])
    if sdt != dt:
        y = cv.emit("cast", [y], {"dtype": dt})
    y = cv.emit("multiply", [y, scale], out=None if bias is not None else node.output[0])
    if bias is not None:
        y = cv.emit("add", [y, bias], out=node.output[0])
    inv = cv.emit("divide", [cv.scalar(1, sdt), std], out=outs[2]) if outs[2] else None
    return [y, mean, inv]


@_op("RMSNormalization")
def _rms_norm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # x / sqrt(mean(x^2) + eps) * scale over the axes [axis:]
    x, scale = cv.need(node, ins, 0, "X"), cv.need(node, ins, 1, "scale")
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"needs float data, got {x.type.dtype}")
    rank = x.type.rank
    axes = tuple(range(_axis(cv, a.int("axis", -1), rank), rank))
    dt = x.type.dtype
    xs = cv.emit("cast", [x], {"dtype": "float32"}) if a.int("stash_type", 1) == 1 and dt == "float16" else x
    sdt = xs.type.dtype
    ms = cv.emit("mean", [cv.emit("multiply", [xs, xs])], {"axis": axes, "keepdims": True})
    rms = cv.emit("sqrt", [cv.emit("add", [ms, cv.scalar(a.float("epsilon", 1e-5), sdt)])])
    y = cv.emit("divide", [xs, rms])
    if sdt != dt:
        y = cv.emit("cast", [y], {"dtype": dt})
    return [cv.emit("multiply", [y, scale], out=node.output[0])]


@_op("MeanVarianceNormalization")
def _mvn(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # (x - mean) / sqrt(mean(x^2) - mean^2), as ONNX's function body computes it (no epsilon added)
    x = cv.need(node, ins, 0, "X")
    axes = tuple(sorted(_axis(cv, ax, x.type.rank) for ax in a.ints("axes", [0, 2, 3])))
    mean = cv.emit("mean", [x], {"axis": axes, "keepdims": True})
    ms = cv.emit("mean", [cv.emit("multiply", [x, x])], {"axis": axes, "keepdims": True})
    var = cv.emit("subtract", [ms, cv.emit("multiply", [mean, mean])])
    std = cv.emit("sqrt", [var])
    d = cv.emit("subtract", [x, mean])
    return [cv.emit("divide", [d, cv.emit("add", [std, cv.scalar(1e-9, x.type.dtype)])], out=node.output[0])]


@_op("GroupNormalization")
def _group_norm(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # normalize over (C/G, spatial...) per group, then per-channel scale and bias
    x, scale, bias = (cv.need(node, ins, i, w) for i, w in enumerate(("X", "scale", "bias")))
    if x.type.dtype not in _FLOATS or x.type.rank < 3:
        raise cv.unsupported(node, f"needs float data of rank >= 3, got {x.type}")
    g = a.int("num_groups")
    n, c = x.type.shape[:2]
    if g < 1 or c % g:
        raise ModelError(f"node {cv.label}: {g} groups do not divide {c} channels")
    rest = x.type.shape[2:]
    dt = x.type.dtype
    xs = cv.emit("cast", [x], {"dtype": "float32"}) if a.int("stash_type", 1) == 1 and dt == "float16" else x
    sdt = xs.type.dtype
    t = cv.reshape(xs, (n, g, (c // g) * _prod(rest)))
    mean = cv.emit("mean", [t], {"axis": (2,), "keepdims": True})
    d = cv.emit("subtract", [t, mean])
    var = cv.emit("mean", [cv.emit("multiply", [d, d])], {"axis": (2,), "keepdims": True})
    std = cv.emit("sqrt", [cv.emit("add", [var, cv.scalar(a.float("epsilon", 1e-5), sdt)])])
    y = cv.reshape(cv.emit("divide", [d, std]), x.type.shape)
    if sdt != dt:
        y = cv.emit("cast", [y], {"dtype": dt})
    if scale.type.shape == (g,) and g != c:  # opset 18 form: one scale and bias per group
        scale = cv.reshape(cv.broadcast_to(cv.reshape(scale, (g, 1)), (g, c // g)), (c,))
        bias = cv.reshape(cv.broadcast_to(cv.reshape(bias, (g, 1)), (g, c // g)), (c,))
    shape = (c,) + (1,) * len(rest)
    y = cv.emit("multiply", [y, cv.reshape(scale, shape)])
    return [cv.emit("add", [y, cv.reshape(bias, shape)], out=node.output[0])]


@_op("Attention")
def _attention(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    """Scaled dot-product attention with nn.batch_matmul and nn.softmax.

    Masks that depend only on shapes (causal, sliding windows, constant masks,
    constant kv lengths) are computed at import into one constant bias; rows
    that bias masks completely are zeroed as ONNX specifies. A run-time mask is
    added as is (a boolean one as ``1 - 1/float(mask)``: 0 or -inf, exactly).
    """
    q, k, v = (cv.need(node, ins, i, w) for i, w in enumerate("QKV"))
    mask = ins[3] if len(ins) > 3 else None
    past_k = ins[4] if len(ins) > 4 else None
    past_v = ins[5] if len(ins) > 5 else None
    nonpad = cv.const_input(node, ins, 6, "nonpad_kv_seqlen")
    dt = q.type.dtype
    if dt not in _FLOATS:
        raise cv.unsupported(node, f"needs float Q/K/V, got {dt}")
    if (past_k is None) != (past_v is None):
        raise ModelError(f"node {cv.label}: past_key and past_value go together")
    rank = q.type.rank
    if rank not in (3, 4) or k.type.rank != rank or v.type.rank != rank:
        raise ModelError(f"node {cv.label}: Q, K and V must all be 3-D or all 4-D")
    if rank == 3:
        heads = {"Q": a.int("q_num_heads"), "K": a.int("kv_num_heads"), "V": a.int("kv_num_heads")}

        def heads4(t: Value, h: int) -> Value:
            b, n, hidden = t.type.shape
            if h < 1 or hidden % h:
                raise ModelError(f"node {cv.label}: hidden size {hidden} does not split into {h} heads")
            return cv.transpose(cv.reshape(t, (b, n, h, hidden // h)), (0, 2, 1, 3))

        q, k, v = heads4(q, heads["Q"]), heads4(k, heads["K"]), heads4(v, heads["V"])
    b, hq, s, d = q.type.shape
    present_k = cv.concat([past_k, k], 2) if past_k is not None else k
    present_v = cv.concat([past_v, v], 2) if past_v is not None else v
    hk, kv_len = present_k.type.shape[1], present_k.type.shape[2]
    if hq != hk and (hk < 1 or hq % hk or present_v.type.shape[1] != hk):
        raise ModelError(f"node {cv.label}: {hq} query heads do not group over {hk} key/value heads")
    scale = a.float("scale") if "scale" in a else 1.0 / math.sqrt(d)

    # the constant part of the bias, [B or 1, 1, S, L]
    npdt = np.dtype(dt)
    neg = npdt.type(-np.inf)
    _check_fold_size("Attention's constant bias", (1, 1, s, kv_len), npdt, cv.label)
    bias = np.zeros((1, 1, s, kv_len), dtype=npdt)
    run_mask: Value | None = None
    if mask is not None:
        width = kv_len - mask.type.shape[-1]
        if width < 0:
            raise ModelError(f"node {cv.label}: attn_mask is longer than the key sequence")
        if mask.const is not None:
            m = mask.const
            if width:
                pad = [(0, 0)] * (m.ndim - 1) + [(0, width)]
                m = np.pad(m, pad, constant_values=False if m.dtype == np.bool_ else -np.inf)
            m = np.where(m, npdt.type(0), neg) if m.dtype == np.bool_ else m.astype(npdt)
            bias = bias + m.reshape((1,) * (4 - m.ndim) + m.shape)
        else:
            if mask.type.dtype == "bool":
                run_mask = cv.emit("cast", [mask], {"dtype": "uint8"})  # combined with the constant part below
                if width:
                    pw = tuple((0, width) if ax == mask.type.rank - 1 else (0, 0) for ax in range(mask.type.rank))
                    run_mask = cv.emit("nn.pad", [run_mask], {"pad_width": pw, "pad_mode": "constant", "pad_value": 0})
                width = 0
            elif mask.type.dtype == dt:
                run_mask = mask
            else:
                raise cv.unsupported(node, f"an attn_mask of {mask.type.dtype} with {dt} data is not supported")
            if width:
                pw = tuple((0, width) if ax == mask.type.rank - 1 else (0, 0) for ax in range(mask.type.rank))
                run_mask = cv.emit(
                    "nn.pad", [run_mask], {"pad_width": pw, "pad_mode": "constant", "pad_value": float("-inf")}
                )
    i_idx = np.arange(s).reshape(s, 1)
    j_idx = np.arange(kv_len).reshape(1, kv_len)
    if nonpad is not None:
        if past_k is not None:
            raise ModelError(f"node {cv.label}: nonpad_kv_seqlen cannot be combined with past key/value")
        offset: Any = (nonpad.reshape(-1).astype(np.int64) - s).reshape(-1, 1, 1, 1)
    else:
        offset = past_k.type.shape[2] if past_k is not None else 0
    if a.int("is_causal", 0):
        bias = bias + np.where(j_idx <= i_idx + offset, npdt.type(0), neg)
    left, right = a.int("left_window_size", -1), a.int("right_window_size", -1)
    if left >= 0 or right >= 0:
        diff = (i_idx + offset) - j_idx
        allowed = np.ones(diff.shape, dtype=bool)
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        bias = bias + np.where(allowed, npdt.type(0), neg)
    if nonpad is not None:
        keep = j_idx.reshape(1, 1, 1, kv_len) < nonpad.reshape(-1, 1, 1, 1)
        bias = bias + np.where(keep, npdt.type(0), neg)
    bool_mask = run_mask is not None and run_mask.type.dtype == "uint8"
    alive: Value | None = None
    if bool_mask:
        # permitted = run-time mask AND the constant pattern; a row with nothing permitted is zeroed.
        # bias = 1 - 1/permitted is exactly 0 or -inf; dead rows get a finite bias instead.
        assert run_mask is not None
        permitted = cv.emit("multiply", [run_mask, cv.const((~np.isneginf(bias)).astype(np.uint8))])
        alive = _row_max(cv, permitted)
        one8 = cv.scalar(1, "uint8")
        denom = cv.emit("cast", [cv.emit("add", [permitted, cv.emit("subtract", [one8, alive])])], {"dtype": dt})
        one = cv.scalar(1, dt)
        run_mask = cv.emit("subtract", [one, cv.emit("divide", [one, denom])])
        bias = np.where(np.isneginf(bias), npdt.type(0), bias)
    dead_rows = np.all(np.isneginf(bias), axis=-1, keepdims=True)
    if dead_rows.any():
        # fully masked rows give zeros: keep their logits finite, zero them after the softmax
        bias = np.where(dead_rows, npdt.type(0), bias)

    # heads of K/V repeated for grouped-query attention
    def group(t: Value) -> Value:
        if hq == hk:
            return t
        bt, _, n, dd = t.type.shape
        t = cv.broadcast_to(cv.reshape(t, (bt, hk, 1, n, dd)), (bt, hk, hq // hk, n, dd))
        return cv.reshape(t, (bt, hq, n, dd))

    kk, vv = group(present_k), group(present_v)
    root = cv.scalar(math.sqrt(scale), dt)
    qs = cv.reshape(cv.emit("multiply", [q, root]), (b * hq, s, d))
    ks = cv.reshape(cv.emit("multiply", [kk, root]), (b * hq, kv_len, d))
    scores = cv.emit("nn.batch_matmul", [qs, ks], {"transpose_a": False, "transpose_b": True})
    scores = cv.reshape(scores, (b, hq, s, kv_len))
    softcap = a.float("softcap", 0.0)
    if softcap > 0:
        cap = cv.scalar(softcap, dt)
        scores = cv.emit("multiply", [cv.emit("tanh", [cv.emit("divide", [scores, cap])]), cap])
    mode = a.int("qk_matmul_output_mode", 0)
    qk_out = scores
    biased = scores
    if np.any(bias != 0):
        biased = cv.emit("add", [biased, cv.const(bias)])
    if run_mask is not None:
        biased = cv.emit("add", [biased, run_mask])
    if mode == 2:
        qk_out = biased
    sm_dt = _dtype(a.int("softmax_precision"), "softmax_precision") if "softmax_precision" in a else dt
    t = cv.emit("cast", [biased], {"dtype": sm_dt}) if sm_dt != dt else biased
    probs = cv.emit("nn.softmax", [t], {"axis": -1})
    if alive is not None:
        probs = cv.emit("multiply", [probs, cv.emit("cast", [alive], {"dtype": sm_dt})])
    if dead_rows.any():
        probs = cv.emit("multiply", [probs, cv.const((~dead_rows).astype(sm_dt))])
    if sm_dt != dt:
        probs = cv.emit("cast", [probs], {"dtype": dt})
    if mode == 3:
        qk_out = probs
    dv = vv.type.shape[-1]
    y = cv.emit(
        "nn.batch_matmul",
        [cv.reshape(probs, (b * hq, s, kv_len)), cv.reshape(vv, (b * hq, kv_len, dv))],
        {"transpose_a": False, "transpose_b": False},
    )
    outs = [*node.output, "", "", ""]
    if rank == 3:
        y = cv.transpose(cv.reshape(y, (b, hq, s, dv)), (0, 2, 1, 3))
        y = cv.reshape(y, (b, s, hq * dv), out=outs[0])
    else:
        y = cv.reshape(y, (b, hq, s, dv), out=outs[0])
    return [y, present_k, present_v, qk_out]


def _row_max(cv: _Importer, t: Value) -> Value:
    """max over the last axis, keeping it (global_max_pool2d on a [1, rows, L, 1] view)."""
    shape = t.type.shape
    rows = _prod(shape[:-1])
    m = cv.emit("nn.global_max_pool2d", [cv.reshape(t, (1, rows, shape[-1], 1))])
    return cv.reshape(m, (*shape[:-1], 1))


@_op("Swish")
def _swish(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    alpha = a.float("alpha", 1.0)
    t = x if alpha == 1.0 else cv.emit("multiply", [x, _scalar_like(cv, alpha, x)])
    return [cv.emit("multiply", [x, cv.emit("sigmoid", [t])], out=node.output[0])]


@_op("Trilu")
def _trilu(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # multiply by a constant 0/1 band mask (static shapes make the mask a constant)
    x = cv.need(node, ins, 0, "input")
    k_arr = cv.const_input(node, ins, 1, "k")
    k = int(k_arr.reshape(-1)[0]) if k_arr is not None else 0
    if x.type.rank < 2:
        raise ModelError(f"node {cv.label}: Trilu needs rank >= 2")
    rows, cols = x.type.shape[-2:]
    upper = a.int("upper", 1)
    _check_fold_size("Trilu's band mask", (rows, cols), np.float64, cv.label)
    mask = np.triu(np.ones((rows, cols), dtype=bool), k) if upper else np.tril(np.ones((rows, cols), dtype=bool), k)
    if x.const is not None:
        return [cv.const(np.where(mask, x.const, np.zeros((), x.const.dtype)), out=node.output[0])]
    if x.type.dtype == "bool":
        t = cv.emit("cast", [x], {"dtype": "uint8"})
        t = cv.emit("multiply", [t, cv.const(mask.astype(np.uint8))])
        return [cv.emit("cast", [t], {"dtype": "bool"}, out=node.output[0])]
    return [cv.emit("multiply", [x, cv.const(mask.astype(x.type.dtype))], out=node.output[0])]


@_op("EyeLike")
def _eye_like(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    if x.type.rank != 2:
        raise ModelError(f"node {cv.label}: EyeLike needs a 2-D input")
    dtype = _dtype(a.int("dtype"), f"EyeLike at node {cv.label}: dtype") if "dtype" in a else x.type.dtype
    rows, cols = x.type.shape
    _check_fold_size("EyeLike", (rows, cols), dtype, cv.label)
    return [cv.const(np.eye(rows, cols, k=a.int("k", 0), dtype=dtype), out=node.output[0])]


def _pool_params(cv: _Importer, node: NodeProto, a: _Attrs, x: Value) -> dict[str, Any]:
    kernel = a.ints("kernel_shape")
    if kernel is None:
        raise ModelError(f"node {cv.label}: {node.op_type} needs kernel_shape")
    p = _spatial_params(cv, node, a, x, kernel)
    return {
        "pool_size": p["kernel"],
        "strides": p["strides"],
        "dilation": p["dilation"],
        "padding": p["padding"],
        "ceil_mode": bool(a.int("ceil_mode", 0)),
    }


def _pool_3d(cv: _Importer, node: NodeProto, a: _Attrs, x: Value, op: str, extra: dict[str, Any]) -> Value:
    """A 3-D max or average pool as two 2-D ones: over (H, W) with D folded into the channels,
    then over D with H*W as the width. Both reductions are separable per axis: a window's max
    is the max over D of maxima over (H, W), and its element count (pads included or not) is
    the product of the per-axis counts, so an average of averages is the average."""
    kernel = a.ints("kernel_shape")
    if kernel is None or len(kernel) != 3:
        raise ModelError(f"node {cv.label}: kernel_shape {kernel} does not match a 3-D input")
    strides = a.ints("strides", [1, 1, 1])
    dilations = a.ints("dilations", [1, 1, 1])
    if len(strides) != 3 or len(dilations) != 3:
        raise ModelError(f"node {cv.label}: strides {strides} / dilations {dilations} must have 3 values")
    n, c, d, h, w = x.type.shape
    pads = _auto_pads(cv, a, (d, h, w), kernel, strides, dilations)
    ceil = bool(a.int("ceil_mode", 0))
    hw = cv.emit(
        op,
        [cv.reshape(x, (n, c * d, h, w))],
        {
            "pool_size": (kernel[1], kernel[2]),
            "strides": (strides[1], strides[2]),
            "dilation": (dilations[1], dilations[2]),
            "padding": (pads[1], pads[2], pads[4], pads[5]),
            "ceil_mode": ceil,
            **extra,
        },
    )
    ho, wo = hw.type.shape[2:]
    t = cv.emit(
        op,
        [cv.reshape(hw, (n, c, d, ho * wo))],
        {
            "pool_size": (kernel[0], 1),
            "strides": (strides[0], 1),
            "dilation": (dilations[0], 1),
            "padding": (pads[0], 0, pads[3], 0),
            "ceil_mode": ceil,
            **extra,
        },
    )
    return cv.reshape(t, (n, c, t.type.shape[2], ho, wo), out=node.output[0])


@_op("MaxPool")
def _max_pool(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    if len(node.output) > 1 and node.output[1]:
        raise cv.unsupported(node, "the Indices output is not supported")
    if x.type.rank == 5:
        return [_pool_3d(cv, node, a, x, "nn.max_pool2d", {})]
    attrs = _pool_params(cv, node, a, x)
    y = cv.emit("nn.max_pool2d", [_to_2d(cv, x)], attrs)
    return [_from_2d(cv, y, x.type.rank, node.output[0])]


@_op("AveragePool")
def _avg_pool(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    include = bool(a.int("count_include_pad", 0))
    if x.type.rank == 5:
        return [_pool_3d(cv, node, a, x, "nn.avg_pool2d", {"count_include_pad": include})]
    attrs = _pool_params(cv, node, a, x)
    attrs["count_include_pad"] = include
    y = cv.emit("nn.avg_pool2d", [_to_2d(cv, x)], attrs)
    return [_from_2d(cv, y, x.type.rank, node.output[0])]


@_op("LpPool")
def _lp_pool(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # (sum over the window of |x|^p) ^ (1/p), the sum as avg_pool(count_include_pad) * kh*kw;
    # p=2: sqrt(avg_pool(x^2) * kh*kw); p=1: avg_pool(|x|) * kh*kw.
    x = cv.need(node, ins, 0, "X")
    p = a.get("p", 2)
    if not isinstance(p, (int, float)) or p <= 0:
        raise ModelError(f"node {cv.label}: LpPool needs a positive p, got {p!r}")
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"LpPool of {x.type.dtype} data is not supported (float data is)")
    attrs = _pool_params(cv, node, a, x)
    attrs["count_include_pad"] = True
    window = attrs["pool_size"][0] * attrs["pool_size"][1]
    dt = x.type.dtype
    if p == 2:
        t = cv.emit("power", [x, cv.scalar(2, dt)])
    else:
        t = cv.emit("abs", [x])
        if p != 1:
            t = cv.emit("power", [t, cv.scalar(p, dt)])
    t = cv.emit("nn.avg_pool2d", [_to_2d(cv, t)], attrs)
    t = cv.emit("multiply", [t, cv.scalar(window, dt)])
    if p == 2:
        t = cv.emit("sqrt", [t])
    elif p != 1:
        t = cv.emit("power", [t, cv.scalar(1 / p, dt)])
    return [_from_2d(cv, t, x.type.rank, node.output[0])]


@_op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    op = "nn.global_avg_pool2d" if node.op_type == "GlobalAveragePool" else "nn.global_max_pool2d"
    rank = x.type.rank
    if rank < 3:
        raise ModelError(f"node {cv.label}: {node.op_type} needs data of rank >= 3, got {rank}")
    if rank == 4:
        return [cv.emit(op, [x], out=node.output[0])]
    n, c = x.type.shape[:2]
    y = cv.emit(op, [cv.reshape(x, (n, c, _prod(x.type.shape[2:]), 1))])
    return [cv.reshape(y, (n, c) + (1,) * (rank - 2), out=node.output[0])]


# -- padding ---------------------------------------------------------------------------


@_op("Pad")
def _pad(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    rank = x.type.rank
    mode = a.str("mode", "constant")
    if cv.opset < 11:
        pads = a.ints("pads")
        if pads is None:
            raise ModelError(f"node {cv.label}: Pad needs pads")
        value = a.float("value", 0.0)
        axes = list(range(rank))
    else:
        pads_arr = cv.const_input(node, ins, 1, "pads")
        if pads_arr is None:
            raise ModelError(f"node {cv.label}: Pad needs pads")
        pads = [int(p) for p in pads_arr.reshape(-1)]
        cval = cv.const_input(node, ins, 2, "constant_value")
        value = cval.reshape(-1)[0].item() if cval is not None and cval.size else 0
        axes_arr = cv.const_input(node, ins, 3, "axes")
        axes = list(range(rank)) if axes_arr is None else [int(v) for v in axes_arr.reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise ModelError(f"node {cv.label}: {len(pads)} pads for {len(axes)} axes")
    before, after = [0] * rank, [0] * rank
    for i, ax in enumerate(axes):
        if not -rank <= ax < rank:
            raise ModelError(f"node {cv.label}: pad axis {ax} is out of range for rank {rank}")
        before[ax % rank], after[ax % rank] = pads[i], pads[i + len(axes)]
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise cv.unsupported(node, f"mode {mode!r} is not supported (constant, edge, reflect and wrap are)")
    y = x
    # negative pads crop first (ONNX semantics)
    for ax in range(rank):
        if before[ax] < 0 or after[ax] < 0:
            dim = y.type.shape[ax]
            start, end = max(-before[ax], 0), dim - max(-after[ax], 0)
            if end < start:
                raise ModelError(f"node {cv.label}: negative pads crop axis {ax} below zero")
            y = cv.slice_axis(y, ax, start, end)
    pad_width = tuple((max(b, 0), max(e, 0)) for b, e in zip(before, after, strict=False))
    if all(b == 0 and e == 0 for b, e in pad_width):
        return [y if y is x else _rename(cv, y, node.output[0])]
    if mode == "wrap":
        return [_wrap_pad(cv, y, pad_width, node.output[0])]
    pad_value = float(value) if x.type.dtype in _FLOATS else (bool(value) if x.type.dtype == "bool" else int(value))
    return [
        cv.emit("nn.pad", [y], {"pad_width": pad_width, "pad_mode": mode, "pad_value": pad_value}, out=node.output[0])
    ]


def _wrap_pad(cv: _Importer, x: Value, pad_width: Sequence[tuple[int, int]], out: str) -> Value:
    """Periodic padding (numpy's "wrap"): per axis, the tail before and the head after, by slices and a concat."""
    y = x
    axes = [ax for ax, (b, e) in enumerate(pad_width) if b or e]
    for i, ax in enumerate(axes):
        b, e = pad_width[ax]
        dim = y.type.shape[ax]
        if dim == 0:
            raise ModelError(f"node {cv.label}: wrap padding of an empty axis {ax}")
        # the padded axis is a window of x repeated: whole copies, then the cut ends
        reps = -(-(b + e) // dim) + 1
        tiled = cv.concat([y] * (reps + 1), ax) if reps else y
        start = (-b) % dim
        last = i == len(axes) - 1
        sliced = cv.slice_axis(tiled, ax, start, start + dim + b + e)
        y = _rename(cv, sliced, out) if last else sliced
    return y


# -- shape and data movement -------------------------------------------------------------


def _axis(cv: _Importer, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ModelError(f"node {cv.label}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


@_op("Identity")
def _identity(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    return [cv.need(node, ins, 0, "input")]


@_op("Dropout")
def _dropout(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    training = False
    ratio = 0.5
    if cv.opset >= 12:
        t = cv.const_input(node, ins, 2, "training_mode")
        training = bool(t.reshape(-1)[0]) if t is not None else False
        r = cv.const_input(node, ins, 1, "ratio") if training else None
        ratio = float(r.reshape(-1)[0]) if r is not None else 0.5
    else:
        ratio = a.float("ratio", 0.5)
    if training and ratio != 0.0:
        raise cv.unsupported(node, "training-mode Dropout (random) is not supported; export for inference")
    outs: list[Value | None] = [x]
    if len(node.output) > 1 and node.output[1]:
        _check_fold_size("Dropout's mask", x.type.shape, bool, cv.label)
        outs.append(cv.const(np.ones(x.type.shape, dtype=bool), out=node.output[1]))
    return outs


@_op("Reshape")
def _reshape(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    if "shape" in a:
        raise cv.unsupported(node, "the 'shape' attribute form (opset < 5) is not supported")
    shape_arr = cv.const_input(node, ins, 1, "shape")
    if shape_arr is None:
        raise ModelError(f"node {cv.label}: Reshape needs a shape")
    shape = [int(d) for d in shape_arr.reshape(-1)]
    allowzero = a.int("allowzero", 0)
    src = x.type.shape
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(src):
                raise ModelError(f"node {cv.label}: shape {shape} copies axis {i} that the input {list(src)} lacks")
            out.append(src[i])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise ModelError(f"node {cv.label}: shape {shape} has more than one -1")
    if any(d < -1 for d in out):
        raise ModelError(f"node {cv.label}: shape {shape} has a negative dimension")
    if -1 in out:
        known = _prod(d for d in out if d != -1)
        if known == 0 or x.type.size % known:
            raise ModelError(f"node {cv.label}: cannot reshape {list(src)} to {shape}")
        out[out.index(-1)] = x.type.size // known
    return [cv.emit("reshape", [x], {"newshape": tuple(out)}, out=node.output[0])]


@_op("Flatten")
def _flatten(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    rank = x.type.rank
    axis = a.int("axis", 1)
    if not -rank <= axis <= rank:
        raise ModelError(f"node {cv.label}: axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    shape = x.type.shape
    return [cv.emit("reshape", [x], {"newshape": (_prod(shape[:axis]), _prod(shape[axis:]))}, out=node.output[0])]


@_op("Squeeze", "Unsqueeze")
def _squeeze(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    if cv.opset < 13:
        axes = a.ints("axes")
    else:
        arr = cv.const_input(node, ins, 1, "axes")
        axes = None if arr is None else [int(v) for v in arr.reshape(-1)]
    shape = list(x.type.shape)
    if node.op_type == "Squeeze":
        if axes is None:
            new = [d for d in shape if d != 1]
        else:
            norm = {_axis(cv, ax, len(shape)) for ax in axes}
            for ax in norm:
                if shape[ax] != 1:
                    raise ModelError(f"node {cv.label}: cannot squeeze axis {ax} of size {shape[ax]}")
            new = [d for i, d in enumerate(shape) if i not in norm]
    else:
        if axes is None:
            raise ModelError(f"node {cv.label}: Unsqueeze needs axes")
        out_rank = len(shape) + len(axes)
        inserted = sorted(_axis(cv, ax, out_rank) for ax in axes)
        if len(set(inserted)) != len(inserted):
            raise ModelError(f"node {cv.label}: Unsqueeze axes {axes} repeat an axis")
        new = list(shape)
        for ax in inserted:
            new.insert(ax, 1)
    return [cv.emit("reshape", [x], {"newshape": tuple(new)}, out=node.output[0])]


@_op("Transpose")
def _transpose(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    perm = a.ints("perm", list(range(x.type.rank))[::-1])
    return [cv.transpose(x, perm, out=node.output[0])]


@_op("Concat")
def _concat(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    vals = [v for v in ins if v is not None]
    if not vals:
        raise ModelError(f"node {cv.label}: Concat needs inputs")
    axis = _axis(cv, a.int("axis"), vals[0].type.rank)
    return [cv.emit("concatenate", vals, {"axis": axis}, out=node.output[0])]


@_op("Split")
def _split(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    axis = _axis(cv, a.int("axis", 0), x.type.rank)
    dim = x.type.shape[axis]
    n_out = len(node.output)
    if cv.opset < 13:
        sizes = a.ints("split")
        if sizes is None and len(ins) > 1 and ins[1] is not None:
            sizes = [int(s) for s in cv.need_const(node, ins, 1, "split").reshape(-1)]
    else:
        arr = cv.const_input(node, ins, 1, "split")
        sizes = None if arr is None else [int(s) for s in arr.reshape(-1)]
    if sizes is None:
        k = a.int("num_outputs", n_out) if "num_outputs" in a else n_out
        if k != n_out:
            raise ModelError(f"node {cv.label}: num_outputs={k} but the node has {n_out} outputs")
        if "num_outputs" in a:
            chunk = -(-dim // k)
            sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(k)]
        else:
            if dim % k:
                raise ModelError(f"node {cv.label}: axis {axis} of size {dim} does not split into {k} equal parts")
            sizes = [dim // k] * k
    if len(sizes) != n_out or sum(sizes) != dim or any(s < 0 for s in sizes):
        raise ModelError(
            f"node {cv.label}: split sizes {sizes} do not cut axis {axis} of size {dim} into {n_out} parts"
        )
    if n_out == 1:
        return [x]
    points = tuple(int(p) for p in np.cumsum(sizes)[:-1])
    return cv.emit_multi("split", [x], {"indices_or_sections": points, "axis": axis}, outs=list(node.output))


@_op("Slice")
def _slice(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    rank = x.type.rank
    if cv.opset < 10:
        starts, ends = a.ints("starts"), a.ints("ends")
        axes = a.ints("axes", list(range(len(starts or []))))
        steps = [1] * len(axes)
    else:
        s_arr, e_arr = cv.const_input(node, ins, 1, "starts"), cv.const_input(node, ins, 2, "ends")
        ax_arr, st_arr = cv.const_input(node, ins, 3, "axes"), cv.const_input(node, ins, 4, "steps")
        if s_arr is None or e_arr is None:
            raise ModelError(f"node {cv.label}: Slice needs starts and ends")
        starts, ends = [int(v) for v in s_arr.reshape(-1)], [int(v) for v in e_arr.reshape(-1)]
        axes = list(range(len(starts))) if ax_arr is None else [int(v) for v in ax_arr.reshape(-1)]
        steps = [1] * len(starts) if st_arr is None else [int(v) for v in st_arr.reshape(-1)]
    if starts is None or ends is None or not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelError(f"node {cv.label}: starts/ends/axes/steps lengths differ")
    index: list[np.ndarray | slice] = [slice(None)] * rank
    ranges: dict[int, tuple[int, int, int]] = {}
    for start, end, ax, step in zip(starts, ends, axes, steps, strict=False):
        ax = _axis(cv, ax, rank)
        if ax in ranges:
            raise ModelError(f"node {cv.label}: Slice names axis {ax} twice")
        if step == 0:
            raise ModelError(f"node {cv.label}: Slice step 0")
        dim = x.type.shape[ax]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, -1), dim - 1), min(max(end, -1), dim - 1)
        ranges[ax] = (start, end, step)
        index[ax] = np.arange(start, end, step, dtype=np.int64)
    if x.const is not None:
        data = x.const
        for ax, idx in enumerate(index):
            if isinstance(idx, np.ndarray):
                data = np.take(data, idx, axis=ax)
        return [cv.const(data, out=node.output[0])]
    y = x
    for ax, (start, end, step) in sorted(ranges.items()):
        if step == 1:
            y = cv.slice_axis(y, ax, start, max(end, start))
        else:
            y = cv.take(y, ax, range(start, end, step))
    return [_rename(cv, y, node.output[0]) if y is not x else x]


@_op("Gather")
def _gather(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    idx_v = cv.need(node, ins, 1, "indices")
    rank = x.type.rank
    axis = _axis(cv, a.int("axis", 0), rank)
    dim = x.type.shape[axis]
    if idx_v.const is None:  # run-time indices (an embedding lookup ...)
        if idx_v.type.dtype not in ("int32", "int64"):
            raise ModelError(f"node {cv.label}: Gather indices are {idx_v.type.dtype}, not int32 or int64")
        return [cv.emit("take", [x, idx_v], {"axis": axis}, out=node.output[0])]
    idx = cv.need_const(node, ins, 1, "indices").astype(np.int64)
    if np.any(idx < -dim) or np.any(idx >= dim):
        raise ModelError(f"node {cv.label}: Gather indices out of range for axis {axis} of size {dim}")
    idx = np.where(idx < 0, idx + dim, idx)
    if x.const is not None:
        return [cv.const(np.take(x.const, idx, axis=axis), out=node.output[0])]
    y = cv.take(x, axis, idx.reshape(-1).tolist())
    shape = x.type.shape[:axis] + idx.shape + x.type.shape[axis + 1 :]
    return [cv.reshape(y, shape, out=node.output[0])]


@_op("Expand")
def _expand(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    shape_arr = cv.need_const(node, ins, 1, "shape")
    try:
        shape = tuple(np.broadcast_shapes(x.type.shape, tuple(int(d) for d in shape_arr.reshape(-1))))
    except ValueError:
        raise ModelError(f"node {cv.label}: cannot expand {list(x.type.shape)} to {shape_arr.tolist()}") from None
    y = cv.broadcast_to(x, shape)
    if y.const is not None and x.const is not None:
        return [cv.const(y.const, out=node.output[0])]
    return [_rename(cv, y, node.output[0])]


@_op("Tile")
def _tile(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    reps = [int(r) for r in cv.need_const(node, ins, 1, "repeats").reshape(-1)]
    if len(reps) != x.type.rank or any(r < 0 for r in reps):
        raise ModelError(f"node {cv.label}: repeats {reps} must have one non-negative value per axis")
    tiled = TensorType(tuple(d * r for d, r in zip(x.type.shape, reps, strict=True)), x.type.dtype)
    if x.const is not None and _fold_fits([x], [tiled]):
        return [cv.const(np.tile(x.const, reps), out=node.output[0])]
    if 0 in reps:
        raise cv.unsupported(node, "tiling to an empty tensor is not supported")
    y = x
    for ax, r in enumerate(reps):
        if r > 1:
            y = cv.repeat(y, r, ax)
    return [_rename(cv, y, node.output[0])]


@_op("DepthToSpace")
def _depth_to_space(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    mode = a.str("mode", "DCR")
    return [cv.emit("nn.depth_to_space", [x], {"block_size": a.int("blocksize"), "mode": mode}, out=node.output[0])]


@_op("SpaceToDepth")
def _space_to_depth(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    b = a.int("blocksize")
    if x.type.rank != 4:
        raise ModelError(f"node {cv.label}: SpaceToDepth needs 4-D input")
    n, c, h, w = x.type.shape
    if b < 1 or h % b or w % b:
        raise ModelError(f"node {cv.label}: blocksize {b} does not divide {h}x{w}")
    mode = a.str("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise ModelError(f"node {cv.label}: SpaceToDepth mode {mode!r} must be DCR or CRD")
    t = cv.reshape(x, (n, c, h // b, b, w // b, b))
    # DCR: out channel = (bh * b + bw) * C + c; CRD: c * b * b + bh * b + bw
    t = cv.transpose(t, (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return [cv.reshape(t, (n, c * b * b, h // b, w // b), out=node.output[0])]


@_op("Resize", "Upsample")
def _resize(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    mode = a.str("mode", "nearest")
    legacy = node.op_type == "Upsample" or cv.opset < 11
    if x.type.rank != 4 and legacy:
        raise cv.unsupported(node, f"only 4-D (NCHW) data resizes, got rank {x.type.rank}")
    if legacy:
        scales = (
            a.get("scales") if node.op_type == "Upsample" and cv.opset < 9 else cv.const_input(node, ins, 1, "scales")
        )
        sizes = None
        ctm, nearest = "asymmetric", "floor"
        if mode == "bilinear":
            mode = "linear"
    else:
        scales = cv.const_input(node, ins, 2, "scales")
        sizes = cv.const_input(node, ins, 3, "sizes")
        ctm = a.str("coordinate_transformation_mode", "half_pixel")
        nearest = a.str("nearest_mode", "round_prefer_floor")
        policy = a.str("keep_aspect_ratio_policy", "stretch")
        general = (
            mode == "cubic"
            or a.int("antialias", 0)
            or a.int("exclude_outside", 0)
            or ctm in ("tf_crop_and_resize", "half_pixel_symmetric")
            or (sizes is not None and sizes.size and policy != "stretch")
            or x.type.rank != 4
            or _fractional_scales(x, scales, sizes, a)
        )
        if general:
            return [_resize_by_matrices(cv, node, a, ins, x, scales, sizes)]
    if mode not in ("nearest", "linear"):
        raise cv.unsupported(node, f"mode {mode!r} is not supported (nearest and linear are)")
    if ctm not in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"):
        raise cv.unsupported(node, f"coordinate_transformation_mode {ctm!r} is not supported")
    axes = a.ints("axes", [0, 1, 2, 3]) if not legacy else [0, 1, 2, 3]
    axes = [_axis(cv, ax, 4) for ax in axes]
    in_shape = x.type.shape
    out_shape = list(in_shape)
    if sizes is not None and sizes.size:
        vals = [int(v) for v in sizes.reshape(-1)]
        if len(vals) != len(axes):
            raise ModelError(f"node {cv.label}: {len(vals)} sizes for axes {axes}")
        for ax, v in zip(axes, vals, strict=False):
            out_shape[ax] = v
    elif scales is not None and np.asarray(scales).size:
        factors = [float(v) for v in np.asarray(scales, dtype=np.float64).reshape(-1)]
        if len(factors) != len(axes):
            raise ModelError(f"node {cv.label}: {len(factors)} scales for axes {axes}")
        for ax, s in zip(axes, factors, strict=False):
            exact = in_shape[ax] * s
            out_shape[ax] = math.floor(exact + 1e-9)
            if abs(exact - round(exact)) > 1e-4 * max(1.0, exact):
                raise cv.unsupported(
                    node,
                    f"scale {s} on axis {ax} gives a fractional size {exact:g}; accel resizes to whole sizes "
                    "(pass sizes, or scales that give whole sizes)",
                )
    else:
        raise ModelError(f"node {cv.label}: Resize needs scales or sizes")
    if out_shape[:2] != list(in_shape[:2]):
        raise cv.unsupported(node, "resizing the batch or channel axis is not supported")
    attrs = {
        "size": (out_shape[2], out_shape[3]),
        "layout": "NCHW",
        "method": "nearest_neighbor" if mode == "nearest" else "linear",
        "coordinate_transformation_mode": ctm,
    }
    if mode == "nearest":
        attrs["rounding_method"] = nearest
    return [cv.emit("image.resize2d", [x], attrs, out=node.output[0])]


def _fractional_scales(x: Value, scales: Any, sizes: Any, a: _Attrs) -> bool:
    """Whether ``scales`` (without sizes) give a fractional size on some axis, or resize N or C."""
    if (sizes is not None and sizes.size) or scales is None or not np.asarray(scales).size:
        return False
    factors = [float(v) for v in np.asarray(scales, dtype=np.float64).reshape(-1)]
    axes = a.ints("axes", list(range(x.type.rank)))
    for ax, f in zip(axes, factors, strict=False):
        exact = x.type.shape[ax % x.type.rank] * f
        if abs(exact - round(exact)) > 1e-4 * max(1.0, exact) or (ax % x.type.rank < 2 and f != 1.0):
            return True
    return False


def _resize_taps(mode: str, ratio: float, scale: float, a: _Attrs, antialias: bool) -> np.ndarray:
    """Interpolation weights of the taps around a source coordinate (ONNX Resize): tap i sits at
    offset i - n/2 + 1 from the pixel left of the coordinate; ``ratio`` in (0, 1] is the distance to it."""
    if mode == "nearest":
        rounding = a.str("nearest_mode", "round_prefer_floor")
        if ratio == 1.0:
            return np.array([0.0, 1.0])
        up = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": False,
            "ceil": True,
        }.get(rounding)
        if up is None:
            raise ModelError(f"Resize: unknown nearest_mode {rounding!r}")
        return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])
    cubic_a = a.float("cubic_coeff_a", -0.75)

    def cubic(t: np.ndarray) -> np.ndarray:
        t = np.abs(t)
        near = ((cubic_a + 2) * t - (cubic_a + 3)) * t * t + 1
        far = ((cubic_a * t - 5 * cubic_a) * t + 8 * cubic_a) * t - 4 * cubic_a
        return np.where(t <= 1, near, np.where(t < 2, far, 0.0))

    support = 2 if mode == "cubic" else 1
    if antialias:  # the kernel stretched by 1/scale when downsampling, normalized
        s = min(scale, 1.0)
        start = math.floor(-support / s) + 1
        t = (np.arange(start, 2 - start) - ratio) * s
        w = cubic(t) if mode == "cubic" else np.clip(1 - np.abs(t), 0, 1)
        return np.asarray(w / w.sum())
    t = np.arange(1 - support, support + 1) - ratio
    return cubic(t) if mode == "cubic" else np.clip(1 - np.abs(t), 0, 1)


def _resize_matrix(
    cv: _Importer, a: _Attrs, mode: str, n_in: int, n_out: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray]:
    """The [n_out, n_in] matrix of a 1-D ONNX Resize along one axis, and the constant added to each
    output (the extrapolation value where tf_crop_and_resize samples outside the input)."""
    ctm = a.str("coordinate_transformation_mode", "half_pixel")
    antialias = bool(a.int("antialias", 0))
    exclude = bool(a.int("exclude_outside", 0))
    extrapolation = a.float("extrapolation_value", 0.0)
    weights = np.zeros((n_out, n_in))
    shift = np.zeros(n_out)
    length = scale * n_in  # the real-valued output length
    for y in range(n_out):
        if ctm == "align_corners":
            x = 0.0 if length == 1 else y * (n_in - 1) / (length - 1)
        elif ctm == "asymmetric":
            x = y / scale
        elif ctm == "pytorch_half_pixel":
            x = -0.5 if length == 1 else (y + 0.5) / scale - 0.5
        elif ctm == "half_pixel":
            x = (y + 0.5) / scale - 0.5
        elif ctm == "half_pixel_symmetric":
            x = n_in / 2 * (1 - n_out / length) + (y + 0.5) / scale - 0.5
        elif ctm == "tf_crop_and_resize":
            assert roi is not None
            lo, hi = roi
            x = (hi - lo) * (n_in - 1) / 2 if length == 1 else y * (hi - lo) * (n_in - 1) / (length - 1)
            x += lo * (n_in - 1)
            if x < 0 or x > n_in - 1:
                shift[y] = extrapolation
                continue
        else:
            raise UnsupportedOpError(
                f"Resize at node {cv.label}: coordinate_transformation_mode {ctm!r} is not supported"
            )
        left = math.floor(x)
        ratio = 1.0 if x == left else x - left
        taps = _resize_taps(mode, ratio, scale, a, antialias)
        n = len(taps)
        first = (left - n // 2) if x == left else (left - n // 2 + 1)
        idx = np.arange(first, first + n)
        if exclude:
            taps = np.where((idx < 0) | (idx >= n_in), 0.0, taps)
            total = taps.sum()
            taps = taps / total if total != 0 else taps
        np.add.at(weights[y], np.clip(idx, 0, n_in - 1), taps)
    return weights, shift


#: entries of one interpolation matrix (in x out) the matrix form of Resize builds at most
_RESIZE_MATRIX_LIMIT = 1 << 24


def _resize_by_matrices(
    cv: _Importer, node: NodeProto, a: _Attrs, ins: list, x: Value, scales: Any, sizes: Any
) -> Value:
    """ONNX Resize one axis at a time as a product with a constant interpolation matrix
    (``nn.dense`` over the axis moved last), plus the extrapolation constant: every mode,
    coordinate transform, antialias, exclude_outside and aspect-ratio policy, any rank."""
    mode = a.str("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise cv.unsupported(node, f"mode {mode!r} is not supported (nearest, linear and cubic are)")
    if mode == "nearest" and a.int("antialias", 0):
        raise ModelError(f"node {cv.label}: Resize antialias needs mode linear or cubic")
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"this Resize of {x.type.dtype} data is not supported (float data is)")
    rank = x.type.rank
    shape = x.type.shape
    axes = [_axis(cv, ax, rank) for ax in a.ints("axes", list(range(rank)))]
    factors = [1.0] * rank
    out = list(shape)
    if sizes is not None and sizes.size:
        vals = [int(v) for v in sizes.reshape(-1)]
        if len(vals) != len(axes) or any(v < 0 for v in vals):
            raise ModelError(f"node {cv.label}: sizes {vals} for axes {axes}")
        for ax, v in zip(axes, vals, strict=False):
            if shape[ax] == 0:
                raise ModelError(f"node {cv.label}: Resize of an empty axis {ax}")
            factors[ax] = v / shape[ax]
            out[ax] = v
        policy = a.str("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise ModelError(f"node {cv.label}: unknown keep_aspect_ratio_policy {policy!r}")
            chosen = [factors[ax] for ax in axes]
            common = min(chosen) if policy == "not_larger" else max(chosen)
            for ax in axes:
                factors[ax] = common
                out[ax] = int(common * shape[ax] + 0.5)
    elif scales is not None and np.asarray(scales).size:
        vals_f = [float(v) for v in np.asarray(scales, dtype=np.float64).reshape(-1)]
        if len(vals_f) != len(axes) or any(v <= 0 for v in vals_f):
            raise ModelError(f"node {cv.label}: scales {vals_f} for axes {axes}")
        for ax, f in zip(axes, vals_f, strict=False):
            factors[ax] = f
            out[ax] = int(f * shape[ax])
    else:
        raise ModelError(f"node {cv.label}: Resize needs scales or sizes")
    if _prod(out) > MAX_ELEMENTS:
        raise ModelError(f"node {cv.label}: Resize output {out} is too large")
    roi = None
    if a.str("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
        roi_arr = cv.const_input(node, ins, 1, "roi")
        if roi_arr is None or roi_arr.size != 2 * len(axes):
            raise ModelError(f"node {cv.label}: tf_crop_and_resize needs a roi of {2 * len(axes)} values")
        r = [float(v) for v in roi_arr.reshape(-1)]
        roi = {ax: (r[i], r[i + len(axes)]) for i, ax in enumerate(axes)}
    dt = x.type.dtype
    y = x
    for ax in axes:
        box = roi[ax] if roi is not None else None
        if out[ax] == shape[ax] and factors[ax] == 1.0 and (box is None or box == (0.0, 1.0)):
            continue
        if shape[ax] == 0 or out[ax] == 0:
            raise cv.unsupported(node, f"resizing axis {ax} from {shape[ax]} to {out[ax]} elements is not supported")
        if shape[ax] * out[ax] > _RESIZE_MATRIX_LIMIT:
            raise cv.unsupported(
                node,
                f"this Resize of axis {ax} ({shape[ax]} -> {out[ax]}) needs a {shape[ax]}x{out[ax]} interpolation "
                f"matrix, beyond the limit of {_RESIZE_MATRIX_LIMIT} entries",
            )
        weights, shift = _resize_matrix(cv, a, mode, shape[ax], out[ax], factors[ax], box)
        perm = [d for d in range(rank) if d != ax] + [ax]
        t = cv.transpose(y, perm) if ax != rank - 1 else y
        t = cv.emit("nn.dense", [t, cv.const(weights.astype(dt), f"{cv.hint}/resize_axis{ax}")])
        if np.any(shift):
            t = cv.emit("add", [t, cv.const(shift.astype(dt), f"{cv.hint}/extrapolation")])
        back = [perm.index(d) for d in range(rank)]
        y = cv.transpose(t, back) if ax != rank - 1 else t
    return _rename(cv, y, node.output[0]) if y is not x else cv.reshape(x, shape, out=node.output[0])


# -- reductions ------------------------------------------------------------------------


def _reduce_axes(
    cv: _Importer, node: NodeProto, a: _Attrs, ins: list, rank: int, axes_input_since: int
) -> tuple[int, ...] | None:
    """Normalized reduction axes; None = identity (noop_with_empty_axes with no axes)."""
    if cv.opset < axes_input_since:
        axes = a.ints("axes")
    else:
        arr = cv.const_input(node, ins, 1, "axes")
        axes = None if arr is None else [int(v) for v in arr.reshape(-1)]
    if not axes:
        if a.int("noop_with_empty_axes", 0):
            return None
        return tuple(range(rank))
    norm = sorted({_axis(cv, ax, rank) for ax in axes})
    return tuple(norm)


@_op("ReduceProd")
def _reduce_prod(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    axes = _reduce_axes(cv, node, a, ins, x.type.rank, 18)
    if axes is None or x.type.rank == 0:
        return [x]
    return [cv.emit("prod", [x], {"axis": axes, "keepdims": bool(a.int("keepdims", 1))}, out=node.output[0])]


@_op("ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceMax", "ReduceMin")
def _reduce(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    op = node.op_type
    since = 13 if op == "ReduceSum" else 18
    axes = _reduce_axes(cv, node, a, ins, x.type.rank, since)
    keep = bool(a.int("keepdims", 1))
    out = node.output[0]
    if axes is None:
        return [x]
    if x.type.rank == 0:
        return [x]
    count = _prod(x.type.shape[ax] for ax in axes)
    if count == 0:  # reducing an empty set: the result does not depend on the data
        shape = (
            tuple(1 if ax in axes else d for ax, d in enumerate(x.type.shape))
            if keep
            else tuple(d for ax, d in enumerate(x.type.shape) if ax not in axes)
        )
        dt = np.dtype(x.type.dtype)
        if op in ("ReduceMax", "ReduceMin"):
            hi = op == "ReduceMin"
            if dt.kind == "f":
                fill = np.inf if hi else -np.inf
            elif dt.kind == "b":
                fill = hi
            else:
                fill = np.iinfo(dt).max if hi else np.iinfo(dt).min
        elif op == "ReduceMean":
            raise cv.unsupported(node, "the mean of an empty set is not supported")
        else:
            fill = 0
        _check_fold_size(op, shape, dt, cv.label)
        return [cv.const(np.full(shape, fill, dtype=dt), out=out)]
    if op in ("ReduceMax", "ReduceMin"):
        return [_reduce_extreme(cv, node, x, axes, keep, out)]
    if x.type.dtype not in _FLOATS:
        if op == "ReduceMean":
            return [cv.emit("mean", [x], {"axis": axes, "keepdims": keep}, out=out)]
        raise cv.unsupported(node, f"{op} of {x.type.dtype} data is not supported (float data is)")
    t = x
    if op in ("ReduceSumSquare", "ReduceL2"):
        t = cv.emit("multiply", [x, x])
    elif op == "ReduceL1":
        t = cv.emit("abs", [x])
    if op == "ReduceMean":
        return [cv.emit("mean", [t], {"axis": axes, "keepdims": keep}, out=out)]
    # a sum is the mean times the count (the IR has one reduction op)
    m = cv.emit("mean", [t], {"axis": axes, "keepdims": keep})
    s = cv.emit("multiply", [m, cv.scalar(count, x.type.dtype)], out=None if op == "ReduceL2" else out)
    if op == "ReduceL2":
        return [cv.emit("sqrt", [s], out=out)]
    return [s]


def _reduce_extreme(cv: _Importer, node: NodeProto, x: Value, axes: tuple[int, ...], keep: bool, out: str) -> Value:
    """ReduceMax/Min through global_max_pool2d: move the reduced axes last, view as [1, rest, red, 1]."""
    rank = x.type.rank
    shape = x.type.shape
    red = _prod(shape[ax] for ax in axes)
    if red == 0:
        raise cv.unsupported(node, "reducing an empty axis is not supported")
    rest_axes = [ax for ax in range(rank) if ax not in axes]
    rest = _prod(shape[ax] for ax in rest_axes)
    perm = rest_axes + list(axes)
    t = cv.transpose(x, perm) if perm != list(range(rank)) else x
    neg = node.op_type == "ReduceMin"
    if x.type.dtype == "bool":  # max = any, min = all: pool 0/1 as uint8
        t = cv.emit("cast", [t], {"dtype": "uint8"})
        if neg:
            t = cv.emit("subtract", [cv.scalar(1, "uint8"), t])
        t = cv.emit("nn.global_max_pool2d", [cv.reshape(t, (1, rest, red, 1))])
        if neg:
            t = cv.emit("subtract", [cv.scalar(1, "uint8"), t])
        t = cv.emit("cast", [t], {"dtype": "bool"})
        final = (
            tuple(1 if ax in axes else d for ax, d in enumerate(shape))
            if keep
            else tuple(shape[ax] for ax in rest_axes)
        )
        return cv.reshape(t, final, out=out)
    if neg:
        if x.type.dtype.startswith("uint") or x.type.dtype == "bool":
            raise cv.unsupported(node, f"ReduceMin of {x.type.dtype} data is not supported")
        t = cv.emit("negative", [t])
    t = cv.emit("nn.global_max_pool2d", [cv.reshape(t, (1, rest, red, 1))])
    if neg:
        t = cv.emit("negative", [t])
    final = (
        tuple(1 if ax in axes else d for ax, d in enumerate(shape)) if keep else tuple(shape[ax] for ax in rest_axes)
    )
    return cv.reshape(t, final, out=out)


# -- casts and constants ----------------------------------------------------------------


@_op("Cast", "CastLike")
def _cast(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    if node.op_type == "CastLike":
        dtype = cv.need(node, ins, 1, "target_type").type.dtype
    else:
        dtype = _dtype(a.int("to"), f"Cast at node {cv.label}: target")
    if dtype == x.type.dtype and x.type.quant is None:
        return [x]
    return [cv.emit("cast", [x], {"dtype": dtype}, out=node.output[0])]


@_op("Constant")
def _constant(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    what = f"Constant at node {cv.label}"
    if "value" in a:
        arr = cv.tensor_array(a.get("value"), what)
    elif "sparse_value" in a:
        arr = cv.sparse_array(a.get("sparse_value"), what)
    elif "value_float" in a:
        arr = np.array(a.float("value_float"), dtype=np.float32)
    elif "value_floats" in a:
        arr = np.array(a.get("value_floats"), dtype=np.float32)
    elif "value_int" in a:
        arr = np.array(a.int("value_int"), dtype=np.int64)
    elif "value_ints" in a:
        arr = np.array(a.ints("value_ints"), dtype=np.int64)
    elif "value_string" in a or "value_strings" in a:
        raise UnsupportedOpError(f"{what} is a string tensor, which accel does not support")
    else:
        raise ModelError(f"{what} has no value")
    return [cv.const(arr, out=node.output[0])]


@_op("ConstantOfShape")
def _constant_of_shape(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    dims = [int(d) for d in cv.need_const(node, ins, 0, "shape").reshape(-1)]
    if any(d < 0 for d in dims) or _prod(dims) > MAX_ELEMENTS:
        raise ModelError(f"node {cv.label}: bad shape {dims}")
    value = a.get("value")
    fill = (
        cv.tensor_array(value, f"ConstantOfShape at node {cv.label}") if value is not None else np.zeros(1, np.float32)
    )
    if fill.size != 1:
        raise ModelError(f"node {cv.label}: ConstantOfShape's value must hold one element, it holds {fill.size}")
    scalar = fill.reshape(())
    if _fold_fits([], [TensorType(tuple(dims), scalar.dtype.name)]):
        return [cv.const(np.full(dims, scalar, dtype=fill.dtype), out=node.output[0])]
    # Too large to materialize at import: a broadcast of the scalar, run when the model runs.
    return [_rename(cv, cv.broadcast_to(cv.const(scalar), dims), node.output[0])]


@_op("Shape")
def _shape(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    shape = np.array(x.type.shape, dtype=np.int64)
    rank = len(shape)
    start = a.int("start", 0)
    end = a.int("end", rank) if "end" in a else rank
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [cv.const(shape[start:end], out=node.output[0])]


@_op("Size")
def _size(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "data")
    return [cv.const(np.array(x.type.size, dtype=np.int64), out=node.output[0])]


def _numpy_fold(fn: Callable[..., np.ndarray]) -> Handler:
    """A handler for an op accel evaluates only on constants (shape computations)."""

    def handler(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
        for i, v in enumerate(ins):
            if v is not None and v.const is None:
                raise ConstantOperandRequired(
                    f"{node.op_type} at node {cv.label}: input {node.input[i]!r} is computed at run time; accel "
                    f"evaluates {node.op_type} only on constants (shape computations folded at import)",
                    node.input[i],
                )
        arrays = [None if v is None else v.const for v in ins]
        try:
            _check_fold_result(cv.label, node.op_type, [x for x in arrays if x is not None])
            with np.errstate(all="ignore"):
                result = fn(a, *arrays)
        except AccelError:
            raise
        except Exception as exc:
            raise ModelError(f"node {cv.label}: evaluating {node.op_type} on constants failed: {exc}") from None
        results = result if isinstance(result, tuple) else (result,)
        return [cv.const(np.asarray(r), out=o) for r, o in zip(results, node.output, strict=False)]

    return handler


def _range(a: _Attrs, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    s, lim, d = start.item(), limit.item(), delta.item()
    if d == 0:
        raise ModelError("Range with delta 0")
    n = max(math.ceil((lim - s) / d), 0)
    _check_fold_size("Range", [n], start.dtype)
    return (s + np.arange(n) * d).astype(start.dtype) if n else np.zeros(0, dtype=start.dtype)


def _nonzero(a: _Attrs, x: np.ndarray) -> np.ndarray:
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


_FOLD_ONLY: dict[str, Callable[..., np.ndarray]] = {
    "Range": _range,
    "NonZero": _nonzero,
}
for _name, _fn in _FOLD_ONLY.items():
    _HANDLERS[_name] = _numpy_fold(_fn)

# elementwise ops with an IR op each (constant inputs fold through its kernel)
_ELEMENTWISE = {
    "Equal": "equal",
    "Less": "less",
    "LessOrEqual": "less_equal",
    "Greater": "greater",
    "GreaterOrEqual": "greater_equal",
    "Not": "logical_not",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "logical_xor",
    "Where": "where",
    "Floor": "floor",
    "Ceil": "ceil",
}


@_op(*_ELEMENTWISE)
def _elementwise(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    op = _ELEMENTWISE[node.op_type]
    args = [cv.need(node, ins, i, f"operand {i}") for i in range(get_op(op).num_inputs[0])]
    return [cv.emit(op, args, out=node.output[0])]


@_op("Mod")
def _mod_op(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, y = cv.need(node, ins, 0, "A"), cv.need(node, ins, 1, "B")
    return [cv.emit("mod", [x, y], {"fmod": bool(a.int("fmod", 0))}, out=node.output[0])]


#: ONNX ops evaluated only when all their inputs are constant.
FOLD_ONLY_OPS = tuple(sorted([*_FOLD_ONLY, "ConstantOfShape", "Shape", "Size"]))


# -- quantization ------------------------------------------------------------------------


def _quant_params(
    cv: _Importer, node: NodeProto, ins: list, si: int, zi: int, axis: int, rank: int, zp_dtype: str | None = None
) -> tuple[QuantParams, str]:
    """QuantParams from constant scale / zero-point operands, and the quantized dtype."""
    scale = cv.const_input(node, ins, si, "scale")
    if scale is None:
        raise ModelError(f"node {cv.label}: {node.op_type} needs a scale")
    zp = cv.const_input(node, ins, zi, "zero point")
    if zp is not None:
        zdt = zp.dtype.name
    else:
        zdt = zp_dtype or "uint8"
        zp = np.zeros(scale.shape, dtype=zdt)
    if scale.ndim > 1:
        raise cv.unsupported(node, "blocked quantization (scale of rank > 1) is not supported")
    if scale.ndim == 1 and scale.size > 1:
        ax = _axis(cv, axis, rank)
        q = QuantParams(scale.astype(np.float32), zp.astype(np.int64), axis=ax)
    else:
        q = QuantParams(scale.reshape(()).astype(np.float32), zp.reshape(-1)[0].astype(np.int64))
    return q, zdt


def _with_quant(cv: _Importer, node: NodeProto, x: Value, q: QuantParams, what: str) -> Value | None:
    """``x`` typed with quantization ``q``: as is, a constant re-typed, or a not-yet-used graph input re-typed."""
    if x.type.quant == q:
        return x
    if x.const is not None:
        return cv.const(x.const, f"{x.name}/q", quant=q)
    if x.type.quant is None and x in cv.unread:
        x.type = x.type.with_quant(q)
        return x
    return None


@_op("QuantizeLinear")
def _quantize(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "x")
    if a.int("block_size", 0):
        raise cv.unsupported(node, "blocked quantization is not supported")
    out_dt = None
    if "output_dtype" in a and a.int("output_dtype"):
        out_dt = _dtype(a.int("output_dtype"), f"QuantizeLinear at node {cv.label}: output")
    q, zdt = _quant_params(cv, node, ins, 1, 2, a.int("axis", 1), x.type.rank, out_dt)
    if zdt not in ("uint8", "int8"):
        raise cv.unsupported(node, f"quantizing to {zdt} is not supported (uint8 and int8 are)")
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"quantizing {x.type.dtype} data is not supported")
    if x.type.dtype != "float32":
        x = cv.emit("cast", [x], {"dtype": "float32"})
    attrs = {
        "scale": q.scale if q.axis is not None else float(q.scale),
        "zero_point": q.zero_point if q.axis is not None else int(q.zero_point),
        "axis": q.axis,
        "out_dtype": zdt,
    }
    return [cv.emit("qnn.quantize", [x], attrs, out=node.output[0])]


@_op("DequantizeLinear")
def _dequantize(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "x")
    if a.int("block_size", 0):
        raise cv.unsupported(node, "blocked quantization is not supported")
    if x.type.dtype not in ("uint8", "int8", "int32", "int16", "uint16"):
        raise cv.unsupported(node, f"dequantizing {x.type.dtype} data is not supported")
    q, _ = _quant_params(cv, node, ins, 1, 2, a.int("axis", 1), x.type.rank, x.type.dtype)
    out_dt = cv.need_const(node, ins, 1, "scale").dtype.name
    if "output_dtype" in a and a.int("output_dtype"):
        out_dt = _dtype(a.int("output_dtype"), f"DequantizeLinear at node {cv.label}: output")
    out = node.output[0]
    y = _dequant(cv, node, x, q, None if out_dt != "float32" else out)
    if out_dt != "float32":
        y = cv.emit("cast", [y], {"dtype": out_dt}, out=out)
    return [y]


def _dequant(cv: _Importer, node: NodeProto, x: Value, q: QuantParams, out: str | None) -> Value:
    """float32 ``(x - z) * s``: a qnn.dequantize when ``x`` can carry ``q`` in its type, else spelled out."""
    xq = _with_quant(cv, node, x, q, "x") if x.type.dtype in ("uint8", "int8", "int32") else None
    if xq is not None:
        return cv.emit("qnn.dequantize", [xq], {"axis": q.axis}, out=out)
    # the value already carries other parameters: (float(x) - z) * s, as ONNX defines it
    shape = [1] * x.type.rank
    if q.axis is not None:
        shape[q.axis] = q.scale.size
    z = cv.const(q.zero_point.astype(np.float32).reshape(shape if q.axis is not None else ()))
    s = cv.const(q.scale.astype(np.float32).reshape(shape if q.axis is not None else ()))
    xf = cv.emit("cast", [x], {"dtype": "float32"})
    return cv.emit("multiply", [cv.emit("subtract", [xf, z]), s], out=out)


def _qinput(cv: _Importer, node: NodeProto, x: Value, q: QuantParams, what: str) -> Value:
    xq = _with_quant(cv, node, x, q, what)
    if xq is None:
        raise cv.unsupported(
            node,
            f"{what} {x.name!r} already carries quantization {x.type.quant!r} that differs from the node's "
            "scale/zero point",
        )
    return xq


@_op("QLinearConv")
def _qlinear_conv(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, w = cv.need(node, ins, 0, "x"), cv.need(node, ins, 3, "w")
    b = ins[8] if len(ins) > 8 else None
    qx, _ = _quant_params(cv, node, ins, 1, 2, 1, x.type.rank, x.type.dtype)
    w_arr = cv.need_const(node, ins, 3, "weight")
    qw, _ = _quant_params(cv, node, ins, 4, 5, 0, w.type.rank, w.type.dtype)
    qy, ydt = _quant_params(cv, node, ins, 6, 7, 1, x.type.rank, x.type.dtype)
    if qx.axis is not None or qy.axis is not None:
        raise cv.unsupported(node, "per-channel output quantization is not supported")
    rank = x.type.rank
    kernel = _weight_kernel(cv, node, a, w)
    p = _spatial_params(cv, node, a, x, kernel)
    xq = _qinput(cv, node, x, qx, "input")
    wv = cv.const(
        w_arr if rank == 4 else w_arr.reshape((*w_arr.shape[:2], 1, *w_arr.shape[2:])), f"{node.input[3]}/q", quant=qw
    )
    attrs = {"strides": p["strides"], "padding": p["padding"], "dilation": p["dilation"], "groups": a.int("group", 1)}
    acc = cv.emit("qnn.conv2d", [_to_2d(cv, xq), wv], attrs)
    if b is not None:
        bias = cv.need_const(node, ins, 8, "bias")
        acc = cv.emit("nn.bias_add", [acc, cv.const(bias.astype(np.int32), f"{node.input[8]}/q")], {"axis": 1})
    y = cv.emit(
        "qnn.requantize", [acc], {"out_scale": float(qy.scale), "out_zero_point": int(qy.zero_point), "out_dtype": ydt}
    )
    return [_from_2d(cv, y, rank, node.output[0])]


@_op("QLinearMatMul")
def _qlinear_matmul(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    A, B = cv.need(node, ins, 0, "a"), cv.need(node, ins, 3, "b")
    qa, _ = _quant_params(cv, node, ins, 1, 2, -1, A.type.rank, A.type.dtype)
    qb, _ = _quant_params(cv, node, ins, 4, 5, -1, B.type.rank, B.type.dtype)
    qy, ydt = _quant_params(cv, node, ins, 6, 7, -1, max(A.type.rank, B.type.rank), A.type.dtype)
    if qa.axis is not None or qy.axis is not None:
        raise cv.unsupported(node, "per-axis quantization of a or y is not supported")
    out = node.output[0]
    if B.const is not None and B.type.rank == 2 and A.type.rank >= 2:
        # weight [N, K] = B.T; a per-column scale of B becomes per output channel (axis 0)
        qw = QuantParams(qb.scale, qb.zero_point, axis=0) if qb.axis is not None else qb
        w = cv.const(np.ascontiguousarray(B.const.T), f"{node.input[3]}/q", quant=qw)
        acc = cv.emit("qnn.dense", [_qinput(cv, node, A, qa, "input a"), w])
        return [
            cv.emit(
                "qnn.requantize",
                [acc],
                {"out_scale": float(qy.scale), "out_zero_point": int(qy.zero_point), "out_dtype": ydt},
                out=out,
            )
        ]

    # general case: dequantize, float matmul (nn.batch_matmul), quantize
    y = _matmul_values(cv, _dequant(cv, node, A, qa, None), _dequant(cv, node, B, qb, None), None)
    attrs = {"scale": float(qy.scale), "zero_point": int(qy.zero_point), "axis": None, "out_dtype": ydt}
    return [cv.emit("qnn.quantize", [y], attrs, out=out)]


#: ONNX ops (default domain) the frontend converts, sorted.
SUPPORTED_OPS = tuple(sorted(_HANDLERS))
