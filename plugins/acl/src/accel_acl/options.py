"""Target options of the acl backend (``{"kind": "acl", "options": {...}}``)."""

from __future__ import annotations

from accel_sdk.backend import retired_thread_option

from accel.backend import BackendOptions


class AclOptions(BackendOptions):
    """Target options of the acl backend: those every backend takes (``min_work``, ``copy_cost``).

    Threads are not a target option: the count is chosen where the model runs (``accel.load(path,
    threads=N)``, ``accel run --threads N``, ``ACCEL_NUM_THREADS``).
    """

    threads: int | None = retired_thread_option()
