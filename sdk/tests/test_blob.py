"""accel_sdk.blob.BlobWriter against accel_sdk/blob_reader.hpp, through the compiled probe.

Every writer call is read back by the reader call it mirrors; every truncation of a
blob fails with the offset, the bytes needed and the bytes left, which pins each
bounds check to the byte (a check off by one fails these tests).
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from accel_sdk.blob import SCALARS, BlobWriter
from probe_build import probe

from accel.errors import PartitionError

LIMITS = {kind: bounds for kind, (_, _, bounds) in SCALARS.items()}


@pytest.fixture(scope="module")
def m():
    return probe()


def test_every_scalar_kind_round_trips_its_extremes(m):
    w = BlobWriter()
    script: list = []
    want: list = []
    for kind, bounds in LIMITS.items():
        values = [bounds[0], bounds[1], 0, 1] if bounds else [0.0, -0.0, 1.5, -3.25e38, float("inf"), 5e-324]
        if kind == "f32":
            values = [0.0, -1.0, 3.4028234663852886e38, 1.401298464324817e-45, float("-inf")]
        for v in values:
            w.scalar(kind, v)
            script.append(kind)
            want.append(v)
    script.append("end")
    got = m.read(w.getvalue(), script)
    assert got[:-1] == want
    # little-endian on the wire
    w = BlobWriter()
    w.u32(0x01020304)
    w.i16(-2)
    assert w.getvalue() == b"\x04\x03\x02\x01\xfe\xff"


def test_nan_round_trips_as_nan(m):
    w = BlobWriter()
    w.f32(float("nan"))
    w.f64(float("nan"))
    a, b = m.read(w.getvalue(), ["f32", "f64"])
    assert a != a and b != b


def test_arrays_strings_constants_and_alignment_round_trip(m):
    rng = np.random.default_rng(3)
    w = BlobWriter()
    w.magic(b"MYNP")
    w.u32(2)
    w.array("i64", [1, -(1 << 63), (1 << 63) - 1])
    w.counted_array("f32", np.array([0.5, -2.0], np.float32))
    w.counted_array("u8", [])
    w.string("héllo ⟨accel⟩")
    w.string(b"")
    w.align(8)
    data = rng.normal(size=(3, 5)).astype(np.float32)
    at = w.constant(data, align=64)
    big_endian = np.arange(4, dtype=">i4")
    at2 = w.constant(big_endian, align=16)
    w.raw(b"xyz")
    got = m.read(
        w.getvalue(),
        [("magic", "MYNP"), ("version", 1, 2), ("array", "i64", 3), ("counted", "f32"), ("counted", "u8"),
         ("string", 64), ("string", 0), ("align", 8), ("constant", 64), ("constant", 16), ("bytes", 3), "end"],
    )  # fmt: skip
    assert got[1] == 2
    assert got[2] == [1, -(1 << 63), (1 << 63) - 1]
    assert got[3] == [0.5, -2.0] and got[4] == []
    assert got[5].decode() == "héllo ⟨accel⟩" and got[6] == b""
    (off, raw), (off2, raw2) = got[8], got[9]
    assert off == at and off % 64 == 0 and np.array_equal(np.frombuffer(raw, "<f4").reshape(3, 5), data)
    assert off2 == at2 and off2 % 16 == 0 and np.frombuffer(raw2, "<i4").tolist() == [0, 1, 2, 3]
    assert got[10] == b"xyz"


def test_random_programs_round_trip(m):
    rng = np.random.default_rng(7)
    for _ in range(200):
        w = BlobWriter()
        script: list = []
        want: list = []
        for _ in range(int(rng.integers(1, 12))):
            choice = int(rng.integers(0, 5))
            if choice == 0:
                kind = str(rng.choice([k for k, b in LIMITS.items() if b]))
                lo, hi = LIMITS[kind]
                v = int(rng.integers(lo, hi, endpoint=True, dtype=np.int64 if lo < 0 else np.uint64))
                w.scalar(kind, v)
                script.append(kind)
                want.append(v)
            elif choice == 1:
                xs = rng.integers(-1000, 1000, int(rng.integers(0, 9))).tolist()
                w.counted_array("i32", xs)
                script.append(("counted", "i32"))
                want.append(xs)
            elif choice == 2:
                s = bytes(rng.integers(0, 256, int(rng.integers(0, 20))).astype(np.uint8))
                w.string(s)
                script.append(("string", 1000))
                want.append(s)
            elif choice == 3:
                a = 1 << int(rng.integers(0, 8))
                w.align(a)
                script.append(("align", a))
                want.append(None)
            else:
                a = 1 << int(rng.integers(0, 8))
                arr = rng.integers(0, 255, int(rng.integers(0, 30))).astype(np.uint8)
                off = w.constant(arr, align=a)
                script.append(("constant", a))
                want.append((off, arr.tobytes()))
        assert m.read(w.getvalue(), [*script, "end"]) == [*want, None]


def _program() -> tuple[bytes, list]:
    w = BlobWriter()
    w.magic(b"ABCD")
    w.u32(1)
    w.u8(3)
    w.i64(-9)
    w.string("relu")
    w.counted_array("u16", [1, 2, 3])
    w.constant(np.arange(6, dtype=np.int32), align=16)
    w.f64(0.25)
    w.array("i8", [-1, 2])
    return w.getvalue(), [("magic", "ABCD"), ("version", 1, 1), "u8", "i64", ("string", 100),
                          ("counted", "u16"), ("constant", 16), "f64", ("array", "i8", 2), "end"]  # fmt: skip


SHORT = re.compile(r"^blob offset (\d+): (.+?): needs (\d+)(?: x (\d+))? bytes?, (\d+) left$")
DOES_NOT_FIT = re.compile(r"^blob offset (\d+): .*does not fit")


def test_every_truncation_fails_with_the_bytes_needed_and_left(m):
    blob, script = _program()
    assert m.read(blob, script)[-1] is None
    for cut in range(len(blob)):
        with pytest.raises(m.BlobError) as info:
            m.read(blob[:cut], script)
        msg = str(info.value)
        short = SHORT.match(msg)
        if short is None:  # a count or size refused before any byte of its data is read
            fits = DOES_NOT_FIT.match(msg)
            assert fits is not None, f"cut at {cut}: {msg}"
            assert int(fits.group(1)) == info.value.offset < cut
            continue
        offset, left = int(short.group(1)), int(short.group(5))
        need = int(short.group(3)) * int(short.group(4) or 1)
        assert offset == info.value.offset
        assert left == cut - offset, f"cut at {cut}: {msg}"
        assert need > left, f"cut at {cut}: {msg}"


def test_a_read_of_exactly_the_bytes_left_succeeds_and_one_more_fails(m):
    # the reads a planted `n > remaining() + 1` would let through, at the end of the blob
    assert m.read(b"\x01\x02\x03\x04", ["u32", "end"]) == [0x04030201, None]
    with pytest.raises(m.BlobError, match=r"^blob offset 0: u32: needs 4 bytes, 3 left$"):
        m.read(b"\x01\x02\x03", ["u32"])
    with pytest.raises(m.BlobError, match=r"^blob offset 2: u8: needs 1 byte, 0 left$"):
        m.read(b"\x01\x02", ["u16", "u8"])
    with pytest.raises(m.BlobError, match=r"^blob offset 4: bytes: needs 5 bytes, 4 left$"):
        m.read(b"\x00" * 8, ["u32", ("bytes", 5)])
    with pytest.raises(
        m.BlobError, match=r"^blob offset 0: string=3 does not fit in the 2 bytes left \(needs 3 x 1\)$"
    ):
        m.read(struct.pack("<I", 3) + b"ab", [("string", 10)])
    with pytest.raises(m.BlobError, match=r"^blob offset 0: magic: needs 4 bytes, 3 left$"):
        m.read(b"ABC", [("magic", "ABCD")])
    with pytest.raises(m.BlobError, match=r"^blob offset 16: constant: needs 3 bytes, 2 left$"):
        m.read(struct.pack("<Q", 3) + bytes(8) + b"xy", [("constant", 16)])
    with pytest.raises(m.BlobError, match=r"^blob offset 9: padding: needs 3 bytes, 2 left$"):
        m.read(b"\x00" * 11, [("bytes", 9), ("align", 4), "u8"])


def test_malformed_sections_are_refused_at_their_offset(m):
    with pytest.raises(m.BlobError, match=r"^blob offset 2: padding: padding byte is not zero$") as info:
        m.read(b"\x07\x00\x01\x00", ["u8", ("align", 4)])
    assert info.value.offset == 2
    with pytest.raises(m.BlobError, match="alignment 3 is not a power of two"):
        m.read(b"\x00" * 4, [("align", 3)])
    with pytest.raises(m.BlobError, match=r"^blob offset 0: constant: size 100 does not fit \(4 bytes left\)$"):
        m.read(struct.pack("<Q", 100) + b"abcd", [("constant", 1)])
    with pytest.raises(m.BlobError, match=r"size 4 does not fit \(4 bytes left, at most 3\)"):
        m.read(struct.pack("<Q", 4) + b"abcd", [("constant", 1, 3)])
    with pytest.raises(m.BlobError, match=r"^blob offset 0: string: length 5 exceeds 4$"):
        m.read(struct.pack("<I", 5) + b"abcde", [("string", 4)])
    with pytest.raises(m.BlobError, match=r"^blob offset 0: count=3 does not fit in the 8 bytes left \(needs 3 x 4\)$"):
        m.read(struct.pack("<I", 3) + bytes(8), [("count", 4, 100)])
    with pytest.raises(m.BlobError, match=r"^blob offset 2: 1 unexpected trailing bytes$"):
        m.read(b"\x00\x00\x00", ["u16", "end"])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda w: w.u8(256), r"u8=256 does not fit in a u8 \[0, 255\]"),
        (lambda w: w.i8(-129), r"i8=-129 does not fit"),
        (lambda w: w.u64(-1), r"u64=-1 does not fit"),
        (lambda w: w.i64(1 << 63), "does not fit in a i64"),
        (lambda w: w.u32(True), "True is not an integer"),
        (lambda w: w.u32(1.0), "1.0 is not an integer"),
        (lambda w: w.f64("1"), "'1' is not a number"),
        (lambda w: w.f32(1e39), "does not fit in a float32"),
        (lambda w: w.scalar("u128", 1), "unknown scalar kind 'u128'"),
        (lambda w: w.counted_array("u8", [1, 300]), "element 300 does not fit in a u8"),
        (lambda w: w.array("i32", [1.5]), "elements must be integers"),
        (lambda w: w.array("f32", [1e300]), "does not fit in a f32"),
        (lambda w: w.array("f32", ["a"]), "must be numbers"),
        (lambda w: w.align(12), "alignment must be a power of two, got 12"),
        (lambda w: w.constant(np.zeros(2), align=0), "alignment must be a power of two, got 0"),
        (lambda w: w.constant(np.array([object()])), "cannot be written as bytes"),
        (lambda w: w.patch(0, "u32", 1), "patch at offset 0: no u32 there"),
        (lambda w: w.magic(b""), "magic must not be empty"),
    ],
)  # fmt: skip
def test_the_writer_refuses_what_the_reader_could_not_read_back(call, message):
    with pytest.raises(PartitionError, match=message):
        call(BlobWriter())


def test_reserve_and_patch_write_a_count_known_at_the_end(m):
    w = BlobWriter()
    at = w.reserve("u32")
    for i in range(3):
        w.i16(-i)
    w.patch(at, "u32", 3, "item count")
    assert len(w) == w.tell() == 10
    n, *items = m.read(w.getvalue(), [("count", 2, 10), "i16", "i16", "i16"])
    assert (n, items) == (3, [0, -1, -2])
    with pytest.raises(PartitionError, match="item count=-1 does not fit"):
        w.patch(at, "u32", -1, "item count")


@pytest.mark.parametrize("kind", ["u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64"])
def test_a_short_integer_list_is_written_to_its_kinds_bounds_and_no_further(kind):
    """A short list of ints is packed at once (struct checks the range); one element past either
    bound is refused by name, as numpy's path refuses it, and nothing is written."""
    from accel_sdk.blob import SCALARS

    fmt, _, (lo, hi) = SCALARS[kind]
    w = BlobWriter()
    assert w.array(kind, [lo, hi, 0]) == 3
    assert w.getvalue() == struct.pack(f"<3{fmt}", lo, hi, 0)
    for bad in (lo - 1, hi + 1):
        w = BlobWriter()
        with pytest.raises(PartitionError, match=rf"element {bad} does not fit in a {kind}"):
            w.array(kind, [0, bad], "ids")
        assert len(w) == 0
