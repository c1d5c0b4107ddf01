"""The constants of the C runtime ABI (``accel/runtime_abi.h``), for Python code.

A serializer writes dtype codes a compiled runtime reads back as ``accel_dtype``;
both sides take them from here and from the header, and a test keeps the two
equal::

    from accel.abi import DTYPE_CODES, dtype_code

    code = dtype_code(value.type.dtype)   # "float32" -> 0, "int8" -> 3, ...
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from accel.tensor_types import dtype_name

#: ``ACCEL_ABI_VERSION``: bumped on any change to the structures or entry points of the header.
ABI_VERSION = 2

#: Runtime ABI versions whose artifacts this core loads. The ABI covers the entry points of a
#: runtime, not the blobs (each backend versions and validates its own format), so an artifact
#: compiled when the ABI was 1 runs on today's runtimes; version 2 added the options of
#: ``create`` (the thread count, chosen at load time) and ``num_threads``.
ARTIFACT_ABI_VERSIONS = frozenset({1, 2})

#: ``ACCEL_RUNTIME_CAPSULE``: the name of the capsule a runtime module publishes as ``__accel_abi__``.
RUNTIME_CAPSULE = "accel.runtime_api"

#: ``ACCEL_MAX_RANK``: the largest tensor rank a runtime is handed.
MAX_RANK = 8

#: ``accel_status`` codes.
STATUS_CODES: MappingProxyType[str, int] = MappingProxyType(
    {
        "ACCEL_OK": 0,
        "ACCEL_ERR_INVALID_BLOB": 1,
        "ACCEL_ERR_INVALID_ARGUMENT": 2,
        "ACCEL_ERR_RUNTIME": 3,
    }
)

#: ``accel_dtype`` codes by numpy dtype name (the names of :data:`accel.ir.DTYPES`).
DTYPE_CODES: MappingProxyType[str, int] = MappingProxyType(
    {
        "float32": 0,
        "float16": 1,
        "float64": 2,
        "int8": 3,
        "uint8": 4,
        "int16": 5,
        "uint16": 6,
        "int32": 7,
        "uint32": 8,
        "int64": 9,
        "uint64": 10,
        "bool": 11,
    }
)

#: The dtype name of each ``accel_dtype`` code.
DTYPE_NAMES: MappingProxyType[int, str] = MappingProxyType({code: name for name, code in DTYPE_CODES.items()})


def dtype_code(dtype: Any) -> int:
    """The ``accel_dtype`` code of a dtype (a name of :data:`accel.ir.DTYPES`, a numpy dtype or type).

    Raises :class:`~accel.errors.GraphError` for a dtype the ABI has no code for.
    """
    return DTYPE_CODES[dtype_name(dtype)]


__all__ = [
    "ABI_VERSION",
    "ARTIFACT_ABI_VERSIONS",
    "DTYPE_CODES",
    "DTYPE_NAMES",
    "MAX_RANK",
    "RUNTIME_CAPSULE",
    "STATUS_CODES",
    "dtype_code",
]
