"""A readable text form of a graph (what ``accel inspect`` prints).

::

    graph main(%image: float32[1,1,8,8]) {
      %conv = nn.conv2d(%image, @w: float32[16,1,3,3]) {padding=(1,1,1,1)} : float32[1,16,8,8]
      return %conv
    }

``%name`` is a value, ``@name`` a constant (small constants show their data).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from accel.ir import Graph, Value


def _value(v: Value) -> str:
    if v.const is None:
        return f"%{v.name}"
    if v.const.size <= 4:
        data = np.array2string(v.const.reshape(-1), separator=",", precision=6)
        return f"@{v.name}={data}:{v.type}"
    return f"@{v.name}: {v.type}"


def _attr(v: Any) -> str:
    if isinstance(v, tuple) and len(v) > 8:
        return "(" + ", ".join(map(repr, v[:8])) + f", ... {len(v)} items)"
    return repr(v)


def format_graph(graph: Graph, indent: str = "") -> str:
    lines = [f"{indent}graph {graph.name}(" + ", ".join(f"%{v.name}: {v.type}" for v in graph.inputs) + ") {"]
    inner = indent + "  "
    for node in graph.nodes:
        outs = ", ".join(f"%{v.name}" for v in node.outputs)
        args = ", ".join(_value(v) for v in node.inputs)
        attrs = ", ".join(f"{k}={_attr(v)}" for k, v in node.attrs.items())
        types = ", ".join(str(v.type) for v in node.outputs)
        line = f"{inner}{outs} = {node.op}({args})"
        if attrs:
            line += f" {{{attrs}}}"
        line += f" : {types}"
        if node.body is not None:
            line += "\n" + format_graph(node.body, inner + "  ")
        lines.append(line)
    lines.append(f"{inner}return " + ", ".join(_value(v) for v in graph.outputs))
    lines.append(indent + "}")
    return "\n".join(lines)
