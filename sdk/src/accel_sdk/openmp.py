"""OpenMP settings a oneDNN-based runtime applies before its compiled module loads."""

from __future__ import annotations

import os

__all__ = ["sleep_idle_threads"]


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
