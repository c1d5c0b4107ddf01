"""accel: compile an ONNX model for a host plus accelerator backends, and run it.

Python API::

    import accel
    graph = accel.import_onnx("model.onnx")      # ONNX -> IR (simplified)
    outputs = accel.execute(graph, {"x": array})  # numpy reference executor

    artifact = accel.compile("model.onnx", backends="ethosn,acl")
    artifact.save("model.accel")
    outputs = accel.load("model.accel").run({"x": array})
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from accel._cpu import tune_openblas

tune_openblas()  # before numpy loads (see accel/_cpu.py)

# ruff: noqa: E402

from accel.errors import AccelError
from accel.ir import Graph, Node, QuantParams, TensorType, Value

try:
    __version__ = version("accel-core")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"


def import_onnx(model, *, optimize: bool = True, input_shapes=None, base_dir=None) -> Graph:
    """Import an ONNX model (path, bytes or ``onnx.ModelProto``) as an IR graph.

    With ``optimize`` (the default) the standard simplifications run: QDQ groups
    become ``qnn.*`` ops, constants fold, batch norms fold into convolutions,
    dead code goes. ``input_shapes`` binds symbolic input dimensions; ``base_dir`` is the folder of external data for a model
    given as bytes or ``ModelProto``.
    """
    from accel.frontend.onnx import import_model

    graph = import_model(model, input_shapes=input_shapes, base_dir=base_dir)
    if optimize:
        from accel.passes import simplify

        graph = simplify(graph, in_place=True)  # a graph of our own, typed as it was built
    return graph


def get_include() -> str:
    """Absolute path of the folder holding ``accel/runtime_abi.h`` (the C runtime ABI), for compilers."""
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def compile(model, backends=None, **kwargs):
    """Compile a model for a composite target; see :func:`accel.compiler.compile`."""
    from accel.compiler import compile as _compile

    return _compile(model, backends, **kwargs)


def load(path, threads=None):
    """Load an ``.accel`` artifact as an :class:`accel.runtime.Executable`.

    Its partitions compute with ``threads`` threads; without it, ``ACCEL_NUM_THREADS`` or every
    available core. The artifact does not fix the count: choose it where the model runs.
    """
    from accel.artifact import load as _load

    return _load(path, threads)


def execute(graph, inputs: dict) -> dict:
    """Run ``graph`` on the numpy reference kernels: ``{name: array} -> {name: array}``.

    ``graph`` may also be an ONNX model (path, bytes or ``onnx.ModelProto``):
    it is imported specialized on the inputs given, so operands that fix a
    shape (a Reshape's shape, a Resize's sizes ...) may be graph inputs and
    symbolic dimensions take the given arrays' shapes (see
    :class:`accel.frontend.specialize.SpecializedModel`, which also caches
    one graph per value for repeated runs).
    """
    if not isinstance(graph, Graph):
        from accel.frontend.specialize import SpecializedModel

        return SpecializedModel(graph).run(inputs)
    from accel.executor import ReferenceExecutor

    return ReferenceExecutor(graph).run(inputs)


__all__ = [
    "AccelError",
    "Graph",
    "Node",
    "QuantParams",
    "TensorType",
    "Value",
    "__version__",
    "compile",
    "execute",
    "get_include",
    "import_onnx",
    "load",
]
