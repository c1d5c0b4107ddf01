"""Test fixture: a plugin whose ``accel_register_backends`` raises (discovery reports "invalid")."""

from __future__ import annotations

from accel.hookspecs import hookimpl


@hookimpl
def accel_register_backends(register):
    raise RuntimeError("hookraises could not initialise its device (a deliberately broken test fixture)")
