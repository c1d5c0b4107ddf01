"""BlobWriter writes a real backend's format: the testbackend's blob, built call by call, runs."""

from __future__ import annotations

import numpy as np
import pytest
from accel_sdk.blob import BlobWriter

from accel.abi import dtype_code

_runtime = pytest.importorskip("accel_testbackend._runtime", reason="accel-testbackend is not installed")
from accel_testbackend.serializer import OPCODES, VERSION  # noqa: E402

RELU, CLIP = OPCODES["nn.relu"], OPCODES["clip"]


def atbk_blob(shape: tuple[int, ...], ops: list[tuple[int, list[int], list[int], list[float]]]) -> bytes:
    """The testbackend's format (its README), with one float32 tensor per op boundary."""
    w = BlobWriter()
    w.magic(b"ATBK")
    w.u32(VERSION)
    w.u32(len(ops) + 1)
    for _ in range(len(ops) + 1):
        w.u8(dtype_code("float32"))
        w.u8(len(shape))
        w.array("i64", shape)
        w.u8(0)  # an activation
    w.counted_array("u32", [0])
    w.counted_array("u32", [len(ops)])
    w.u32(len(ops))
    for code, ins, outs, floats in ops:
        w.u8(code)
        w.u8(len(ins))
        w.array("u32", ins)
        w.u8(len(outs))
        w.array("u32", outs)
        w.u8(0)  # no ints
        w.u8(len(floats))
        w.array("f32", floats)
    return w.getvalue()


def test_a_blob_written_with_blob_writer_runs_on_the_testbackend():
    blob = atbk_blob((2, 3), [(RELU, [0], [1], []), (CLIP, [1], [2], [0.5, 4.0])])
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    y = np.empty_like(x)
    _runtime.Runtime(blob).run([x], [y])
    assert y.tolist() == [[0.5, 2, 0.5], [4, 0.5, 4]]
