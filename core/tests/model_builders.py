"""Small ONNX models written by hand, for the bad-input tests.

Imported by its module name (``from model_builders import model_of``): pytest
puts this folder on ``sys.path`` when it collects the tests beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model_of(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, tuple[Any, int]],
    outputs: Sequence[str],
    inits: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
    name: str = "bad",
) -> onnx.ModelProto:
    """``nodes`` as a model: ``inputs`` maps a name to (shape, ONNX element type), outputs are float32 of
    any shape, ``inits`` become initializers; opset ``opset`` of the default domain, IR version 8."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(k, t, s) for k, (s, t) in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m
