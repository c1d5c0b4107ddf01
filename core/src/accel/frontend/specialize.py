"""Run an ONNX model whose shape operands arrive at run time.

The IR is static: a Reshape's shape, a Resize's sizes, a Split's split, a
reduction's axes, Q/DQ scales and the like must be constants at import. Many
models (and most of ONNX's node tests) give such operands as graph inputs.
:class:`SpecializedModel` runs them anyway: given a set of input arrays it
imports the model with those operands bound to their values
(``import_model(..., input_values=...)``), which folds them into the graph,
and runs the result on the reference executor. Which inputs need binding is
learnt from the importer itself: every :class:`ConstantOperandRequired` names
the tensor it needs, and the graph inputs that tensor is computed from are
bound from then on. Inputs with symbolic dimensions take the shapes of the
arrays given, unless ``input_shapes`` fixes them.

Specialized graphs are cached per key (the bound inputs' dtypes, shapes and
bytes, and the shapes taken from the arrays), least recently used first out:
a model run repeatedly with the same shape operands is imported once.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx import ModelProto

from accel.errors import GraphError, InputError, ModelError
from accel.frontend.onnx import ConstantOperandRequired, import_model, load_model_proto
from accel.ir import Graph

__all__ = ["SpecializedModel"]

_Key = tuple[tuple[tuple[str, str, tuple[int, ...], bytes], ...], tuple[tuple[str, tuple[int, ...]], ...]]


class SpecializedModel:
    """An ONNX model imported per run-time value of its shape operands.

    ``run(inputs)`` returns ``{output name: array}`` like :func:`accel.execute`;
    ``graph_for(inputs)`` returns the specialized graph and the inputs it still
    takes. ``bound_inputs`` lists the graph inputs found to need a value at
    import so far; ``cache_size`` bounds the number of graphs kept.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | bytes | ModelProto,
        *,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        optimize: bool = True,
        cache_size: int = 16,
    ):
        self.proto = load_model_proto(model, base_dir=base_dir)
        # the importer checks each (integers only) and names a bad one
        self.input_shapes: dict[str, Any] = dict(input_shapes or {})
        self.optimize = optimize
        self.cache_size = max(1, int(cache_size))
        g = self.proto.graph
        inits = {t.name for t in g.initializer} | {sp.values.name for sp in g.sparse_initializer}
        self.input_names = [vi.name for vi in g.input if vi.name not in inits]
        # inputs with symbolic dimensions -> their declared rank
        self._symbolic = {
            vi.name: len(vi.type.tensor_type.shape.dim)
            for vi in g.input
            if vi.name not in inits
            and vi.type.HasField("tensor_type")
            and vi.type.tensor_type.HasField("shape")
            and any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)
        }
        self._producer = {o: node for node in g.node for o in node.output if o}
        self.bound_inputs: list[str] = []
        self._cache: OrderedDict[_Key, Any] = OrderedDict()
        self.imports = 0  # how many graphs were imported (cache misses)

    # -- which graph inputs a tensor depends on ------------------------------------------
    def sources(self, tensor: str) -> list[str]:
        """The graph inputs whose values ``tensor`` is computed from (itself when it is one); a
        ``Shape`` or ``Size`` reads only its input's shape, so the search stops there."""
        inputs = set(self.input_names)
        seen: set[str] = set()
        stack = [tensor]
        found = []
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in inputs:
                found.append(t)
                continue
            node = self._producer.get(t)
            if node is not None and node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
                continue  # depends on the input's shape only, which the import knows
            if node is not None:
                stack.extend(n for n in node.input if n)
                for attr in node.attribute:  # names a subgraph reads from the outer scope
                    for sub in [attr.g, *attr.graphs]:
                        for sn in sub.node:
                            stack.extend(n for n in sn.input if n)
        return sorted(found)

    # -- specialization ---------------------------------------------------------------
    def _key(self, inputs: Mapping[str, Any]) -> _Key:
        bound = []
        for name in self.bound_inputs:
            a = np.ascontiguousarray(inputs[name])
            bound.append((name, a.dtype.str, tuple(a.shape), a.tobytes()))
        shapes = tuple(
            (name, tuple(np.shape(inputs[name])))
            for name in sorted(self._symbolic)
            if name in inputs and name not in self.input_shapes and name not in self.bound_inputs
        )
        return tuple(bound), shapes

    def graph_for(self, inputs: Mapping[str, Any]) -> tuple[Graph, dict[str, Any]]:
        """The graph specialized on ``inputs``, and the inputs it takes at run time."""
        from accel.executor import ReferenceExecutor

        executor = self._executor(inputs, ReferenceExecutor)
        return executor.graph, self._rest(inputs)

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Specialize (or take the cached graph) and run on the reference executor."""
        from accel.executor import ReferenceExecutor

        executor = self._executor(inputs, ReferenceExecutor)
        return executor.run(self._rest(inputs))

    def _rest(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in inputs.items() if k not in self.bound_inputs}

    def _executor(self, inputs: Mapping[str, Any], factory: Any) -> Any:
        if not isinstance(inputs, Mapping):
            raise InputError(f"inputs must be a mapping {{name: array}}, got a {type(inputs).__name__}")
        unknown = sorted(set(inputs) - set(self.input_names))
        if unknown:
            raise InputError(
                f"unknown input(s) {', '.join(map(repr, unknown))}; the model takes {', '.join(self.input_names)}"
            )
        for name, rank in self._symbolic.items():
            if name in inputs and name not in self.input_shapes and np.ndim(inputs[name]) != rank:
                shape = ",".join(map(str, np.shape(inputs[name])))
                raise InputError(f"input {name!r} has rank {rank} in the model, got an array of shape [{shape}]")
        while True:
            missing = [name for name in self.bound_inputs if name not in inputs]
            if missing:
                raise InputError(
                    f"missing input(s) {', '.join(map(repr, missing))}: their values fix shapes in the model "
                    f"(it takes {', '.join(self.input_names)})"
                )
            key = self._key(inputs)
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            try:
                graph = self._import(inputs)
            except ConstantOperandRequired as exc:
                need = [s for s in self.sources(exc.tensor) if s not in self.bound_inputs]
                if not need:
                    raise
                missing = [s for s in need if s not in inputs]
                if missing:
                    raise InputError(
                        f"{exc}; its value comes from input(s) {', '.join(map(repr, missing))}, which were not given"
                    ) from None
                self.bound_inputs.extend(need)
                continue
            executor = factory(graph)
            self._cache[key] = executor
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            return executor

    def _import(self, inputs: Mapping[str, Any]) -> Graph:
        shapes = dict(self.input_shapes)
        for name in self._symbolic:
            if name in inputs and name not in shapes and name not in self.bound_inputs:
                shapes[name] = tuple(np.shape(inputs[name]))
        values = {name: inputs[name] for name in self.bound_inputs}
        self.imports += 1
        try:
            graph = import_model(self.proto, input_shapes=shapes, input_values=values)
        except (GraphError, ModelError) as exc:
            if not values:
                raise
            # with run-time values bound, a shape or type error most likely comes from them
            raise InputError(
                f"the values given for {', '.join(map(repr, values))} do not fit the model: {exc}"
            ) from None
        if self.optimize:
            from accel.passes import simplify

            graph = simplify(graph)
        return graph
