"""Hook specifications: everything a plugin may implement.

A plugin is a module named by an entry point in the group ``accel.backends``
(``mynpu = "accel_mynpu"``). It implements hooks by defining functions with
these exact names and parameter names, decorated with :data:`hookimpl`::

    from accel.hookspecs import hookimpl

    @hookimpl
    def accel_register_backends(register):
        register(MyNpuBackend)

Most of the contract lives in :class:`accel.backend.Backend`; the hooks only
hand the core those classes, so new keyword arguments can be added to
``register`` later without breaking a plugin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from accel.backend import Backend

PROJECT = "accel"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def accel_register_backends(register: Callable[[type[Backend]], None]) -> None:
    """Register the backends this plugin provides.

    Signature: ``accel_register_backends(register: Callable[[type[Backend]], None]) -> None``

    Call ``register(BackendClass)`` once per backend, with a subclass of
    :class:`accel.backend.Backend` (the class, not an instance: the core
    instantiates it with the options of a target). The return value is
    ignored. An exception raised here marks the plugin as broken; the other
    plugins are unaffected.
    """
