"""Composite targets: a host plus accelerator backends in priority order.

The full form (``--target FILE.json``)::

    {"host": "cpu",
     "devices": [{"kind": "ethosn", "options": {"variant": "N78"}},
                 {"kind": "acl"}]}

``--backends ethosn,acl`` is shorthand for devices with default options. A
device's ``options`` are validated by its backend's options model (a
:class:`accel.backend.BackendOptions` subclass), so an unknown key or a bad
value is an error naming the device and the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from accel.backend import Backend
from accel.errors import TargetError
from accel.files import read_regular
from accel.limits import load_json

#: Largest target file read (a target is a few lines of JSON).
MAX_TARGET_FILE_BYTES = 16 << 20


class Device(BaseModel):
    """One accelerator: the backend ``kind`` and its options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(description="backend name, e.g. 'ethosn'")
    options: dict[str, Any] = Field(default_factory=dict, description="the backend's options")


class CompositeTarget(BaseModel):
    """``{host, devices}``: devices in priority order (the first that takes a node runs it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: Literal["cpu"] = "cpu"
    devices: list[Device] = Field(default_factory=list)

    @field_validator("devices")
    @classmethod
    def _distinct(cls, devices: list[Device]) -> list[Device]:
        kinds = [d.kind for d in devices]
        twice = next((k for i, k in enumerate(kinds) if k in kinds[:i]), None)
        if twice is not None:
            raise ValueError(f"backend {twice!r} is listed twice in devices")
        return devices

    # -- constructors ------------------------------------------------------------------
    @classmethod
    def from_backends(cls, spec: str | Sequence[str]) -> CompositeTarget:
        """``"ethosn,acl"`` (or a list of names) → devices with default options."""
        names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [s.strip() for s in spec]
        if any(not n for n in names):
            raise TargetError(f"--backends: empty backend name in {spec!r} (write names separated by commas)")
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:
            raise TargetError(f"backend {twice!r} is listed twice in --backends")
        return cls.parse({"devices": [{"kind": n} for n in names]}, where="--backends")

    @classmethod
    def parse(cls, doc: Any, where: str = "target") -> CompositeTarget:
        """Validate a target document; :class:`TargetError` names the offending field."""
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            raise TargetError(f"{where}: {_first_error(exc)}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> CompositeTarget:
        path = Path(path)
        data = read_regular(path, f"target file {str(path)!r}", TargetError, limit=MAX_TARGET_FILE_BYTES)
        doc = load_json(data, f"target file {str(path)!r}", TargetError)
        return cls.parse(doc, where=str(path))

    # -- use -----------------------------------------------------------------------------
    def backend_names(self) -> list[str]:
        return [d.kind for d in self.devices]

    def instantiate(self, available: Mapping[str, type[Backend]] | None = None) -> list[Backend]:
        """Backend instances in priority order, options validated by each backend's model."""
        from accel.plugins import get_backend

        out = []
        for i, device in enumerate(self.devices):
            cls = get_backend(device.kind, available)
            try:
                out.append(cls(cls.Options.model_validate(device.options)))
            except ValidationError as exc:
                raise TargetError(f"devices[{i}] ({device.kind}): {_first_error(exc)}") from None
        return out

    def describe(self) -> str:
        return " > ".join([*self.backend_names(), self.host])


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err.get("loc", ()))
    msg = err.get("msg", "invalid")
    if err.get("type") == "extra_forbidden":
        msg = "unknown option"
    elif err.get("type") == "value_error":  # our own validators' messages, without pydantic's "Value error, "
        cause = (err.get("ctx") or {}).get("error")
        msg = str(cause) if cause is not None else msg.removeprefix("Value error, ")
        if loc == "devices":  # the message names the field itself
            return msg
    return f"{loc}: {msg}" if loc else msg
