"""Running a partitioned graph: host steps and backend runtime handles over planned buffers.

An :class:`Executable` is built once from the host graph of a compile (see
:mod:`accel.partition`), the blob of every partition and the backends. Host
nodes run on the numpy reference kernels; each partition (a ``call`` node
with ``compiler=<backend>``) runs on a handle its backend's compiled runtime
created from the blob (the runtime validated the blob then).

Buffers: every tensor a backend writes lands directly in a buffer the core
planned, so nothing is copied at partition boundaries. Intermediates share one
arena per run, laid out ahead of time by liveness (two tensors share bytes
only if their lifetimes do not overlap; a host op that may return a view of
its input keeps that input's bytes alive as long as the view). Graph outputs
get their own arrays. ``run`` takes an arena from a pool and gives it back, so
one Executable may run from several threads at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from accel.backend import ABI_VERSION, Backend, runtime_abi_version
from accel.errors import AbiMismatchError, AccelError, BackendRuntimeError, GraphError, PluginError
from accel.executor import ReferenceExecutor, _bind
from accel.ir import CALL_OP, Graph, Node, TensorType

ALIGN = 64

_RUNTIMES: dict[type[Backend], ModuleType] = {}
_LOCK = threading.Lock()


def load_runtime(backend: Backend) -> ModuleType:
    """The compiled runtime module of ``backend``, after checking its ABI version."""
    cls = type(backend)
    with _LOCK:
        module = _RUNTIMES.get(cls)
        if module is not None:
            return module
        try:
            module = backend.runtime_module()
        except AccelError:
            raise
        except Exception as exc:
            raise PluginError(
                f"backend {backend.name} ({backend.distribution} {backend.version}): its runtime cannot be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        version = runtime_abi_version(module, backend.name)
        if version != ABI_VERSION:
            raise AbiMismatchError(
                f"backend {backend.name} ({backend.distribution} {backend.version}): its runtime was built for "
                f"runtime ABI {version}, this accel-core speaks {ABI_VERSION}"
            )
        if not hasattr(module, "Runtime"):
            raise PluginError(f"backend {backend.name}: its runtime module defines no Runtime class")
        _RUNTIMES[cls] = module
        return module


def create_handle(backend: Backend, blob: bytes, partition: str) -> Any:
    """A runtime handle for one partition's blob; a refused blob is a :class:`BackendRuntimeError`."""
    module = load_runtime(backend)
    try:
        return module.Runtime(blob)
    except (ValueError, RuntimeError) as exc:
        raise BackendRuntimeError(f"{backend.name} refused the blob of partition {partition!r}: {exc}") from None


@dataclass(frozen=True)
class _Step:
    node: Node
    external: bool
    fn: Callable[..., Any]  # host: kernel(*arrays); external: handle.run(inputs, outputs)
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    free: tuple[int, ...]
    label: str


