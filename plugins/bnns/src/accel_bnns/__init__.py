"""accel-bnns: the bnns backend for accel (Apple BNNS's operator contract, computed on this host).

Float32, planar NCHW at the partition boundary, constant weights: convolutions
(any groups) with their bias, relu/sigmoid or batch norm fused, dense layers
with bias and GELU fused, batch matmul, max/avg/global pooling and instance
norm. :mod:`accel_bnns.support` is the support table (patterns, op checks and
their reasons), :mod:`accel_bnns.serializer` the blob, ``src/runtime.cpp`` the
C++ runtime (oneDNN). README.md documents the blob format.

accel finds the backend through the entry point in pyproject.toml
(group ``accel.backends``), which names this module; its hook registers
:class:`BnnsBackend`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType

from pydantic import Field

from accel.backend import Backend, BackendOptions, Check, PatternEntry
from accel.hookspecs import hookimpl
from accel.ir import Graph
from accel_bnns.support import OP_CHECKS, PATTERNS

__version__ = "0.1.0"


class BnnsOptions(BackendOptions):
    """Target options of the bnns backend."""

    num_threads: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="threads the runtime computes with (0: ACCEL_NUM_THREADS, else all cores)",
    )


class BnnsBackend(Backend):
    """The bnns backend: a pattern table, op checks, a serializer and a compiled runtime."""

    name = "bnns"
    distribution = "accel-bnns"
    version = __version__
    #: BNNS takes planar tensors: the partitioner hands this backend the model's NCHW tensors as they are.
    layout = "NCHW"
    Options = BnnsOptions

    def pattern_table(self) -> Sequence[PatternEntry]:
        """Composites, in priority order: each becomes one ``call`` node named ``bnns.<entry>``."""
        return [PatternEntry(name, make(), check) for name, make, check in PATTERNS]

    def op_checks(self) -> Mapping[str, Check]:
        """Single ops: ``{op: check(node)}``."""
        return dict(OP_CHECKS)

    def serialize(self, graph: Graph) -> bytes:
        from accel_bnns.serializer import serialize

        assert isinstance(self.options, BnnsOptions)
        return serialize(graph, num_threads=self.options.num_threads)

    def runtime_module(self) -> ModuleType:
        from accel_bnns import _runtime

        return _runtime


@hookimpl
def accel_register_backends(register):
    register(BnnsBackend)


__all__ = ["BnnsBackend", "BnnsOptions", "accel_register_backends"]
