"""Build a graph op by op: for tests, passes and backend authors.

::

    b = GraphBuilder(x=(1, 3, 8, 8))              # inputs: shape (float32) or TensorType
    w = b.const(np.ones((4, 3, 3, 3), np.float32))
    y = b.op("nn.relu", b.op("nn.conv2d", b.x["x"], w, padding=(1, 1, 1, 1)))
    graph = b.done(y)                            # lint-checked

Every node goes through :meth:`Graph.new_node`, so attributes are completed
and output types inferred (a bad op or attribute fails right there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from accel.ir import Graph, QuantParams, TensorType, Value


class GraphBuilder:
    """A graph under construction: inputs first, then nodes in order."""

    def __init__(self, name: str = "main", /, **inputs: tuple[int, ...] | TensorType):
        values = [Value(n, t if isinstance(t, TensorType) else TensorType(t, "float32")) for n, t in inputs.items()]
        self.graph = Graph(values, [], [], name=name)
        self.nodes: list = []
        self.x = {v.name: v for v in values}

    def input(self, name: str, t: tuple[int, ...] | TensorType) -> Value:
        v = Value(name, t if isinstance(t, TensorType) else TensorType(t, "float32"))
        self.graph.inputs = [*self.graph.inputs, v]
        self.x[name] = v
        return v

    def const(self, data: Any, quant: QuantParams | None = None, hint: str = "c") -> Value:
        return self.graph.new_const(np.asarray(data), hint, quant)

    def op(self, op: str, *inputs: Value, **attrs: Any) -> Any:
        """Append a node; return its output (or the list of outputs when there are several)."""
        node = self.graph.new_node(op, list(inputs), attrs)
        self.nodes.append(node)
        return node.outputs[0] if len(node.outputs) == 1 else node.outputs

    def done(self, *outputs: Value) -> Graph:
        """The finished graph returning ``outputs``, checked with :meth:`Graph.lint`."""
        self.graph.nodes = self.nodes
        self.graph.outputs = list(outputs)
        self.graph.lint()
        return self.graph