class Executable:
    """A compiled model ready to run: ``run({name: array}) -> {name: array}``."""

    def __init__(self, graph: Graph, handles: Mapping[str, Any]):
        """``handles`` maps each partition node's name to its runtime handle."""
        graph.lint(check_types=False)
        self.graph = graph
        self._checker = ReferenceExecutor(Graph(graph.inputs, graph.inputs, [], name="inputs"))
        slot_of: dict[int, int] = {}
        types: list[TensorType] = []
        consts: list[tuple[int, np.ndarray]] = []

        def slot(v: Any) -> int:
            s = slot_of.get(id(v))
            if s is None:
                s = slot_of[id(v)] = len(types)
                types.append(v.type)
                if v.const is not None:
                    consts.append((s, v.const))
            return s

        inputs = [slot(v) for v in graph.inputs]
        steps: list[tuple[Node, bool, Callable[..., Any], tuple[int, ...], tuple[int, ...], str]] = []
        for node in graph.nodes:
            ins = tuple(slot(v) for v in node.inputs)
            outs = tuple(slot(v) for v in node.outputs)
            compiler = node.attrs.get("compiler") if node.op == CALL_OP else None
            if compiler is not None:
                handle = handles.get(node.name)
                if handle is None:
                    raise GraphError(f"partition {node.name!r} ({compiler}) has no runtime handle")
                steps.append((node, True, handle.run, ins, outs, f"{compiler}:{node.name}"))
            else:
                steps.append((node, False, _bind(node), ins, outs, node.op))
        outputs = [slot(v) for v in graph.outputs]
        self._nslots = len(types)
        self._types = types
        self._consts = consts
        self._inputs = inputs
        self._outputs = outputs
        self.input_names = [v.name for v in graph.inputs]
        self.output_names = [v.name for v in graph.outputs]

        # Liveness: a slot dies after its last reader; a host op's outputs may be views of
        # its inputs, so an input's bytes live as long as those outputs.
        n = len(steps)
        keep = set(outputs) | {s for s, _ in consts} | set(inputs)
        last = [-1] * self._nslots
        for i, (_, _, _, ins, outs, _) in enumerate(steps):
            for s in (*ins, *outs):
                last[s] = i
        end = list(last)
        escapes = [s in set(outputs) for s in range(self._nslots)]
        for i in range(n - 1, -1, -1):
            _, external, _, ins, outs, _ = steps[i]
            if external:
                continue
            for s in ins:
                for o in outs:
                    end[s] = max(end[s], end[o])
                    escapes[s] = escapes[s] or escapes[o]
        frees: list[list[int]] = [[] for _ in range(n)]
        for s in range(self._nslots):
            if s not in keep and last[s] >= 0:
                frees[last[s]].append(s)

        # Arena plan: outputs of external steps that never escape to the caller.
        defined = [-1] * self._nslots
        for i, (_, _, _, _, outs, _) in enumerate(steps):
            for s in outs:
                defined[s] = i
        planned = [
            s for i, (_, external, _, _, outs, _) in enumerate(steps) if external for s in outs if not escapes[s]
        ]
        self._offsets, self._arena_size = _plan([(s, defined[s], end[s], types[s].nbytes) for s in planned])
        self._fresh = {s for _, external, _, _, outs, _ in steps if external for s in outs} - set(self._offsets)
        self._steps = [
            _Step(node, external, fn, ins, outs, tuple(frees[i]), label)
            for i, (node, external, fn, ins, outs, label) in enumerate(steps)
        ]
        self._pool: list[tuple[np.ndarray, dict[int, np.ndarray]]] = []
        self._pool_lock = threading.Lock()

    # -- introspection -----------------------------------------------------------------
    @property
    def input_types(self) -> dict[str, TensorType]:
        return {v.name: v.type for v in self.graph.inputs}

    @property
    def output_types(self) -> dict[str, TensorType]:
        return {v.name: v.type for v in self.graph.outputs}

    @property
    def arena_bytes(self) -> int:
        """Bytes of the intermediate arena one run uses."""
        return self._arena_size

    @property
    def partitions(self) -> list[Node]:
        return [s.node for s in self._steps if s.external]

    # -- running -----------------------------------------------------------------------
    def _arena(self) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        buf = np.empty(max(self._arena_size, 1), dtype=np.uint8)
        views = {}
        for s, off in self._offsets.items():
            t = self._types[s]
            views[s] = np.ndarray(t.shape, dtype=t.np_dtype, buffer=buf, offset=off)
        return buf, views

    def run(self, inputs: Mapping[str, Any], *, profile: dict[str, float] | None = None) -> dict[str, np.ndarray]:
        """Run once. With ``profile`` (a dict), add each step's seconds to ``profile[label]``."""
        arrays = self._checker.check_inputs(inputs)
        return dict(zip(self.output_names, self.run_positional(arrays, profile=profile)))

    def run_positional(self, arrays: list[np.ndarray], *, profile: dict[str, float] | None = None) -> list[np.ndarray]:
        arena = self._arena()
        views = arena[1]
        try:
            env: list[Any] = [None] * self._nslots
            for s, c in self._consts:
                env[s] = c
            for s, a in zip(self._inputs, arrays):
                env[s] = a
            types = self._types
            for step in self._steps:
                t0 = time.perf_counter() if profile is not None else 0.0
                if step.external:
                    ins = [np.ascontiguousarray(env[i]) for i in step.ins]
                    outs = []
                    for s in step.outs:
                        out = views.get(s)
                        if out is None:
                            t = types[s]
                            out = np.empty(t.shape, dtype=t.np_dtype)
                        outs.append(out)
                        env[s] = out
                    try:
                        step.fn(ins, outs)
                    except (RuntimeError, ValueError) as exc:
                        raise BackendRuntimeError(f"partition {step.label}: {exc}") from None
                else:
                    result = step.fn(*[env[i] for i in step.ins])
                    results = result if isinstance(result, (tuple, list)) else (result,)
                    for s, r in zip(step.outs, results):
                        t = types[s]
                        if r.shape != t.shape or r.dtype != t.np_dtype:
                            raise GraphError(
                                f"kernel of {step.node.op} at node {step.node.name!r} returned "
                                f"{r.dtype.name}[{','.join(map(str, r.shape))}], its type rule says {t}"
                            )
                        env[s] = r
                if profile is not None:
                    profile[step.label] = profile.get(step.label, 0.0) + time.perf_counter() - t0
                for s in step.free:
                    env[s] = None
            return [env[s] for s in self._outputs]
        finally:
            with self._pool_lock:
                self._pool.append(arena)


def _plan(items: list[tuple[int, int, int, int]]) -> tuple[dict[int, int], int]:
    """Offsets for ``(slot, first step, last step, bytes)`` so that live tensors never share bytes.

    Greedy by size (largest first): each tensor goes to the lowest aligned
    offset that does not overlap a placed tensor whose lifetime overlaps.
    """
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, start, end)
    offsets: dict[int, int] = {}
    total = 0
    for s, start, stop, size in sorted(items, key=lambda x: (-x[3], x[1])):
        size = (max(size, 1) + ALIGN - 1) // ALIGN * ALIGN
        clashes = sorted((o, o + sz) for o, sz, a, b in placed if not (b < start or stop < a))
        offset = 0
        for lo, hi in clashes:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((offset, size, start, stop))
        offsets[s] = offset
        total = max(total, offset + size)
    return offsets, total
