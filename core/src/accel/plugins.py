"""Backend discovery: entry points in the group ``accel.backends``.

Each entry point is loaded in its own ``try``: a plugin that fails to import,
registers something invalid, raises in its hook, or ships a runtime built for
another ABI gets a :class:`PluginStatus` saying so (with the error and its
traceback kept), and every other plugin still works.

Environment switches (read at discovery):

- ``ACCEL_DISABLE_PLUGINS=a,b``: skip these entry points (``*`` skips all).
- ``ACCEL_LOAD_PLUGINS=a,b``: load only these entry points (empty: none).
"""

from __future__ import annotations

import os
import signal
import threading
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from accel import hookspecs
from accel.backend import ABI_VERSION, Backend, BackendOptions, PatternEntry
from accel.errors import BackendNotFoundError, PluginError

ENTRY_POINT_GROUP = "accel.backends"

#: Distributions of the backends the project publishes, for "pip install ..." hints.
KNOWN_DISTRIBUTIONS = {"acl": "accel-acl", "ethosn": "accel-ethosn", "bnns": "accel-bnns", "ncnn": "accel-ncnn"}


def install_hint(name: str, distribution: str) -> str:
    """How to install backend ``name``: from the index a user's pip reads, or, for the plugins of accel's own
    checkout, from the wheelhouse ``nox -s wheels`` builds."""
    hint = f"install it with: pip install {distribution}"
    if KNOWN_DISTRIBUTIONS.get(name) == distribution:
        hint += (
            f" (from a checkout of accel: nox -s wheels -- plugins/{name}, "
            f"then pip install --find-links wheelhouse {distribution})"
        )
    return hint


OK = "ok"
IMPORT_ERROR = "import error"
INVALID = "invalid"
ABI_MISMATCH = "ABI mismatch"
UNAVAILABLE = "unavailable"
DISABLED = "disabled"


@dataclass
class PluginStatus:
    """What discovery found for one backend (or one entry point that yielded none)."""

    name: str
    entry_point: str
    distribution: str = ""
    version: str = ""
    state: str = OK
    error: str | None = None
    traceback: str | None = None
    backend: type[Backend] | None = field(default=None, repr=False)
    abi_version: int | None = None
    kernel_library: str = ""
    patterns: int = 0
    ops: int = 0

    @property
    def ok(self) -> bool:
        return self.state == OK

    def describe(self) -> str:
        """``name (distribution version)`` for messages."""
        dist = " ".join(x for x in (self.distribution, self.version) if x)
        return f"{self.name} ({dist})" if dist else self.name


