"""The sdk's C++ headers at work, through the testbackend's runtime (built with accel-sdk).

Blobs are written with accel_sdk.blob.BlobWriter, field by field, so a test can break any field.

blob_reader.hpp: every malformed blob is a ValueError naming the offset;
runtime.hpp: the C table, the capsule, argument checks; quant.hpp: requantize
bit for bit with accel.quant.
"""

from __future__ import annotations

import numpy as np
import pytest

from accel.abi import dtype_code
from accel.backend import ABI_VERSION, runtime_abi_version
from accel.builder import GraphBuilder
from accel.errors import QuantizationError
from accel.ir import QuantParams, TensorType
from accel.quant import quantize_multiplier, requantize

_runtime = pytest.importorskip("accel_testbackend._runtime", reason="accel-testbackend is not installed")
from accel_sdk.blob import BlobWriter  # noqa: E402
from accel_testbackend import TestBackend  # noqa: E402
from accel_testbackend.serializer import CONSTANT_ALIGN, MAGIC, OPCODES, VERSION  # noqa: E402

F32, I8, U8, I32 = (dtype_code(name) for name in ("float32", "int8", "uint8", "int32"))
RELU, REQUANTIZE = OPCODES["nn.relu"], OPCODES["qnn.requantize"]

Tensor = tuple[int, tuple[int, ...], "bytes | None"]
Op = tuple[int, list[int], list[int], tuple[int, ...], tuple[float, ...]]


def tensor(dtype: int, shape: tuple[int, ...], data: bytes | None = None) -> Tensor:
    return (dtype, shape, data)


def op(code: int, ins: list[int], outs: list[int], ints=(), floats=()) -> Op:
    return (code, ins, outs, tuple(ints), tuple(floats))


def header(w: BlobWriter, n_tensors: int, version: int = VERSION) -> BlobWriter:
    w.magic(MAGIC)
    w.u32(version)
    w.u32(n_tensors)
    return w


def blob(tensors: list[Tensor], inputs: list[int], outputs: list[int], ops: list[Op], version: int = VERSION) -> bytes:
    """A testbackend blob (README.md's format) written field by field, so tests can break any field."""
    w = header(BlobWriter(), len(tensors), version)
    for dtype, shape, data in tensors:
        w.u8(dtype)
        w.u8(len(shape))
        w.array("i64", shape)
        w.u8(int(data is not None))
        if data is not None:
            w.constant(data, align=CONSTANT_ALIGN)
    w.counted_array("u32", inputs)
    w.counted_array("u32", outputs)
    w.u32(len(ops))
    for code, ins, outs, ints, floats in ops:
        w.u8(code)
        for ids in (ins, outs):
            w.u8(len(ids))
            w.array("u32", ids)
        w.u8(len(ints))
        w.array("i64", ints)
        w.u8(len(floats))
        w.array("f32", floats)
    return w.getvalue()


RELU_BLOB = blob([tensor(F32, (2, 3)), tensor(F32, (2, 3))], [0], [1], [op(RELU, [0], [1])])


