"""Target options of the bnns backend (``{"kind": "bnns", "options": {...}}``)."""

from __future__ import annotations

from pydantic import Field

from accel.backend import BackendOptions


class BnnsOptions(BackendOptions):
    """Target options of the bnns backend: those every backend takes (``min_work``, ``copy_cost``).

    Threads are not a target option: the count is chosen where the model runs (``accel.load(path,
    threads=N)``, ``accel run --threads N``, ``ACCEL_NUM_THREADS``).
    """

    num_threads: int | None = Field(
        default=None,
        ge=0,
        le=1024,
        description="ignored: accepted so that artifacts compiled when the count was a target option still "
        "load; choose threads when loading (accel.load(path, threads=N), accel run --threads N)",
    )
