"""accel-ethosn: the Arm Ethos-N NPU backend for accel.

Quantized networks only (uint8 / int8 activations, NHWC, batch 1, rank ≤ 4).
:mod:`accel_ethosn.support` answers "is it supported?" with a reason for every
refusal; :mod:`accel_ethosn.compiler` turns each partition into a binary
command stream whose memory is planned at compile time; the C++ runtime
(``src/runtime.cpp``) validates a stream once and executes it, bit-exact with
accel's quantized reference kernels. docs/backends/ethosn.md has the details
and the stream format.

accel finds the backend through the entry point in pyproject.toml (group
``accel.backends``), which names this module; its hook registers
:class:`EthosnBackend`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from types import ModuleType

from accel_sdk.openmp import sleep_idle_threads

from accel.backend import Backend, Check, CostHints, PatternEntry, RegionInfo
from accel.hookspecs import hookimpl
from accel.ir import Graph
from accel_ethosn import support
from accel_ethosn.options import EthosnOptions

__version__ = "0.1.0"

log = logging.getLogger(__name__)


class EthosnBackend(Backend):
    """Arm Ethos-N semantics on the host CPU: the support table, the command-stream compiler and its runtime."""

    name = "ethosn"
    distribution = "accel-ethosn"
    version = __version__
    layout = "NHWC"
    Options = EthosnOptions
    cost = CostHints(min_work=1)

    def pattern_table(self) -> Sequence[PatternEntry]:
        return [PatternEntry(name, build(), check) for name, build, check in support.COMPOSITES]

    def op_checks(self) -> Mapping[str, Check]:
        return dict(support.OP_CHECKS)

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

    def compile_partition(self, graph: Graph):  # -> compiler.CommandStream
        """One partition → its command stream (before serialization)."""
        from accel_ethosn.compiler import compile_partition

        opts = self.options
        assert isinstance(opts, EthosnOptions)
        return compile_partition(graph, (opts.tops, opts.ple_ratio, opts.sram_bytes // 1024))

    def serialize(self, graph: Graph) -> bytes:
        stream = self.compile_partition(graph)
        opts = self.options
        assert isinstance(opts, EthosnOptions)
        log.info("ethosn: %s", stream.summary())
        if stream.arena_size > opts.sram_bytes:
            log.info("ethosn: the arena (%d bytes) exceeds the SRAM (%d bytes)", stream.arena_size, opts.sram_bytes)
        return stream.to_bytes()

    def runtime_module(self) -> ModuleType:
        sleep_idle_threads()
        from accel_ethosn import _runtime

        return _runtime


@hookimpl
def accel_register_backends(register):
    register(EthosnBackend)


__all__ = ["EthosnBackend", "EthosnOptions", "accel_register_backends"]
