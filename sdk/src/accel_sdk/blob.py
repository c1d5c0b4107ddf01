"""Write blobs that ``accel_sdk/blob_reader.hpp`` reads: the Python half of a backend's format.

Every method writes what one ``BlobReader`` call reads, little-endian on every host:

==============================  ===================================================
``BlobWriter``                  ``accel_sdk::BlobReader``
==============================  ===================================================
``magic(b"MYNP")``              ``expect_magic("MYNP")``
``u32(1)`` (a format version)   ``expect_version(1, 1)``
``u8 .. u64, i8 .. i64``        ``read<std::uint8_t>() .. read<std::int64_t>()``
``f32(x)``, ``f64(x)``          ``read<float>()``, ``read<double>()``
``array("i64", xs)``            ``read_array<std::int64_t>(n)`` (no count written)
``counted_array("f32", xs)``    ``read_counted_array<float>()`` (u32 count first)
``string("relu")``              ``read_string(max_len)`` (u32 byte length, UTF-8)
``raw(b"...")``                 ``read_bytes(n)``
``align(16)``                   ``align(16)`` (zero bytes to a multiple of 16)
``constant(array, align=64)``   ``read_constant(64, &size)`` (u64 size, padding, data)
==============================  ===================================================

Alignment is counted from the start of the blob. Out-of-range values are refused
with :class:`~accel.errors.PartitionError` (the error a serializer raises), never
wrapped or truncated. A small format, writer and reader side by side::

    from accel_sdk.blob import BlobWriter
    from accel.abi import dtype_code

    w = BlobWriter()
    w.magic(b"MYNP")
    w.u32(1)                                  # format version
    w.u8(dtype_code(value.type.dtype))
    w.counted_array("i64", value.type.shape)
    w.constant(weights, align=64)
    blob = w.getvalue()

    // C++, in MyRuntime::create(accel_sdk::BlobReader& blob)
    blob.expect_magic("MYNP");
    blob.expect_version(1, 1);
    auto dtype = blob.read_in_range<std::uint8_t>(0, ACCEL_BOOL, "dtype");
    auto shape = blob.read_counted_array<std::int64_t>("shape", ACCEL_MAX_RANK);
    std::size_t nbytes = 0;
    const std::uint8_t* weights = blob.read_constant(64, &nbytes, "weights");
    blob.expect_end();
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

from accel.errors import PartitionError

#: The scalar kinds: struct format character, numpy little-endian dtype, (lowest, highest) for integers.
SCALARS: dict[str, tuple[str, str, tuple[int, int] | None]] = {
    "u8": ("B", "<u1", (0, (1 << 8) - 1)),
    "u16": ("H", "<u2", (0, (1 << 16) - 1)),
    "u32": ("I", "<u4", (0, (1 << 32) - 1)),
    "u64": ("Q", "<u8", (0, (1 << 64) - 1)),
    "i8": ("b", "<i1", (-(1 << 7), (1 << 7) - 1)),
    "i16": ("h", "<i2", (-(1 << 15), (1 << 15) - 1)),
    "i32": ("i", "<i4", (-(1 << 31), (1 << 31) - 1)),
    "i64": ("q", "<i8", (-(1 << 63), (1 << 63) - 1)),
    "f32": ("f", "<f4", None),
    "f64": ("d", "<f8", None),
}

#: The packer of each kind (one little-endian scalar).
_STRUCTS = {kind: struct.Struct("<" + fmt) for kind, (fmt, _, _) in SCALARS.items()}
_PACK_U16 = _STRUCTS["u16"].pack
_PACK_U32 = _STRUCTS["u32"].pack
_PACK_U64 = _STRUCTS["u64"].pack
_PACK_I32 = _STRUCTS["i32"].pack
_PACK_I64 = _STRUCTS["i64"].pack

_INT_ONLY = frozenset((int,))

#: The packer of ``n`` scalars of a struct format character, made on first use: ``{(fmt, n): pack}``.
_ARRAY_PACKERS: dict[tuple[str, int], Any] = {}

#: Largest element count ``counted_array`` and ``string`` can write (their count is a u32).
MAX_COUNT = (1 << 32) - 1


class BlobWriter:
    """A growing little-endian byte stream; :meth:`getvalue` returns the blob."""

    def __init__(self) -> None:
        self._buf = bytearray()

    # -- position ------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._buf)

    def tell(self) -> int:
        """The offset the next write lands at (what ``BlobReader::offset()`` will say there)."""
        return len(self._buf)

    def getvalue(self) -> bytes:
        """The blob so far, as bytes."""
        return bytes(self._buf)

    # -- scalars -------------------------------------------------------------------
    def scalar(self, kind: str, value: Any, what: str = "value") -> None:
        """One little-endian scalar of ``kind`` (a key of :data:`SCALARS`)."""
        _, _, bounds = _kind(kind)
        if type(value) is int and bounds is not None and bounds[0] <= value <= bounds[1]:
            self._buf += _STRUCTS[kind].pack(value)  # the common case, checked as _check would
        else:
            self._buf += _STRUCTS[kind].pack(_check(kind, bounds, value, what))

    # Each fixed-size writer packs a Python int in range directly (the common case, the same
    # bytes :meth:`scalar` writes) and leaves anything else to :meth:`scalar`'s checks.
    def u8(self, value: int, what: str = "u8") -> None:
        if type(value) is int and 0 <= value <= 0xFF:
            self._buf.append(value)
        else:
            self.scalar("u8", value, what)

    def u16(self, value: int, what: str = "u16") -> None:
        if type(value) is int and 0 <= value <= 0xFFFF:
            self._buf += _PACK_U16(value)
        else:
            self.scalar("u16", value, what)

    def u32(self, value: int, what: str = "u32") -> None:
        if type(value) is int and 0 <= value <= 0xFFFFFFFF:
            self._buf += _PACK_U32(value)
        else:
            self.scalar("u32", value, what)

    def u64(self, value: int, what: str = "u64") -> None:
        if type(value) is int and 0 <= value <= 0xFFFFFFFFFFFFFFFF:
            self._buf += _PACK_U64(value)
        else:
            self.scalar("u64", value, what)

    def i8(self, value: int, what: str = "i8") -> None:
        self.scalar("i8", value, what)

    def i16(self, value: int, what: str = "i16") -> None:
        self.scalar("i16", value, what)

    def i32(self, value: int, what: str = "i32") -> None:
        if type(value) is int and -0x80000000 <= value <= 0x7FFFFFFF:
            self._buf += _PACK_I32(value)
        else:
            self.scalar("i32", value, what)

    def i64(self, value: int, what: str = "i64") -> None:
        if type(value) is int and -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
            self._buf += _PACK_I64(value)
        else:
            self.scalar("i64", value, what)

    def f32(self, value: float, what: str = "f32") -> None:
        """A float32; a finite value too large for float32 is refused (not written as inf)."""
        self.scalar("f32", value, what)

    def f64(self, value: float, what: str = "f64") -> None:
        self.scalar("f64", value, what)

    # -- sequences -----------------------------------------------------------------
    def array(self, kind: str, values: Iterable[Any] | np.ndarray, what: str = "array") -> int:
        """Scalars of ``kind`` back to back, no count; returns how many."""
        data, count = _pack(kind, values, what)
        self._buf += data
        return count

    def counted_array(self, kind: str, values: Iterable[Any] | np.ndarray, what: str = "array") -> int:
        """A u32 element count, then the scalars (``read_counted_array<T>``); returns the count."""
        data, count = _pack(kind, values, what)
        self.u32(_count(count, what), what)
        self._buf += data
        return count

    def string(self, text: str | bytes, what: str = "string") -> None:
        """A u32 byte length, then the bytes (UTF-8 for a str), no terminator."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        self.u32(_count(len(data), what), what)
        self._buf += data

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes as they are (``read_bytes(n)``: the reader must know n)."""
        self._buf += data if type(data) is bytes or type(data) is bytearray else bytes(data)

    def magic(self, tag: bytes) -> None:
        """The format's magic bytes (``expect_magic``)."""
        if not tag:
            raise PartitionError("blob magic must not be empty")
        self._buf += bytes(tag)

    # -- alignment and constants -----------------------------------------------------
    def align(self, alignment: int) -> int:
        """Zero bytes up to the next multiple of ``alignment`` (a power of two); returns how many."""
        _power_of_two(alignment)
        pad = -len(self._buf) % alignment
        self._buf += bytes(pad)
        return pad

    def constant(self, data: np.ndarray | bytes | bytearray | memoryview, *, align: int = 64) -> int:
        """A u64 byte size, zero padding to ``align``, then the data (C order, little-endian);
        returns the offset of the data (``read_constant``)."""
        payload = _le_bytes(data)
        self.u64(len(payload), "constant size")
        self.align(align)
        at = len(self._buf)
        self._buf += payload
        return at

    # -- patching ------------------------------------------------------------------
    def reserve(self, kind: str) -> int:
        """Room for one scalar written later with :meth:`patch` (a count known at the end); returns its offset."""
        fmt, _, _ = _kind(kind)
        at = len(self._buf)
        self._buf += bytes(struct.calcsize("<" + fmt))
        return at

    def patch(self, offset: int, kind: str, value: Any, what: str = "value") -> None:
        """Overwrite the scalar at ``offset`` (from :meth:`reserve`)."""
        fmt, _, bounds = _kind(kind)
        size = struct.calcsize("<" + fmt)
        if not 0 <= offset <= len(self._buf) - size:
            raise PartitionError(f"patch at offset {offset}: no {kind} there (the blob has {len(self._buf)} bytes)")
        struct.pack_into("<" + fmt, self._buf, offset, _check(kind, bounds, value, what))