def test_a_minimal_blob_runs():
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    y = np.empty_like(x)
    _runtime.Runtime(RELU_BLOB).run([x], [y])
    assert y.tolist() == [[0, 2, 0], [4, 0, 6]]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "blob offset 0: magic: needs 4 bytes, 0 left"),
        (b"NOPE" + RELU_BLOB[4:], "blob offset 0: bad magic"),
        (blob([], [], [], [], version=VERSION + 1), f"blob offset 4: format version {VERSION + 1} is not supported"),
        (RELU_BLOB + b"\x00", "1 unexpected trailing bytes"),
        (header(BlobWriter(), 1000).getvalue(), "blob offset 8: tensor count=1000 does not fit in the 0 bytes left"),
        (header(BlobWriter(), 0xFFFFFFFF).getvalue(), "blob offset 8: tensor count=4294967295, at most 1048576"),
        (blob([tensor(F32, (2,))], [5], [], []), "graph input id 5 out of range"),
        (blob([tensor(F32, (1 << 32, 1 << 32, 1 << 32))], [], [], []), "overflows"),
        (blob([tensor(F32, (1 << 21, 1 << 21))], [], [], []), "more than 2^40 elements"),
        (blob([tensor(F32, (-1,))], [], [], []), "dimension=-1, must be in [0, 4294967296]"),
        (blob([tensor(F32, (2,), b"\x00" * 7)], [], [], []), "constant of float32[2] has 7 bytes"),
        (blob([tensor(F32, (2,)), tensor(F32, (2,))], [], [1], [op(RELU, [0], [1])]), "reads tensor 0 before it is written"),
        (blob([tensor(F32, (2,)), tensor(F32, (3,))], [0], [1], [op(RELU, [0], [1])]), "relu: needs float32 input and output of one shape"),
        (blob([tensor(F32, (2,)), tensor(F32, (2,))], [0], [1], []), "graph output 1 is never written"),
        (blob([tensor(F32, (2,)), tensor(F32, (2,))], [0], [1], [op(RELU, [0], [0])]), "writes tensor 0, which is already defined"),
        (blob([tensor(F32, (2,)), tensor(F32, (2,))], [0], [1], [op(9, [0], [1])]), "opcode=9, must be in [0, 8]"),
    ],
)  # fmt: skip
def test_malformed_blobs_are_value_errors_naming_the_problem(data, message):
    with pytest.raises(ValueError) as info:
        _runtime.Runtime(data)
    assert message in str(info.value)


def test_runtime_publishes_the_abi_table():
    assert _runtime.ABI_VERSION == ABI_VERSION
    assert runtime_abi_version(_runtime, "testbackend") == ABI_VERSION
    assert _runtime.Runtime(RELU_BLOB).backend == "testbackend"


def test_blob_may_be_any_contiguous_buffer():
    for data in (bytearray(RELU_BLOB), memoryview(RELU_BLOB), np.frombuffer(RELU_BLOB, np.uint8)):
        _runtime.Runtime(data)
    with pytest.raises(TypeError):
        _runtime.Runtime("ATBK")


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        ([np.zeros((2, 3))], [np.zeros((2, 3), np.float32)], "input 0 must be float32[2,3], got float64[2,3]"),
        ([np.zeros((2, 3), np.float32)], [np.zeros((3, 2), np.float32)], "output 0 must be float32[2,3], got float32[3,2]"),
        ([], [np.zeros((2, 3), np.float32)], "expected 1 inputs, got 0"),
        ([np.zeros((3, 2), np.float32).T], [np.zeros((2, 3), np.float32)], "input 0 must be C-contiguous"),
        ([np.zeros((2, 3), np.float32)], [np.zeros((2, 3), np.float32)[()].view()], None),
        ([[0.0] * 3] * 2, [np.zeros((2, 3), np.float32)], "input 0 is a list, not a numpy array"),
        ([np.zeros((2, 3), ">f4")], [np.zeros((2, 3), np.float32)], "input 0 has dtype >f4, not supported"),
        (np.zeros((2, 3), np.float32), [np.zeros((2, 3), np.float32)], "inputs must be a list or tuple of numpy arrays, got numpy.ndarray"),
    ],
)  # fmt: skip
def test_run_checks_its_arguments(inputs, outputs, message):
    rt = _runtime.Runtime(RELU_BLOB)
    if message is None:
        rt.run(inputs, outputs)  # a plain view is fine
        return
    with pytest.raises(RuntimeError) as info:
        rt.run(inputs, outputs)
    assert message in str(info.value)


def test_read_only_outputs_are_refused():
    out = np.zeros((2, 3), np.float32)
    out.setflags(write=False)
    with pytest.raises(RuntimeError, match="output 0 must be writeable"):
        _runtime.Runtime(RELU_BLOB).run([np.zeros((2, 3), np.float32)], [out])


# -- quant.hpp: requantize bit for bit ------------------------------------------------------

DTYPES = {"uint8": U8, "int8": I8, "int32": I32}


def requantize_blob(n: int, in_dtype: str, out_dtype: str, s_in: float, z_in: int, s_out: float, z_out: int) -> bytes:
    return blob(
        [tensor(DTYPES[in_dtype], (n,)), tensor(DTYPES[out_dtype], (n,))],
        [0],
        [1],
        [op(REQUANTIZE, [0], [1], ints=(z_in, z_out), floats=(s_in, s_out))],
    )


