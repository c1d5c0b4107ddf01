"""accel-ethosn: the ethosn backend for accel.

Float32, NHWC: ``nn.relu``, ``add`` (equal shapes), ``nn.max_pool2d`` and the
composite ``ethosn.conv2d`` (``nn.conv2d → nn.bias_add? → nn.relu?``), computed by
the C++ runtime in ``src/runtime.cpp``. README.md documents the blob format.

accel finds the backend through the entry point in pyproject.toml
(group ``accel.backends``), which names this module; its hook registers
:class:`EthosnBackend`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType

from accel.backend import Backend, Check, PatternEntry
from accel.hookspecs import hookimpl
from accel.ir import Graph, Node
from accel.pattern import Match, Pattern, is_constant, is_op, wildcard

__version__ = "0.1.0"


def conv2d_pattern() -> Pattern:
    """``nn.conv2d(x, const) → nn.bias_add(const)? → nn.relu?``, labels ``conv``, ``bias``, ``relu``.

    The pattern itself asks for float32: a float64 or int8 convolution is refused
    with the pattern's reason (``accel inspect`` shows it).
    """
    conv = is_op("nn.conv2d")(wildcard(), is_constant()).has_dtype("float32").named("conv")
    bias = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()).named("bias"))
    return bias.optional(lambda x: is_op("nn.relu")(x).named("relu"))


def float32_only(node: Node) -> str | None:
    """An op check: ``None`` when every input and output is float32, else the reason."""
    for v in (*node.inputs, *node.outputs):
        if v.type.dtype != "float32":
            return f"dtype='{v.type.dtype}', dtype must be float32"
    return None


class EthosnBackend(Backend):
    """The ethosn backend: a pattern table, op checks, a serializer and a compiled runtime."""

    name = "ethosn"
    distribution = "accel-ethosn"
    version = __version__
    #: The partitioner hands this backend NHWC activations and OHWI weights.
    layout = "NHWC"

    # -- what the backend takes: a check returns None (taken) or one line saying why not -----------
    def pattern_table(self) -> Sequence[PatternEntry]:
        """Composites, in priority order: each becomes one ``call`` node named ``ethosn.<entry>``."""
        return [PatternEntry("conv2d", conv2d_pattern(), self.check_conv2d)]

    def op_checks(self) -> Mapping[str, Check]:
        """Single ops: ``{op: check(node)}``."""
        return {"nn.relu": float32_only, "add": self.check_add, "nn.max_pool2d": self.check_max_pool}

    def check_add(self, node: Node) -> str | None:
        a, b = (list(v.type.shape) for v in node.inputs)
        if a != b:
            return f"add of shapes {a} and {b}: broadcasting is not supported, shapes must be equal"
        return float32_only(node)

    def check_max_pool(self, node: Node) -> str | None:
        if node.attrs["layout"] != "NHWC":
            return f"layout={node.attrs['layout']}, layout must = NHWC"
        return float32_only(node)

    def check_conv2d(self, match: Match) -> str | None:
        conv = match.node("conv")
        if conv.attrs["groups"] != 1:
            return f"groups={conv.attrs['groups']}, groups must = 1"
        if (conv.attrs["data_layout"], conv.attrs["kernel_layout"]) != ("NHWC", "OHWI"):
            return f"layout={conv.attrs['data_layout']}/{conv.attrs['kernel_layout']}, layout must = NHWC/OHWI"
        if "bias" in match.bindings and match.node("bias").attrs["axis"] % 4 != 3:
            return f"bias_add axis={match.node('bias').attrs['axis']}, axis must = 3 (channels)"
        for node in match.nodes:
            reason = float32_only(node)
            if reason is not None:
                return reason
        return None

    # -- serializer and runtime -----------------------------------------------------------------
    def serialize(self, graph: Graph) -> bytes:
        from accel_ethosn.serializer import serialize

        return serialize(graph)

    def runtime_module(self) -> ModuleType:
        from accel_ethosn import _runtime

        return _runtime


@hookimpl
def accel_register_backends(register):
    register(EthosnBackend)


__all__ = ["EthosnBackend", "accel_register_backends", "conv2d_pattern", "float32_only"]
