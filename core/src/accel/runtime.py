"""Running a partitioned graph: backend runtimes, their handles, and the :class:`Executable`.

An :class:`Executable` is built once from the host graph of a compile (see
:mod:`accel.partition`), the blob of every partition and the backends. Host
nodes run on the numpy reference kernels; each partition (a ``call`` node
with ``compiler=<backend>``) runs on a handle its backend's compiled runtime
created from the blob (the runtime validated the blob then).

Planning, buffers and the run loop are :mod:`accel.executor`'s
:class:`~accel.executor.Program`, shared with the reference executor: every
tensor a backend writes lands directly in a buffer the program planned (an
arena laid out by liveness, or the caller's own array for graph outputs), so
nothing is copied at partition boundaries, and one Executable may run from
several threads at once.

Threads are chosen when an artifact is loaded, never fixed by it:
:func:`resolve_threads` reads the caller's choice (``accel.load(path,
threads=N)``, ``accel run --threads N``), else ``ACCEL_NUM_THREADS``, else
every core this process may run on, and every partition's handle is created
with that count (the runtime ABI's ``accel_runtime_options``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from accel.backend import ABI_VERSION, Backend, runtime_abi_version
from accel.errors import AbiMismatchError, AccelError, BackendRuntimeError, GraphError, InputError, PluginError
from accel.executor import Program, StepKind, host_step
from accel.ir import CALL_OP, Graph, Node
from accel.limits import MAX_THREADS

__all__ = ["MAX_THREADS", "THREADS_ENV", "Executable", "create_handle", "load_runtime", "resolve_threads"]

#: The environment variable that sets the thread count when the caller gives none.
THREADS_ENV = "ACCEL_NUM_THREADS"


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def resolve_threads(threads: int | None = None) -> int:
    """The thread count partitions compute with: ``threads`` when given, else ``ACCEL_NUM_THREADS``, else every
    available core. The one place the variable is read; an unusable value is an :class:`InputError`."""
    if threads is None:
        text = os.environ.get(THREADS_ENV, "").strip()
        if not text:
            return min(available_cores(), MAX_THREADS)
        try:
            threads = int(text)
        except ValueError:
            raise InputError(f"{THREADS_ENV}={text!r} is not a whole number of threads (1 to {MAX_THREADS})") from None
        what = f"{THREADS_ENV}={text}"
    else:
        what = f"threads={threads!r}"
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise InputError(f"{what}: the thread count must be a whole number from 1 to {MAX_THREADS}")
    return threads


_RUNTIMES: dict[type[Backend], ModuleType] = {}
_LOCK = threading.Lock()


def load_runtime(backend: Backend) -> ModuleType:
    """The compiled runtime module of ``backend``, after checking its ABI version."""
    cls = type(backend)
    with _LOCK:
        module = _RUNTIMES.get(cls)
        if module is not None:
            return module
        try:
            module = backend.runtime_module()
        except AccelError:
            raise
        except Exception as exc:
            raise PluginError(
                f"backend {backend.name} ({backend.distribution} {backend.version}): its runtime cannot be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        version = runtime_abi_version(module, backend.name)
        if version != ABI_VERSION:
            raise AbiMismatchError(
                f"backend {backend.name} ({backend.distribution} {backend.version}): its runtime was built for "
                f"runtime ABI {version}, this accel-core speaks {ABI_VERSION}"
            )
        if not hasattr(module, "Runtime"):
            raise PluginError(f"backend {backend.name}: its runtime module defines no Runtime class")
        _RUNTIMES[cls] = module
        return module


def create_handle(backend: Backend, blob: bytes, partition: str, threads: int | None = None) -> Any:
    """A runtime handle for one partition's blob, computing with ``threads`` threads (:func:`resolve_threads`);
    a refused blob is a :class:`BackendRuntimeError`."""
    module = load_runtime(backend)
    count = resolve_threads(threads)
    try:
        return module.Runtime(blob, threads=count)
    except (ValueError, RuntimeError) as exc:
        raise BackendRuntimeError(f"{backend.name} refused the blob of partition {partition!r}: {exc}") from None


class Executable(Program):
    """A compiled model ready to run: ``run({name: array}) -> {name: array}``.

    A :class:`~accel.executor.Program` whose partitions run on their
    backends' handles and whose other nodes run on the reference kernels.
    """

    def __init__(self, graph: Graph, handles: Mapping[str, Any], threads: int | None = None):
        """``handles`` maps each partition node's name to its runtime handle; ``threads`` is the count they
        were created with (reported as :attr:`threads`)."""
        self.threads = threads
        self.handles = dict(handles)

        def bind(node: Node) -> StepKind:
            compiler = node.attrs.get("compiler") if node.op == CALL_OP else None
            if compiler is None:
                return host_step(node)
            handle = handles.get(node.name)
            if handle is None:
                raise GraphError(f"partition {node.name!r} ({compiler}) has no runtime handle")
            return StepKind(True, handle.run, f"{compiler}:{node.name}")

        super().__init__(graph, bind)
