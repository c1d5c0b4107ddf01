"""accel-testbackend: a small real backend built with accel-sdk, as a third party would.

NHWC, float32: max/avg pooling, relu, add, maximum, clip, reshape, and the
composite ``testbackend.conv2d`` (conv2d → bias_add? → relu?); plus
per-tensor ``qnn.requantize`` to uint8/int8, bit-exact with accel's reference.
The blob format is in README.md; the runtime is ``src/runtime.cpp``.
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
    """``nn.conv2d(x, const) → nn.bias_add(const)? → nn.relu?``"""
    conv = is_op("nn.conv2d")(wildcard(), is_constant()).named("conv")
    bias = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()).named("bias"))
    return bias.optional(lambda x: is_op("nn.relu")(x).named("relu"))


def _dtype_reason(node: Node) -> str | None:
    for v in (*node.inputs, *node.outputs):
        if v.type.dtype != "float32":
            return f"dtype='{v.type.dtype}', dtype must be float32"
    return None


class TestBackend(Backend):
    """The testbackend: a CPU runtime of a handful of NHWC float32 ops (see the module docstring)."""

    __test__ = False  # not a pytest test class, whatever its name

    name = "testbackend"
    distribution = "accel-testbackend"
    version = __version__
    layout = "NHWC"

    def pattern_table(self) -> Sequence[PatternEntry]:
        return [PatternEntry("conv2d", conv2d_pattern(), self.check_conv2d)]

    def op_checks(self) -> Mapping[str, Check]:
        checks: dict[str, Check] = dict.fromkeys(("nn.relu", "clip", "reshape"), _dtype_reason)
        checks.update(
            {
                "nn.max_pool2d": self.check_pool,
                "nn.avg_pool2d": self.check_pool,
                "add": self.check_same_shape,
                "maximum": self.check_same_shape,
                "qnn.requantize": self.check_requantize,
            }
        )
        return checks

    # -- checks: None when taken, else the reason ---------------------------------------
    def check_pool(self, node: Node) -> str | None:
        a = node.attrs
        if a["layout"] != "NHWC":
            return f"layout={a['layout']}, layout must = NHWC"
        dilation = list(a["dilation"]) if isinstance(a["dilation"], tuple) else [a["dilation"]] * 2
        if dilation != [1, 1]:
            return f"dilation={dilation}, dilation must = [1, 1]"
        return _dtype_reason(node)

    def check_same_shape(self, node: Node) -> str | None:
        a, b = (list(v.type.shape) for v in node.inputs)
        if a != b:
            return f"{node.op} of shapes {a} and {b}: broadcasting is not supported, shapes must be equal"
        return _dtype_reason(node)

    def check_requantize(self, node: Node) -> str | None:
        x, y = node.inputs[0].type, node.outputs[0].type
        if x.dtype not in ("uint8", "int8", "int32"):
            return f"input dtype='{x.dtype}', dtype must be uint8, int8 or int32"
        if y.dtype not in ("uint8", "int8"):
            return f"output dtype='{y.dtype}', dtype must be uint8 or int8"
        if x.quant is not None and x.quant.axis is not None:
            return f"per-channel requantize (axis={x.quant.axis}) is not supported, quantization must be per tensor"
        return None

    def check_conv2d(self, match: Match) -> str | None:
        conv = match.node("conv")
        a = conv.attrs
        if a["groups"] != 1:
            return f"groups={a['groups']}, groups must = 1"
        if a["data_layout"] != "NHWC" or a["kernel_layout"] != "OHWI":
            return f"layout={a['data_layout']}/{a['kernel_layout']}, layout must = NHWC/OHWI"
        for node in match.nodes:
            if node.op == "nn.bias_add" and node.attrs["axis"] % 4 != 3:
                return f"bias_add axis={node.attrs['axis']}, axis must = 3 (channels)"
            reason = _dtype_reason(node)
            if reason is not None:
                return reason
        return None

    # -- serializer and runtime -------------------------------------------------------------
    def serialize(self, graph: Graph) -> bytes:
        from accel_testbackend.serializer import serialize

        return serialize(graph)

    def runtime_module(self) -> ModuleType:
        from accel_testbackend import _runtime

        return _runtime


@hookimpl
def accel_register_backends(register):
    register(TestBackend)


__all__ = ["TestBackend", "accel_register_backends", "conv2d_pattern"]
