"""In-process stand-ins for plugins: fake entry points and a Python runtime with an ABI capsule.

The runtime here does what a compiled one does, in numpy, so the core's
runtime, artifact and discovery logic can be tested without a compiler. The
real thing (a C++ runtime built with accel-sdk) is tested in tests/.
"""

from __future__ import annotations

import ctypes
import json
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.backend import ABI_VERSION, Backend, PatternEntry
from accel.ir import Graph
from accel.pattern import is_op, wildcard

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class _Table(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32)]


def runtime_module(name: str, abi_version: int = ABI_VERSION) -> types.ModuleType:
    """A module shaped like a compiled runtime: ``__accel_abi__`` capsule and ``Runtime(blob, threads)``."""
    module = types.ModuleType(f"fake_runtime_{name}")
    table = _Table(abi_version)
    module._table = table  # keeps the struct alive as long as the capsule
    module.__accel_abi__ = _new_capsule(ctypes.addressof(table), b"accel.runtime_api", None)
    module.ABI_VERSION = abi_version
    module.Runtime = JsonRuntime
    return module


_UNARY = {"nn.relu": lambda x: np.maximum(x, 0), "abs": np.abs}


class JsonRuntime:
    """Runs a blob of ``{"ops": [[op, [input ids], output id]], "inputs": [...], "outputs": [...]}``."""

    def __init__(self, blob: bytes, threads: int = 0):
        self.threads = threads if threads > 0 else 1
        try:
            doc = json.loads(bytes(blob))
            self.ops = [(str(op), [int(i) for i in ins], int(out)) for op, ins, out in doc["ops"]]
            self.inputs = [int(i) for i in doc["inputs"]]
            self.outputs = [int(i) for i in doc["outputs"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"bad blob: {exc}") from None
        for op, _, _ in self.ops:
            if op not in _UNARY and op != "add":
                raise ValueError(f"bad blob: unknown op {op!r}")

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise RuntimeError("wrong number of tensors")
        env = dict(zip(self.inputs, inputs))
        for op, ins, out in self.ops:
            args = [env[i] for i in ins]
            env[out] = np.add(*args) if op == "add" else _UNARY[op](*args)
        for o, buf in zip(self.outputs, outputs):
            buf[...] = env[o]


def serialize_json(graph: Graph) -> bytes:
    """Composites are flattened: their body's inputs alias the call's arguments."""
    ids: dict[int, int] = {}

    def vid(v: Any) -> int:
        return ids.setdefault(id(v), len(ids))

    ops: list[list[Any]] = []

    def emit(g: Graph) -> None:
        for node in g.nodes:
            if node.body is not None:
                for param, arg in zip(node.body.inputs, node.inputs):
                    ids[id(param)] = vid(arg)
                emit(node.body)
                for inner, outer in zip(node.body.outputs, node.outputs):
                    ids[id(outer)] = vid(inner)
            else:
                ops.append([node.op, [vid(v) for v in node.inputs], vid(node.output)])

    inputs = [vid(v) for v in graph.inputs]
    emit(graph)
    doc = {"ops": ops, "inputs": inputs, "outputs": [vid(v) for v in graph.outputs]}
    return json.dumps(doc).encode()


class FakeBackend(Backend):
    """fp32 relu / abs / add, NCHW, with a JSON blob and a numpy runtime."""

    name = "fake"
    distribution = "accel-fake"
    version = "1.2.3"
    abi = ABI_VERSION

    def op_checks(self):
        return {"nn.relu": lambda n: None, "abs": lambda n: None, "add": lambda n: None}

    def pattern_table(self):
        return [PatternEntry("relu_add", is_op("nn.relu")(is_op("add")(wildcard(), wildcard())))]

    def serialize(self, graph: Graph) -> bytes:
        return serialize_json(graph)

    def runtime_module(self) -> types.ModuleType:
        return _module_for(type(self).name, type(self).abi)


_MODULES: dict[tuple[str, int], types.ModuleType] = {}


def _module_for(name: str, abi: int) -> types.ModuleType:
    key = (name, abi)
    if key not in _MODULES:
        _MODULES[key] = runtime_module(name, abi)
    return _MODULES[key]


@dataclass
class FakeDist:
    name: str
    version: str


@dataclass
class FakeEntryPoint:
    """What importlib.metadata.EntryPoint offers discovery: name, value, dist, load()."""

    name: str
    value: str
    target: Any
    dist: FakeDist | None = None

    def load(self) -> Any:
        if isinstance(self.target, BaseException):
            raise self.target
        return self.target