def _kind(kind: str) -> tuple[str, str, tuple[int, int] | None]:
    got = SCALARS.get(kind)
    if got is None:
        raise PartitionError(f"unknown scalar kind {kind!r} (use {', '.join(SCALARS)})")
    return got


def _check(kind: str, bounds: tuple[int, int] | None, value: Any, what: str) -> int | float:
    if bounds is None:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise PartitionError(f"{what}: {value!r} is not a number")
        x = float(value)
        with np.errstate(over="ignore"):
            narrowed = float(np.float32(x)) if kind == "f32" else x
        if math.isfinite(x) and not math.isfinite(narrowed):
            raise PartitionError(f"{what}: {x!r} does not fit in a float32")
        return x
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise PartitionError(f"{what}: {value!r} is not an integer")
    v = int(value)
    if not bounds[0] <= v <= bounds[1]:
        raise PartitionError(f"{what}={v} does not fit in a {kind} [{bounds[0]}, {bounds[1]}]")
    return v


def _pack(kind: str, values: Iterable[Any] | np.ndarray, what: str) -> tuple[bytes, int]:
    """The bytes of ``values`` as ``kind`` scalars, and how many; an empty list or tuple, or a short
    one of Python ints in range (shapes, ids, attributes), is packed directly, anything else through numpy."""
    fmt, le, bounds = _kind(kind)
    if type(values) is list or type(values) is tuple:
        n = len(values)  # type: ignore[arg-type]
        if not n:
            return b"", 0  # (what numpy's path gives for no elements, of any kind)
        if bounds is not None and n <= 64 and _INT_ONLY.issuperset(map(type, values)):  # type: ignore[arg-type]
            pack = _ARRAY_PACKERS.get((fmt, n))
            if pack is None:
                pack = _ARRAY_PACKERS[fmt, n] = struct.Struct(f"<{n}{fmt}").pack
            try:  # (struct refuses an integer out of the format's range, as the bounds do)
                return pack(*values), n
            except struct.error:
                bad = next(v for v in values if not bounds[0] <= v <= bounds[1])  # type: ignore[union-attr]
                raise PartitionError(
                    f"{what}: element {bad} does not fit in a {kind} [{bounds[0]}, {bounds[1]}]"
                ) from None
    arr = _as_array(kind, le, bounds, values, what)
    return arr.tobytes(), int(arr.size)


