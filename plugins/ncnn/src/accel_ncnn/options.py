"""Target options of the ncnn backend (``{"kind": "ncnn", "options": {...}}`` in a target file)."""

from __future__ import annotations

from accel.backend import BackendOptions


class NcnnOptions(BackendOptions):
    """Target options of the ncnn backend: those every backend takes (``min_work``, ``copy_cost``).

    Add a field here (``pydantic.Field`` with a description) for a choice a compiled
    artifact must keep; the backend reads it as ``self.options.<field>``. Unknown keys
    are refused with a line naming them. Threads are not a target option: the count is
    chosen where the model runs (``accel.load(path, threads=N)``, ``accel run --threads
    N``, ``ACCEL_NUM_THREADS``) and reaches the runtime when it loads a blob.
    """