def random_case(rng: np.random.Generator):
    in_dtype = str(rng.choice(["uint8", "int8", "int32"]))
    out_dtype = str(rng.choice(["uint8", "int8"]))
    s_in = float(np.float32(2.0 ** rng.uniform(-20, 4)))
    s_out = float(np.float32(s_in / 2.0 ** rng.uniform(-36, 12)))
    lo, hi = (-(1 << 31), (1 << 31) - 1) if in_dtype == "int32" else (np.iinfo(in_dtype).min, np.iinfo(in_dtype).max)
    z_in = 0 if in_dtype == "int32" and rng.random() < 0.5 else int(rng.integers(max(lo, -1000), min(hi, 1000) + 1))
    o = np.iinfo(out_dtype)
    z_out = int(rng.integers(o.min, o.max + 1))
    if in_dtype == "int32":
        x = np.concatenate(
            [rng.integers(lo, hi, 2000, endpoint=True), rng.integers(-5000, 5000, 2000), [lo, hi, 0, -1, 1]]
        )
    else:
        x = np.arange(lo, hi + 1)
    return in_dtype, out_dtype, s_in, z_in, s_out, z_out, x.astype(in_dtype)


def test_requantize_matches_accel_quant_bit_for_bit():
    rng = np.random.default_rng(1234)
    checked = 0
    for _ in range(300):
        in_dtype, out_dtype, s_in, z_in, s_out, z_out, x = random_case(rng)
        data = requantize_blob(x.size, in_dtype, out_dtype, s_in, z_in, s_out, z_out)
        try:
            want = requantize(x, s_in, z_in, s_out, z_out, out_dtype)
        except QuantizationError:
            with pytest.raises(ValueError, match="too large"):
                _runtime.Runtime(data)
            continue
        got = np.empty(x.shape, out_dtype)
        _runtime.Runtime(data).run([x], [got])
        np.testing.assert_array_equal(
            got, want, err_msg=f"{in_dtype}->{out_dtype} s_in={s_in} z_in={z_in} s_out={s_out} z_out={z_out}"
        )
        checked += 1
    assert checked > 250


@pytest.mark.parametrize("ratio", [0.5, 2.0**-33, 2.0**-31, 1.0, 3.0, 65536.0, float(np.nextafter(np.float32(1), 2))])
def test_requantize_edge_multipliers(ratio):
    m, shift = quantize_multiplier(ratio)  # the encoding the runtime must reproduce
    assert 0 <= int(m) < 2**31 and -31 <= int(shift) <= 31
    x = np.array([-(1 << 31), -7, -5, -3, -1, 0, 1, 3, 5, 7, (1 << 31) - 1, 255, -255], np.int32)
    got = np.empty(x.shape, np.int8)
    _runtime.Runtime(requantize_blob(x.size, "int32", "int8", ratio, 0, 1.0, 3)).run([x], [got])
    np.testing.assert_array_equal(got, requantize(x, ratio, 0, 1.0, 3, "int8"))


def test_requantize_through_the_serializer():
    x_type = TensorType((5, 7), "int32", QuantParams(0.001, 0))
    b = GraphBuilder(x=x_type)
    g = b.done(b.op("qnn.requantize", b.x["x"], out_scale=0.05, out_zero_point=10, out_dtype="uint8"))
    x = np.random.default_rng(0).integers(-20000, 20000, (5, 7)).astype(np.int32)
    got = np.empty((5, 7), np.uint8)
    _runtime.Runtime(TestBackend().serialize(g)).run([x], [got])
    np.testing.assert_array_equal(got, requantize(x, 0.001, 0, 0.05, 10, "uint8"))


@pytest.mark.parametrize(("s_in", "s_out"), [(1.0, 0.0), (float("nan"), 1.0), (-1.0, 1.0), (1e30, 1e-30)])
def test_requantize_refuses_invalid_scales(s_in, s_out):
    with pytest.raises(ValueError, match="requantize"):
        _runtime.Runtime(requantize_blob(4, "int32", "int8", s_in, 0, s_out, 0))
