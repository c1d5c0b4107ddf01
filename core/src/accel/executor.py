"""The run core: a graph planned once, then run many times, by one loop.

A :class:`Program` is the one place a graph becomes something that runs. It
is planned once: values live in numbered slots, each node becomes a step, and
each slot is dropped after its last reader so peak memory follows liveness.
A step is one of two kinds:

- a **host** step runs a numpy reference kernel bound to its node ahead of
  time (``OpDef.bind``, which lets kernels pre-pack constant weights);
  ``fn(*arrays)`` returns its outputs, checked against the node's types;
- a **backend** step runs a partition on its backend's runtime handle;
  ``fn(inputs, outputs)`` writes into buffers the program planned. Outputs
  that never reach the caller share one arena, laid out by liveness (two
  tensors share bytes only if their lifetimes do not overlap; a host op that
  may return a view of its input keeps that input's bytes alive as long as
  the view).

Inputs are checked at one boundary (:meth:`Program.check_inputs`): names,
shapes and dtypes, then converted to what every kernel and runtime expects
(native byte order, aligned). ``run`` keeps all per-call state local and
takes its arena from a pool, so one program may run from several threads.

:class:`ReferenceExecutor` is a program of host steps only (partitions, too,
run their bodies on the reference kernels): the oracle backends are tested
against. :class:`accel.runtime.Executable` binds partitions to their
backends' handles.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.errors import BackendRuntimeError, GraphError, InputError
from accel.ir import CALL_OP, Graph, Node, TensorType, collector_paused
from accel.ops.registry import OpContext, get_op

#: Byte alignment of arena tensors.
ALIGN = 64


@dataclass(frozen=True)
class StepKind:
    """What :func:`Program` binds a node to: a host kernel or a backend handle's ``run``."""

    backend: bool  # False: fn(*arrays) -> array(s); True: fn(inputs, outputs) fills outputs
    fn: Callable[..., Any]
    label: str  # profile key and error prefix


@dataclass(frozen=True)
class _Step:
    node: Node
    backend: bool
    fn: Callable[..., Any]
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    out_types: tuple[TensorType, ...]
    out_dtypes: tuple[np.dtype, ...]  # numpy dtypes of out_types: compared without building names
    free: tuple[int, ...]
    label: str


