"""The reference executor: runs a graph on the numpy reference kernels.

It is the host path of every compiled model and the oracle backends are tested
against, so it is planned once and cheap per run: each node is bound to its
kernel ahead of time (``OpDef.bind``, which lets kernels pre-pack constant
weights), values live in numbered slots, and each slot is dropped after its
last reader so peak memory follows liveness. ``run`` keeps all per-call state
local, so one executor may be run from several threads at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.errors import GraphError, InputError
from accel.ir import CALL_OP, Graph, Node, TensorType
from accel.ops.registry import OpContext, get_op


@dataclass(frozen=True)
class _Step:
    node: Node
    fn: Callable[..., Any]
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    out_types: tuple[TensorType, ...]
    out_dtypes: tuple[np.dtype, ...]  # numpy dtypes of out_types: compared without building names
    free: tuple[int, ...]


class ReferenceExecutor:
    """A graph bound to the reference kernels. ``run({name: array}) -> {name: array}``."""

    def __init__(self, graph: Graph):
        graph.lint(check_types=False)
        self.graph = graph
        slot_of: dict[int, int] = {}
        self._consts: list[tuple[int, np.ndarray]] = []

        def slot(v: Any) -> int:
            s = slot_of.get(id(v))
            if s is None:
                s = slot_of[id(v)] = len(slot_of)
                if v.const is not None:
                    self._consts.append((s, v.const))
            return s

        self._inputs = [(v.name, slot(v), v.type) for v in graph.inputs]
        pending: list[tuple[Node, Callable[..., Any], tuple[int, ...], tuple[int, ...]]] = []
        for node in graph.nodes:
            ins = tuple(slot(v) for v in node.inputs)
            outs = tuple(slot(v) for v in node.outputs)
            pending.append((node, _bind(node), ins, outs))
        self._outputs = [(v.name, slot(v)) for v in graph.outputs]

        # Liveness: free a slot after its last reader, unless it is a graph output
        # or a constant (constants are shared, never copied).
        keep = {s for _, s in self._outputs} | {s for s, _ in self._consts}
        last_use: dict[int, int] = {}
        for i, (_, _, ins, outs) in enumerate(pending):
            for s in ins + outs:
                last_use[s] = i
        frees: list[list[int]] = [[] for _ in pending]
        for s, i in last_use.items():
            if s not in keep:
                frees[i].append(s)
        self._steps = [
            _Step(
                node,
                fn,
                ins,
                outs,
                tuple(v.type for v in node.outputs),
                tuple(v.type.np_dtype for v in node.outputs),
                tuple(frees[i]),
            )
            for i, (node, fn, ins, outs) in enumerate(pending)
        ]
        self._nslots = len(slot_of)

    @property
    def input_types(self) -> dict[str, TensorType]:
        return {name: t for name, _, t in self._inputs}

    @property
    def output_names(self) -> list[str]:
        return [name for name, _ in self._outputs]

    def check_inputs(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        """Validate names, shapes and dtypes; return the arrays in graph-input order."""
        expected = {name for name, _, _ in self._inputs}
        unknown = sorted(set(inputs) - expected)
        if unknown:
            raise InputError(
                f"unknown input(s) {', '.join(map(repr, unknown))}; the model takes {_signature(self._inputs)}"
            )
        arrays = []
        for name, _, t in self._inputs:
            if name not in inputs:
                raise InputError(f"missing input {name!r}; the model takes {_signature(self._inputs)}")
            a = np.asarray(inputs[name])
            if a.dtype.name != t.dtype or tuple(a.shape) != t.shape:
                raise InputError(
                    f"input {name!r} must be {t.dtype}[{','.join(map(str, t.shape))}], "
                    f"got {a.dtype.name}[{','.join(map(str, a.shape))}]"
                )
            arrays.append(a)
        return arrays

    def run(self, inputs: Mapping[str, Any], *, profile: dict[str, float] | None = None) -> dict[str, np.ndarray]:
        """Run once. With ``profile`` (a dict), add each op's seconds to ``profile[op]``."""
        arrays = self.check_inputs(inputs)
        return dict(zip(self.output_names, self.run_positional(arrays, profile=profile)))

    def run_positional(self, arrays: list[np.ndarray], *, profile: dict[str, float] | None = None) -> list[np.ndarray]:
        env: list[Any] = [None] * self._nslots
        for s, c in self._consts:
            env[s] = c
        for (_, s, _), a in zip(self._inputs, arrays):
            env[s] = a
        for step in self._steps:
            t0 = time.perf_counter() if profile is not None else 0.0
            result = step.fn(*[env[i] for i in step.ins])
            if profile is not None:
                profile[step.node.op] = profile.get(step.node.op, 0.0) + time.perf_counter() - t0
            results = result if isinstance(result, (tuple, list)) else (result,)
            if len(results) != len(step.outs):
                raise GraphError(
                    f"kernel of {step.node.op} at node {step.node.name!r} returned {len(results)} outputs, expected {len(step.outs)}"
                )
            for s, r, t, dt in zip(step.outs, results, step.out_types, step.out_dtypes):
                if r.dtype != dt or r.shape != t.shape:
                    raise GraphError(
                        f"kernel of {step.node.op} at node {step.node.name!r} returned "
                        f"{r.dtype.name}[{','.join(map(str, r.shape))}], its type rule says {t}"
                    )
                env[s] = r
            for s in step.free:
                env[s] = None
        return [env[s] for _, s in self._outputs]


def _bind(node: Node) -> Callable[..., Any]:
    if node.op == CALL_OP:
        assert node.body is not None
        inner = ReferenceExecutor(node.body)
        return lambda *arrays: tuple(inner.run_positional(list(arrays)))
    opdef = get_op(node.op)
    ctx = OpContext.of(node)
    return opdef.bind(ctx)


def _signature(inputs: list[tuple[str, int, TensorType]]) -> str:
    return ", ".join(f"{name}: {t.dtype}[{','.join(map(str, t.shape))}]" for name, _, t in inputs)