def _as_array(
    kind: str, le: str, bounds: tuple[int, int] | None, values: Iterable[Any] | np.ndarray, what: str
) -> np.ndarray:
    src = values if isinstance(values, np.ndarray) else np.asarray(list(values))
    if src.dtype == np.bool_ or (src.dtype.kind not in "iuf" and src.size):
        raise PartitionError(f"{what}: {kind} elements must be numbers, got {src.dtype}")
    src = src.reshape(-1)
    if bounds is not None:
        if src.size and src.dtype.kind == "f":
            raise PartitionError(f"{what}: {kind} elements must be integers, got {src.dtype}")
        if src.size and (int(src.min()) < bounds[0] or int(src.max()) > bounds[1]):
            bad = next(int(x) for x in src.tolist() if not bounds[0] <= int(x) <= bounds[1])
            raise PartitionError(f"{what}: element {bad} does not fit in a {kind} [{bounds[0]}, {bounds[1]}]")
        return src.astype(le)
    with np.errstate(over="ignore", invalid="ignore"):
        out = src.astype(le)
    if src.size and not np.array_equal(np.isfinite(out), np.isfinite(src)):
        raise PartitionError(f"{what}: an element does not fit in a {kind}")
    return out


def _count(n: int, what: str) -> int:
    if n > MAX_COUNT:
        raise PartitionError(f"{what}: {n} elements, more than a u32 count holds")
    return n


def _power_of_two(alignment: int) -> None:
    if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
        raise PartitionError(f"alignment must be a power of two, got {alignment!r}")


def _le_bytes(data: np.ndarray | bytes | bytearray | memoryview) -> bytes:
    if isinstance(data, np.ndarray):
        if data.dtype.hasobject or data.dtype.fields is not None:
            raise PartitionError(f"constant of dtype {data.dtype} cannot be written as bytes")
        return np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<")).tobytes()
    return bytes(data)


__all__ = ["MAX_COUNT", "SCALARS", "BlobWriter"]
