"""OpenMP settings a runtime applies before its compiled module loads, and the loading itself.

Every plugin's ``Backend.runtime_module`` is ``return import_runtime(__package__)``
(or the package's name): idle OpenMP threads are put to sleep the same way in every
backend, then ``<package>._runtime`` is imported.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["import_runtime", "sleep_idle_threads"]


def import_runtime(package: str, module: str = "_runtime") -> ModuleType:
    """``<package>.<module>``, the plugin's compiled runtime, imported after :func:`sleep_idle_threads`."""
    sleep_idle_threads()
    return importlib.import_module(f"{package}.{module}")


def sleep_idle_threads() -> None:
    """Let idle OpenMP threads sleep rather than spin, unless the user chose.

    GNU OpenMP reads ``OMP_WAIT_POLICY`` once, when ``libgomp`` loads with the first
    runtime that links it, so a backend calls this before importing its compiled
    module. Spinning team members wait at every layer's barrier for a partner the OS
    has descheduled: on a 2-core machine shared with other work, acl's MobileNetV2 at
    2 threads took 1,199 ms spinning and 38 ms passive, ethosn's ResNet-18 twice as
    long spinning. ONNX Runtime runs beside it the same way
    (``session.intra_op.allow_spinning=0``). A user who sets ``OMP_WAIT_POLICY`` (for
    example ``ACTIVE`` on a machine of their own) or ``GOMP_SPINCOUNT`` keeps it.
    """
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
