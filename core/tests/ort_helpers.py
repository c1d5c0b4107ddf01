"""Test harness shared by the op and frontend tests: ONNX Runtime as the reference, one accel op run alone.

Imported by its module name (``from ort_helpers import ...``): pytest puts this
folder on ``sys.path`` when it collects the tests beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from accel.ir import Graph, QuantParams, TensorType, Value
from accel.ops import OpContext, get_op

ort = pytest.importorskip("onnxruntime")


# -- ONNX Runtime -------------------------------------------------------------------


def ort_session(model: onnx.ModelProto, *, optimize: bool = True, threads: int | None = None) -> Any:
    """A CPU session; ``optimize=False`` runs the graph as written (no fusions), ``threads`` caps intra-op threads."""
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.x64quantprecision", "1")  # exact int8 without VNNI
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads is not None:
        opts.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def ort_outputs(
    model: onnx.ModelProto, feed: Mapping[str, np.ndarray], *, optimize: bool = True, threads: int | None = None
) -> list[np.ndarray]:
    """Every graph output of ``model`` run on ``feed``, in graph order."""
    return ort_session(model, optimize=optimize, threads=threads).run(None, dict(feed))


def node_model(
    node: onnx.NodeProto,
    inputs: Mapping[str, np.ndarray],
    inits: Mapping[str, np.ndarray],
    outputs: Sequence[onnx.ValueInfoProto],
    opsets: Mapping[str, int],
) -> onnx.ModelProto:
    """A one-node model: ``inputs`` become typed graph inputs, ``inits`` initializers; ``opsets`` maps domain to version."""
    graph = helper.make_graph(
        [node],
        "single_node",
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in inputs.items()
        ],
        list(outputs),
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = 10
    return model


def ort_run(
    op_type: str,
    inputs: Sequence[np.ndarray],
    attrs: Mapping[str, Any] | None = None,
    *,
    consts: Sequence[np.ndarray | None] = (),
    opset: int = 18,
    n_out: int = 1,
) -> list[np.ndarray]:
    """Run one ONNX node: ``inputs`` are fed, ``consts`` follow as initializers ("" when None)."""
    feed = {f"in{i}": a for i, a in enumerate(inputs)}
    inits = {f"c{i}": np.asarray(c) for i, c in enumerate(consts) if c is not None}
    node_inputs = [*feed, *("" if c is None else f"c{i}" for i, c in enumerate(consts))]
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op_type, node_inputs, outs, **(attrs or {}))
    model = node_model(node, feed, inits, [helper.make_empty_tensor_value_info(o) for o in outs], {"": opset})
    return ort_outputs(model, feed)


# -- one accel op ---------------------------------------------------------------------


def run_op(
    op: str,
    arrays: Sequence[np.ndarray],
    attrs: dict[str, Any] | None = None,
    quants: Sequence[QuantParams | None] = (),
    *,
    contiguous: bool = False,
) -> Any:
    """Infer the node's types, run its reference kernel, check outputs against the types.

    ``contiguous`` also requires every output to be C-contiguous.
    """
    quants = list(quants) + [None] * (len(arrays) - len(quants))
    values = [Value(f"x{i}", TensorType.of(a, q)) for i, (a, q) in enumerate(zip(arrays, quants, strict=True))]
    graph = Graph(values, [], [])
    node = graph.new_node(op, values, attrs)
    ctx = OpContext(op, node.attrs, tuple(v.type for v in values), tuple(v.type for v in node.outputs))
    result = get_op(op).bind(ctx)(*arrays)
    outs = result if isinstance(result, tuple) else (result,)
    assert len(outs) == len(node.outputs)
    for arr, v in zip(outs, node.outputs, strict=True):
        assert arr.dtype.name == v.type.dtype and arr.shape == v.type.shape, (arr.dtype, arr.shape, v.type)
        if contiguous:
            assert arr.flags.c_contiguous
    return result


def infer(op: str, types: Sequence[TensorType], attrs: dict[str, Any] | None = None) -> list[TensorType]:
    """The output types ``op`` infers for inputs of ``types``."""
    values = [Value(f"x{i}", t) for i, t in enumerate(types)]
    return [v.type for v in Graph(values, [], []).new_node(op, values, attrs).outputs]
