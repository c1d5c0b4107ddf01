"""Target options of the acl backend (``{"kind": "acl", "options": {...}}``)."""

from __future__ import annotations

from pydantic import Field

from accel.backend import BackendOptions


class AclOptions(BackendOptions):
    """Target options of the acl backend: those every backend takes (``min_work``, ``copy_cost``).

    Threads are not a target option: the count is chosen where the model runs (``accel.load(path,
    threads=N)``, ``accel run --threads N``, ``ACCEL_NUM_THREADS``).
    """

    threads: int | None = Field(
        default=None,
        ge=0,
        le=1024,
        description="ignored: accepted so that artifacts compiled when the count was a target option still "
        "load; choose threads when loading (accel.load(path, threads=N), accel run --threads N)",
    )
