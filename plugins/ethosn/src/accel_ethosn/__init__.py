"""accel-ethosn: the Arm Ethos-N NPU backend for accel.

Quantized networks only (uint8 / int8 activations, NHWC, batch 1, rank ≤ 4).
Laid out as every plugin: :mod:`accel_ethosn.support` answers "is it
supported?" with a reason for every refusal (``PATTERNS``, ``OP_CHECKS``,
and ``EDGE_OPS``: the quantize, layout transpose and dequantize its runtime
does on the CPU at a partition's edges, around the NPU's work);
:mod:`accel_ethosn.serializer` turns each partition into a binary command
stream, compiled by :mod:`accel_ethosn.compiler` with its memory planned at
compile time; :mod:`accel_ethosn.options` is the NPU configuration; the C++
runtime (``src/runtime.cpp``) validates a stream once and executes it,
bit-exact with accel's quantized reference kernels. docs/backends/ethosn.md has
the details and the stream format.

accel finds the backend through the entry point in pyproject.toml (group
``accel.backends``), which names this module; its hook registers
:class:`EthosnBackend`.
"""

from __future__ import annotations

from collections.abc import Mapping

from accel_sdk.backend import PluginBackend

from accel.backend import Check, CostHints, RegionInfo
from accel.hookspecs import hookimpl
from accel.ir import Graph
from accel_ethosn import serializer, support
from accel_ethosn.options import EthosnOptions

__version__ = "0.1.0"


class EthosnBackend(PluginBackend):
    """Arm Ethos-N semantics on the host CPU: the support table, the command-stream compiler and its runtime."""

    name = "ethosn"
    distribution = "accel-ethosn"
    version = __version__
    layout = "NHWC"
    Options = EthosnOptions
    cost = CostHints(min_work=1)
    support = support

    def profitability(self, region: RegionInfo) -> str | None:
        """A region without multiply-accumulates that does no more than touch each byte it copies in and out
        (a lone clip, requantize or reshape) runs on the host, as Arm's flow inlines non-compute partitions.
        Setting ``min_work`` or ``copy_cost`` in the target options replaces this rule by the core's."""
        reason = super().profitability(region)
        explicit = self.options.min_work is not None or self.options.copy_cost is not None
        if reason is None and not explicit and region.macs == 0 and 2 * region.work <= region.boundary_bytes:
            return (
                f"the region does no multiply-accumulate work and {region.work} operations for "
                f"{region.boundary_bytes} boundary bytes, so it runs on the host"
            )
        return reason

    def edge_ops(self) -> Mapping[str, Check]:
        return dict(support.EDGE_OPS)

    def serialize(self, graph: Graph) -> bytes:
        opts = self.options
        assert isinstance(opts, EthosnOptions)
        return serializer.serialize(graph, opts)


@hookimpl
def accel_register_backends(register):
    register(EthosnBackend)


__all__ = ["EthosnBackend", "EthosnOptions", "accel_register_backends"]
