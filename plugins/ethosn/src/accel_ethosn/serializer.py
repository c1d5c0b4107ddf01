"""The ethosn serializer: one partition → the bytes of its binary command stream.

:mod:`accel_ethosn.compiler` does the work (commands, their constants, every
intermediate placed in one arena at compile time) for the NPU configuration of
the target options; this module asks it for a stream, says what it made and
writes the stream out (:meth:`~accel_ethosn.compiler.CommandStream.to_bytes`,
the format of docs/backends/ethosn.md, which ``src/runtime.cpp`` validates when
it loads one).
"""

from __future__ import annotations

import logging

from accel.ir import Graph
from accel_ethosn.compiler import CommandStream, compile_partition
from accel_ethosn.options import EthosnOptions

log = logging.getLogger(__name__)


def command_stream(graph: Graph, options: EthosnOptions | None = None) -> CommandStream:
    """One partition body (NHWC, ops and ``ethosn.*`` composites) compiled for ``options``' configuration."""
    opts = options if options is not None else EthosnOptions()
    return compile_partition(graph, (opts.tops, opts.ple_ratio, opts.sram_bytes // 1024))


def serialize(graph: Graph, options: EthosnOptions | None = None) -> bytes:
    """The command stream of one partition body, as the runtime loads it."""
    opts = options if options is not None else EthosnOptions()
    stream = command_stream(graph, opts)
    log.info("ethosn: %s", stream.summary())
    if stream.arena_size > opts.sram_bytes:
        log.info("ethosn: the arena (%d bytes) exceeds the SRAM (%d bytes)", stream.arena_size, opts.sram_bytes)
    return stream.to_bytes()


__all__ = ["command_stream", "serialize"]
