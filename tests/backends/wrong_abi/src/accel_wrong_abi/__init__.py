"""Test fixture: a valid backend whose compiled runtime speaks runtime ABI 999 (discovery reports "ABI mismatch")."""

from __future__ import annotations

from types import ModuleType

from accel.backend import Backend
from accel.hookspecs import hookimpl


class WrongAbiBackend(Backend):
    """Takes every nn.relu; its runtime was built for another ABI, so it is never usable."""

    name = "wrongabi"
    distribution = "accel-wrong-abi"
    version = "0.1.0"
    layout = "NHWC"

    def op_checks(self):
        return {"nn.relu": lambda node: None}

    def serialize(self, graph):
        return b""

    def runtime_module(self) -> ModuleType:
        from accel_wrong_abi import _runtime

        return _runtime


@hookimpl
def accel_register_backends(register):
    register(WrongAbiBackend)