class Program:
    """A graph planned for running: ``run({name: array}) -> {name: array}``.

    ``bind(node)`` says how each node runs (a :class:`StepKind`); the default
    binds every node to the reference kernels.
    """

    def __init__(self, graph: Graph, bind: Callable[[Node], StepKind] | None = None):
        with collector_paused():  # (a step, slot and type per node of a large graph)
            self._plan(graph, bind)

    def _plan(self, graph: Graph, bind: Callable[[Node], StepKind] | None) -> None:
        graph.lint(check_types=False)
        bind = bind or host_step
        self.graph = graph
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
        pending: list[tuple[Node, StepKind, tuple[int, ...], tuple[int, ...]]] = []
        for node in graph.nodes:
            ins = tuple(slot(v) for v in node.inputs)
            outs = tuple(slot(v) for v in node.outputs)
            pending.append((node, bind(node), ins, outs))
        outputs = [slot(v) for v in graph.outputs]
        self._nslots = len(types)
        self._types = types
        self._consts = consts
        self._inputs = inputs
        self._outputs = outputs
        self._input_types = [(v.name, v.type) for v in graph.inputs]
        # what check_inputs' one-pass test compares: numpy's built-in dtypes are single objects
        self._input_exact = [(v.name, v.type.shape, np.dtype(v.type.np_dtype)) for v in graph.inputs]
        self.input_names = [v.name for v in graph.inputs]
        self.output_names = [v.name for v in graph.outputs]

        # Liveness: a slot is dropped after its last reader, unless the caller gets it
        # (an output) or it is not ours to drop (a constant, a graph input).
        n = len(pending)
        keep = set(outputs) | {s for s, _ in consts} | set(inputs)
        last = [-1] * self._nslots
        for i, (_, _, ins, outs) in enumerate(pending):
            for s in (*ins, *outs):
                last[s] = i
        frees: list[list[int]] = [[] for _ in range(n)]
        for s in range(self._nslots):
            if s not in keep and last[s] >= 0:
                frees[last[s]].append(s)
        self._steps = [
            _Step(
                node,
                kind.backend,
                kind.fn,
                ins,
                outs,
                tuple(v.type for v in node.outputs),
                tuple(v.type.np_dtype for v in node.outputs),
                tuple(frees[i]),
                kind.label,
            )
            for i, (node, kind, ins, outs) in enumerate(pending)
        ]
        self._offsets, self._arena_size = self._plan_arena(last)
        self._has_backend = any(s.backend for s in self._steps)
        self._loop = self._plan_loop()
        # what every run starts from: the constants in their slots
        self._env: list[Any] = [None] * self._nslots
        for s, c in consts:
            self._env[s] = c
        # arenas free for a run: list.pop and list.append are atomic, so concurrent runs need no lock
        self._pool: list[list[Any]] = []

    def _plan_loop(self) -> list[tuple[Any, ...]]:
        """Each step as the run loop reads it, with what does not depend on the inputs worked out once.

        A backend step's input needs the contiguity check unless a backend step wrote it (into
        the arena or a new array: contiguous and aligned); its outputs are arena views, except those that reach the caller
        (new arrays each run). A host step's kernel is called with its one input directly when
        it has one.
        """
        made_by_backend = {s for st in self._steps if st.backend for s in st.outs}
        loop: list[tuple[Any, ...]] = []
        for st in self._steps:
            if st.backend:
                strided = any(s not in made_by_backend for s in st.ins)
                fresh = tuple(
                    (k, s, t.shape, dt)
                    for k, (s, t, dt) in enumerate(zip(st.outs, st.out_types, st.out_dtypes))
                    if s not in self._offsets
                )
                loop.append((True, st.fn, st.ins, st.outs, strided, fresh, st.free, st))
            else:
                checks = tuple(zip(st.outs, (t.shape for t in st.out_types), st.out_dtypes))
                loop.append((False, st.fn, st.ins, st.outs, len(st.ins) == 1, checks, st.free, st))
        return loop

    def _plan_arena(self, last: list[int]) -> tuple[dict[int, int], int]:
        """Arena offsets of the backend steps' outputs that never reach the caller."""
        steps = self._steps
        if not any(s.backend for s in steps):
            return {}, 0
        outputs = set(self._outputs)
        # a host op's outputs may be views of its inputs: an input's bytes live as long as those outputs
        end = list(last)
        escapes = [s in outputs for s in range(self._nslots)]
        for step in reversed(steps):
            if step.backend:
                continue
            for s in step.ins:
                for o in step.outs:
                    end[s] = max(end[s], end[o])
                    escapes[s] = escapes[s] or escapes[o]
        defined = [-1] * self._nslots
        for i, step in enumerate(steps):
            for s in step.outs:
                defined[s] = i
        planned = [s for step in steps if step.backend for s in step.outs if not escapes[s]]
        return plan_offsets([(s, defined[s], end[s], self._types[s].nbytes) for s in planned])

    # -- introspection -----------------------------------------------------------------
    @property
    def input_types(self) -> dict[str, TensorType]:
        return dict(self._input_types)

    @property
    def output_types(self) -> dict[str, TensorType]:
        return {v.name: v.type for v in self.graph.outputs}

    @property
    def arena_bytes(self) -> int:
        """Bytes of the intermediate arena one run uses."""
        return self._arena_size

    @property
    def peak_bytes(self) -> int:
        """An upper bound of the bytes one run holds at once: graph inputs, constants, the arena, and
        the intermediate values alive together (a host result that is a view counted as a copy;
        kernels' own scratch memory not counted)."""
        types = self._types
        fixed = sum(types[s].nbytes for s in {*self._inputs, *(s for s, _ in self._consts)})
        arena = self._offsets
        live = peak = 0
        for step in self._steps:
            live += sum(types[s].nbytes for s in step.outs if s not in arena)
            peak = max(peak, live)
            live -= sum(types[s].nbytes for s in step.free if s not in arena)
        return fixed + self._arena_size + peak

    @property
    def partitions(self) -> list[Node]:
        """The nodes that run on a backend handle."""
        return [s.node for s in self._steps if s.backend]

    # -- the input boundary ------------------------------------------------------------
    def check_inputs(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        """Validate names, shapes and dtypes; return the arrays in graph-input order.

        Arrays in the other byte order are converted, misaligned ones copied:
        past this point every array is native and aligned.
        """
        if type(inputs) is dict and len(inputs) == len(self._input_exact):
            # the usual call, in one pass: a dict of exactly the inputs, native aligned arrays of their types
            arrays = []
            for name, shape, dtype in self._input_exact:
                a = inputs.get(name)
                if type(a) is not np.ndarray or a.dtype is not dtype or a.shape != shape or not a.flags.aligned:
                    break
                arrays.append(a)
            else:
                return arrays
        if not isinstance(inputs, Mapping):
            raise InputError(f"inputs must be a mapping {{name: array}}, got a {type(inputs).__name__}")
        unknown = sorted(set(inputs) - set(self.input_names))
        if unknown:
            raise InputError(f"unknown input(s) {', '.join(map(repr, unknown))}; the model takes {self._signature()}")
        arrays = []
        for name, t in self._input_types:
            if name not in inputs:
                raise InputError(f"missing input {name!r}; the model takes {self._signature()}")
            a = np.asarray(inputs[name])
            if a.dtype.name != t.dtype or tuple(a.shape) != t.shape:
                raise InputError(
                    f"input {name!r} must be {t.dtype}[{','.join(map(str, t.shape))}], "
                    f"got {a.dtype.name}[{','.join(map(str, a.shape))}]"
                )
            if not a.dtype.isnative:
                a = a.astype(a.dtype.newbyteorder("="))
            elif not a.flags.aligned:
                a = a.copy()
            arrays.append(a)
        return arrays

    def _signature(self) -> str:
        return ", ".join(f"{name}: {t.dtype}[{','.join(map(str, t.shape))}]" for name, t in self._input_types)

    # -- running -----------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any], *, profile: dict[str, float] | None = None) -> dict[str, np.ndarray]:
        """Run once. With ``profile`` (a dict), add each step's seconds to ``profile[label]``
        (the op for a host step, ``backend:partition`` for a backend step)."""
        arrays = self.check_inputs(inputs)
        return dict(zip(self.output_names, self.run_positional(arrays, profile=profile)))

    def run_positional(self, arrays: list[np.ndarray], *, profile: dict[str, float] | None = None) -> list[np.ndarray]:
        """Run on arrays already checked (:meth:`check_inputs`), in graph-input order."""
        if not self._has_backend:
            return self._run(arrays, self._env, profile)
        start = self._take_arena()
        try:
            return self._run(arrays, start, profile)
        finally:
            self._pool.append(start)

    def _take_arena(self) -> list[Any]:
        """A run's starting slots: the constants, and the arena's views where the backend steps write."""
        try:
            return self._pool.pop()
        except IndexError:
            pass
        buf = np.empty(max(self._arena_size, 1), dtype=np.uint8)
        env = list(self._env)
        for s, off in self._offsets.items():
            t = self._types[s]
            env[s] = np.ndarray(t.shape, dtype=t.np_dtype, buffer=buf, offset=off)  # (each keeps buf alive)
        return env

    def _run(self, arrays: list[np.ndarray], start: list[Any], profile: dict[str, float] | None) -> list[np.ndarray]:
        env = start.copy()
        for s, a in zip(self._inputs, arrays):
            env[s] = a
        clock = time.perf_counter if profile is not None else None
        # plain tuples: unpacking them is cheaper than attribute lookups on every step
        for backend, fn, ins, outs, a, b, free, step in self._loop:
            t0 = clock() if clock is not None else 0.0
            if backend:  # a: an input may be strided; b: outputs that reach the caller
                args = [env[i] for i in ins]
                if a:
                    args = [x if x.flags.c_contiguous and x.flags.aligned else _ready(x) for x in args]
                buffers = [env[s] for s in outs]
                for k, s, shape, dt in b:
                    buffers[k] = env[s] = np.empty(shape, dtype=dt)
                try:
                    fn(args, buffers)
                except (RuntimeError, ValueError) as exc:
                    raise BackendRuntimeError(f"partition {step.label}: {exc}") from None
            else:  # a: one input; b: (slot, shape, dtype) of each output
                result = fn(env[ins[0]]) if a else fn(*[env[i] for i in ins])
                if type(result) is np.ndarray and len(b) == 1:
                    s, shape, dt = b[0]
                    if (result.dtype is not dt and result.dtype != dt) or result.shape != shape:
                        self._wrong_result(step, 0, result)
                    env[s] = result
                else:
                    results = result if isinstance(result, (tuple, list)) else (result,)
                    if len(results) != len(outs):
                        raise GraphError(
                            f"kernel of {step.node.op} at node {step.node.name!r} returned {len(results)} outputs, "
                            f"expected {len(outs)}"
                        )
                    for k, (r, (s, shape, dt)) in enumerate(zip(results, b)):
                        if r.dtype != dt or r.shape != shape:
                            self._wrong_result(step, k, r)
                        env[s] = r
            if clock is not None and profile is not None:
                profile[step.label] = profile.get(step.label, 0.0) + clock() - t0
            for s in free:
                env[s] = None
        return [env[s] for s in self._outputs]

    def _wrong_result(self, step: _Step, k: int, r: np.ndarray) -> None:
        t = self._types[step.outs[k]]
        raise GraphError(
            f"kernel of {step.node.op} at node {step.node.name!r} returned "
            f"{_dtype_text(r.dtype)}[{','.join(map(str, r.shape))}], its type rule says {t}"
        )


def _dtype_text(dt: np.dtype) -> str:
    """A dtype's name, with its byte order when that is not the machine's (``float32`` reads the same in both)."""
    if dt.isnative:
        return dt.name
    return f"{dt.name} ({'big' if dt.byteorder == '>' else 'little'}-endian)"


def _ready(a: np.ndarray) -> np.ndarray:
    """``a`` as a runtime reads it: C-contiguous and aligned (a host result may be a strided view)."""
    flags = a.flags
    if flags.c_contiguous and flags.aligned:
        return a
    return np.array(a, order="C")


def host_step(node: Node) -> StepKind:
    """A node bound to its reference kernel (a call: its body, run by a nested program)."""
    if node.op == CALL_OP:
        assert node.body is not None
        inner = Program(node.body)
        return StepKind(False, lambda *arrays: tuple(inner.run_positional(list(arrays))), node.op)
    return StepKind(False, get_op(node.op).bind(OpContext.of(node)), node.op)


class ReferenceExecutor(Program):
    """A graph bound to the reference kernels (partitions included): the oracle."""

    def __init__(self, graph: Graph):
        super().__init__(graph, host_step)


def plan_offsets(items: list[tuple[int, int, int, int]], align: int = ALIGN) -> tuple[dict[int, int], int]:
    """Offsets for ``(key, first step, last step, bytes)`` so that live tensors never share bytes.

    Greedy by size (largest first, then earliest): each tensor goes to the lowest
    ``align``-ed offset that does not overlap a placed tensor whose lifetime
    overlaps. Returns the offsets by key and the arena size. Backend compilers that
    plan an arena at compile time (ethosn's) use the same planner.

    Placed tensors are found through the blocks of :data:`_PLAN_BLOCK` steps their
    lifetimes cover, so a tensor is compared with those alive near its own steps,
    not with every tensor placed before it (which made planning a large graph quadratic).
    """
    blocks: dict[int, list[tuple[int, int, int, int]]] = {}  # block -> (offset, size, start, end) placed
    offsets: dict[int, int] = {}
    total = 0
    for s, start, stop, size in sorted(items, key=lambda x: (-x[3], x[1])):
        size = (max(size, 1) + align - 1) // align * align
        clashes = []
        for block in range(start // _PLAN_BLOCK, stop // _PLAN_BLOCK + 1):
            for o, sz, a, b in blocks.get(block, ()):
                # a placed tensor alive in several blocks of this range counts once: in the
                # block where both lifetimes first meet
                if not (b < start or stop < a) and max(a, start) // _PLAN_BLOCK == block:
                    clashes.append((o, o + sz))
        clashes.sort()
        offset = 0
        for lo, hi in clashes:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        record = (offset, size, start, stop)
        for block in range(start // _PLAN_BLOCK, stop // _PLAN_BLOCK + 1):
            found = blocks.get(block)
            if found is None:
                blocks[block] = [record]
            else:
                found.append(record)
        offsets[s] = offset
        total = max(total, offset + size)
    return offsets, total


#: Steps per block of :func:`plan_offsets`' index of placed tensors.
_PLAN_BLOCK = 16