def _split_env(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def _entry_points() -> list[metadata.EntryPoint]:
    eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    seen: set[tuple[str, str]] = set()
    unique = []
    for ep in sorted(eps, key=lambda e: e.name):
        key = (ep.name, ep.value)
        if key not in seen:  # one distribution found twice on sys.path
            seen.add(key)
            unique.append(ep)
    return unique


class _Interrupts:
    """Tells a real Ctrl+C from a plugin that raises KeyboardInterrupt itself while it loads.

    While plugins load (in the main thread), SIGINT goes through a handler that notes it before
    raising as Python's does: a KeyboardInterrupt with no signal noted came from the plugin and is
    contained like any other import error; a real one stops the command as usual. Elsewhere every
    KeyboardInterrupt counts as real.
    """

    def __init__(self) -> None:
        self.seen = False
        self._previous: Any = None

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is not threading.main_thread():
            self.seen = True
            return self
        self._previous = signal.getsignal(signal.SIGINT)

        def noted(signum: int, frame: Any) -> None:
            self.seen = True
            if callable(self._previous):
                self._previous(signum, frame)
            elif self._previous != signal.SIG_IGN:
                raise KeyboardInterrupt

        signal.signal(signal.SIGINT, noted)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def real(self, exc: BaseException) -> bool:
        """Whether ``exc`` must stop the command: an interrupt the user sent (anything else a plugin raises,
        SystemExit included, is that plugin's failure)."""
        return isinstance(exc, KeyboardInterrupt) and self.seen


def discover(entry_points: Iterable[Any] | None = None) -> list[PluginStatus]:
    """Load every backend plugin; one status per backend (or per entry point that failed)."""
    with _Interrupts() as interrupts:
        return _discover(entry_points, interrupts)


def _discover(entry_points: Iterable[Any] | None, interrupts: _Interrupts) -> list[PluginStatus]:
    disabled = _split_env("ACCEL_DISABLE_PLUGINS") or set()
    allowed = _split_env("ACCEL_LOAD_PLUGINS")
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    statuses: list[PluginStatus] = []
    taken: dict[str, PluginStatus] = {}
    for ep in _entry_points() if entry_points is None else entry_points:
        dist = getattr(ep, "dist", None)
        base = PluginStatus(
            name=ep.name,
            entry_point=f"{ep.name} = {ep.value}",
            distribution=getattr(dist, "name", "") or "",
            version=getattr(dist, "version", "") or "",
        )
        if "*" in disabled or ep.name in disabled:
            base.state, base.error = DISABLED, "disabled by ACCEL_DISABLE_PLUGINS"
            statuses.append(base)
            continue
        if allowed is not None and ep.name not in allowed:
            base.state, base.error = DISABLED, "not listed in ACCEL_LOAD_PLUGINS"
            statuses.append(base)
            continue
        statuses.extend(_load_one(pm, ep, base, taken, interrupts))
    return statuses


def _failed(base: PluginStatus, state: str, what: str, exc: BaseException) -> PluginStatus:
    base.state = state
    base.error = f"{what}: {type(exc).__name__}: {exc}" if what else f"{type(exc).__name__}: {exc}"
    base.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return base


def _load_one(
    pm: pluggy.PluginManager, ep: Any, base: PluginStatus, taken: dict[str, PluginStatus], interrupts: _Interrupts
) -> list[PluginStatus]:
    try:
        module = ep.load()
    except BaseException as exc:
        if interrupts.real(exc):
            raise
        return [_failed(base, IMPORT_ERROR, f"importing {ep.value} failed", exc)]
    try:
        pm.register(module, name=f"{ep.name}:{ep.value}")
    except Exception as exc:  # pluggy's validation of hook names and signatures
        return [_failed(base, INVALID, "its hooks do not match accel.hookspecs", exc)]
    registered: list[Any] = []

    def register(backend: Any, **_future: Any) -> None:
        registered.append(backend)

    others = [p for p in pm.get_plugins() if p is not module]
    try:
        pm.subset_hook_caller("accel_register_backends", remove_plugins=others)(register=register)
    except BaseException as exc:
        if interrupts.real(exc):
            raise
        return [_failed(base, INVALID, "accel_register_backends raised", exc)]
    finally:
        pm.unregister(module)
    if not registered:
        base.state, base.error = INVALID, "the plugin registered no backend (implement accel_register_backends)"
        return [base]
    out = []
    for cls in registered:
        status = PluginStatus(**{**base.__dict__})
        out.append(_validate(cls, status, taken))
    return out


def _validate(cls: Any, status: PluginStatus, taken: dict[str, PluginStatus]) -> PluginStatus:
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        status.state, status.error = INVALID, f"registered {cls!r}, which is not a subclass of accel.backend.Backend"
        return status
    status.name = cls.name or status.name
    status.backend = cls
    # the installed distribution's metadata wins over what the class says of itself
    status.distribution = status.distribution or cls.distribution
    status.version = status.version or cls.version
    problem = _contract_problem(cls)
    if problem is None and status.name in taken:
        problem = f"backend name {status.name!r} is already provided by {taken[status.name].entry_point}"
    if problem is not None:
        status.state, status.error = INVALID, problem
        return status
    try:
        backend = cls()
        table = list(backend.pattern_table())
        checks = dict(backend.op_checks())
    except Exception as exc:
        return _failed(status, INVALID, "building its pattern table failed", exc)
    bad = [e for e in table if not isinstance(e, PatternEntry)]
    if bad:
        status.state, status.error = INVALID, f"pattern_table() holds {type(bad[0]).__name__}, not PatternEntry"
        return status
    if not all(isinstance(k, str) and callable(v) for k, v in checks.items()):
        status.state, status.error = INVALID, "op_checks() must map op names to callables"
        return status
    status.patterns, status.ops = len(table), len(checks)
    try:
        status.abi_version = backend.abi_version()
        status.kernel_library = backend.kernel_library()
    except Exception as exc:
        return _failed(status, UNAVAILABLE, "its runtime cannot be loaded", exc)
    if status.abi_version != ABI_VERSION:
        status.state = ABI_MISMATCH
        status.error = (
            f"its runtime was built for runtime ABI {status.abi_version}, this accel-core speaks {ABI_VERSION}; "
            f"upgrade or rebuild {status.distribution or status.name} for this accel-core"
        )
        return status
    try:
        reason = backend.unavailable_reason()
    except Exception as exc:
        return _failed(status, UNAVAILABLE, "unavailable_reason() raised", exc)
    if reason:
        status.state, status.error = UNAVAILABLE, reason
        return status
    taken[status.name] = status
    return status


def _contract_problem(cls: type[Backend]) -> str | None:
    if not (isinstance(cls.name, str) and cls.name.isidentifier()):
        return f"{cls.__name__}.name must be an identifier, got {cls.name!r}"
    if cls.layout not in ("NCHW", "NHWC"):
        return f"{cls.__name__}.layout must be 'NCHW' or 'NHWC', got {cls.layout!r}"
    if not (isinstance(cls.Options, type) and issubclass(cls.Options, BackendOptions)):
        return f"{cls.__name__}.Options must subclass accel.backend.BackendOptions"
    return None


_CACHE: list[PluginStatus] | None = None


def statuses() -> list[PluginStatus]:
    """Discovery's result, computed once per process (see :func:`reset`)."""
    global _CACHE
    if _CACHE is None:
        _CACHE = discover()
    return _CACHE


def reset() -> None:
    """Forget the cached discovery (after installing a plugin or changing the switches)."""
    global _CACHE
    _CACHE = None


def available_backends() -> dict[str, type[Backend]]:
    """Usable backends by name."""
    return {s.name: s.backend for s in statuses() if s.ok and s.backend is not None}


def get_backend(name: str, backends: Mapping[str, type[Backend]] | None = None) -> type[Backend]:
    """The backend class called ``name``; :class:`BackendNotFoundError` says what to install or fix."""
    pool = available_backends() if backends is None else backends
    cls = pool.get(name)
    if cls is not None:
        return cls
    if backends is None:
        for s in statuses():
            if s.name == name:
                raise BackendNotFoundError(f"backend {s.describe()} cannot be used: {s.state}: {s.error}")
    dist = KNOWN_DISTRIBUTIONS.get(name)
    if dist is not None:
        raise BackendNotFoundError(f"backend {name!r} is not installed; {install_hint(name, dist)}")
    have = ", ".join(sorted(pool)) or "none"
    raise BackendNotFoundError(f"no installed plugin provides backend {name!r} (usable backends: {have})")


def hook_names() -> list[str]:
    """Every hook a plugin may implement (for docs and tests)."""
    return sorted(n for n in dir(hookspecs) if n.startswith("accel_") and callable(getattr(hookspecs, n)))


__all__ = [
    "ENTRY_POINT_GROUP",
    "PluginError",
    "PluginStatus",
    "available_backends",
    "discover",
    "get_backend",
    "reset",
    "statuses",
]
