"""A plugin's Backend, less what every plugin writes the same way.

Every plugin is laid out alike: ``support.py`` (the support table:
``PATTERNS``, a list of ``(name, pattern builder, check)`` in priority order,
``OP_CHECKS``, ``{op: check}``, and optionally ``DECLINES``, ``{op: reason}`` for
ops it never takes alone but has something to say about), ``serializer.py`` (``serialize(graph) ->
bytes``), ``options.py`` (the pydantic target options) and ``src/runtime.cpp``
(the compiled ``_runtime`` module). :class:`PluginBackend` turns the table into
the core's :class:`accel.backend.Backend` contract and loads the runtime the
same way for every plugin (idle OpenMP threads sleep, see
:func:`accel_sdk.openmp.import_runtime`)::

    from accel_sdk.backend import PluginBackend
    from accel_mynpu import serializer, support
    from accel_mynpu.options import MynpuOptions

    class MynpuBackend(PluginBackend):
        name = "mynpu"
        distribution = "accel-mynpu"
        version = __version__
        layout = "NHWC"
        Options = MynpuOptions
        support = support  # and serializer.serialize(graph) writes its blobs
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar

from pydantic import Field

from accel.backend import Backend, Check, PatternEntry
from accel.ir import Graph
from accel_sdk.openmp import import_runtime

__all__ = ["PluginBackend", "retired_thread_option"]


def retired_thread_option() -> Any:
    """The field of a target option that once fixed the thread count: still accepted, so that artifacts
    compiled then still load (their manifests hold it), and ignored. The count is chosen where the
    model runs: ``accel.load(path, threads=N)``, ``accel run --threads N``, ``ACCEL_NUM_THREADS``."""
    return Field(
        default=None,
        ge=0,
        le=1024,
        description="ignored: accepted so that artifacts compiled when the count was a target option still "
        "load; choose threads when loading (accel.load(path, threads=N), accel run --threads N)",
    )


class PluginBackend(Backend):
    """A :class:`~accel.backend.Backend` whose table is its ``support`` module and whose runtime is
    ``<package>._runtime``."""

    #: The plugin's support module (``PATTERNS``, ``OP_CHECKS``).
    support: ClassVar[ModuleType]

    def pattern_table(self) -> Sequence[PatternEntry]:
        return [PatternEntry(name, build(), check) for name, build, check in self.support.PATTERNS]

    def op_checks(self) -> Mapping[str, Check]:
        return dict(self.support.OP_CHECKS)

    def declines(self) -> Mapping[str, Check]:
        return dict(getattr(self.support, "DECLINES", {}))

    def serialize(self, graph: Graph) -> bytes:
        """``<package>.serializer.serialize(graph)``; a backend whose serializer needs its options overrides this."""
        module = importlib.import_module(f"{self._package()}.serializer")
        return bytes(module.serialize(graph))

    def runtime_module(self) -> ModuleType:
        return import_runtime(self._package())

    def _package(self) -> str:
        return type(self).__module__.partition(".")[0]
