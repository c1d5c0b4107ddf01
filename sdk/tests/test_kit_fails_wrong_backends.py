"""The conformance kit fails wrong backends, and passes the right one on the same checks.

Each wrong backend below is the testbackend (its patterns, checks and
serializer) with one thing broken in its runtime, registered in-process by
handing its class to a kit subclass (no entry point). For each, the check
meant to catch that fault fails, and the same check passes the real
testbackend, so the check is what tells them apart. The wrong runtimes are
Python modules wrapping the real compiled one (they would all fail
``test_runtime_is_a_compiled_extension``; the other checks must catch them
regardless).
"""

from __future__ import annotations

import io
import json
import types
import zipfile
from typing import Any, ClassVar

import numpy as np
import pytest

from accel.builder import GraphBuilder
from accel.executor import ReferenceExecutor
from accel.ir import Graph, QuantParams, TensorType
from accel.serialize import graph_from_json, graph_to_json

real = pytest.importorskip("accel_testbackend._runtime", reason="accel-testbackend is not installed")
from accel_sdk.testing import (  # noqa: E402
    SENTINELS,
    BackendConformance,
    BadCaseError,
    Case,
    Refusal,
    edge_values,
    float_mismatch,
    shortfall,
)
from accel_testbackend import TestBackend  # noqa: E402

RNG = np.random.default_rng(11)


def weights(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


# -- the cases every kit below runs ----------------------------------------------------------


def conv_relu_pool() -> Case:
    b = GraphBuilder(x=(1, 3, 9, 9))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(4, 3, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(weights(4))))
    return Case("conv_relu_pool", b.done(b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2))))


def two_regions() -> Case:
    """add → relu, a host sigmoid, then maximum → clip: two different blobs loaded side by side."""
    b = GraphBuilder(x=(16, 24), y=(16, 24))
    s = b.op("sigmoid", b.op("nn.relu", b.op("add", b.x["x"], b.x["y"])))
    return Case("two_regions", b.done(b.op("clip", b.op("maximum", s, b.x["y"]), a_min=-0.5, a_max=0.75)))


def requantize() -> Case:
    b = GraphBuilder(acc=TensorType((4, 64), "int32", QuantParams(0.0007, 0)))
    return Case(
        "requantize", b.done(b.op("qnn.requantize", b.x["acc"], out_scale=0.02, out_zero_point=3, out_dtype="int8"))
    )


def exact_elementwise() -> Case:
    """Ops whose float results do not depend on evaluation order: the kit can ask for bitwise equality."""
    b = GraphBuilder(x=(64, 64), y=(64, 64))
    y = b.op(
        "nn.max_pool2d", b.op("reshape", b.op("maximum", b.x["x"], b.x["y"]), newshape=(1, 1, 64, 64)), pool_size=(2, 2)
    )
    return Case("exact_elementwise", b.done(b.op("clip", y, a_min=-1.0, a_max=1.0)))


class Kit(BackendConformance):
    """The kit on the real testbackend; subclasses swap in a wrong backend."""

    __test__ = False
    backend: ClassVar[type[TestBackend]] = TestBackend
    rtol = 1e-5
    atol = 1e-5
    truncation_cap = 256

    def cases(self):
        return [conv_relu_pool(), two_regions(), requantize()]

    def refusals(self):
        b = GraphBuilder(x=(2, 3), y=(1, 3))
        reason = "add of shapes [2, 3] and [1, 3]: broadcasting is not supported, shapes must be equal"
        return [Refusal("broadcasting add", b.done(b.op("add", b.x["x"], b.x["y"])), reason)]


class ExactKit(Kit):
    __test__ = False
    exact = True

    def cases(self):
        return [exact_elementwise()]


def kit(backend: type[TestBackend], base: type[Kit] = Kit, **attrs: Any) -> Kit:
    """A kit instance checking ``backend`` (a class of its own, so its regions are built for it)."""
    return type(f"{base.__name__}_{backend.__name__}", (base,), {"backend": backend, **attrs})()


# -- wrong runtimes --------------------------------------------------------------------------


def runtime_module(name: str, runtime: type) -> types.ModuleType:
    """A Python module shaped like a compiled runtime: the real one's ABI capsule and a Runtime class."""
    module = types.ModuleType(f"wrong_runtime_{name}")
    module.__accel_abi__ = real.__accel_abi__
    module.ABI_VERSION = real.ABI_VERSION
    module.Runtime = runtime
    return module


class Wrapped:
    """The real runtime; subclasses break one thing."""

    def __init__(self, blob: bytes, threads: int = 0):
        self.inner = real.Runtime(blob, threads)
        self.threads = self.inner.threads

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        self.inner.run(inputs, outputs)


def backend_with(runtime: type, serializer: Any = None) -> type[TestBackend]:
    """The testbackend with ``runtime`` (and optionally another serializer)."""
    module = runtime_module(runtime.__name__, runtime)
    attrs: dict[str, Any] = {"runtime_module": lambda self: module}
    if serializer is not None:
        attrs["serialize"] = lambda self, graph: serializer(graph)
    return type(f"TestBackendWith{runtime.__name__}", (TestBackend,), attrs)


class WritesZeros(Wrapped):
    def run(self, inputs, outputs):
        for out in outputs:
            out[...] = 0


class LeavesLastElement(Wrapped):
    """Computes right but never writes the last element of each output."""

    def run(self, inputs, outputs):
        scratch = [np.empty_like(o) for o in outputs]
        self.inner.run(inputs, scratch)
        for out, s in zip(outputs, scratch):
            out.reshape(-1)[:-1] = s.reshape(-1)[:-1]


class WritesNothing(Wrapped):
    def run(self, inputs, outputs):
        pass


class IgnoresNan(Wrapped):
    """Treats NaN inputs as zeros (as `x > 0 ? x : 0` or a NaN-unaware max does)."""

    def run(self, inputs, outputs):
        self.inner.run([np.nan_to_num(a, nan=0.0) if a.dtype.kind == "f" else a for a in inputs], outputs)


class Int32ThroughFloat(Wrapped):
    """Carries int32 inputs through float32: exact up to 2^24, wrong (and overflowing) at the extremes."""

    def run(self, inputs, outputs):
        with np.errstate(invalid="ignore"):
            rounded = [a.astype(np.float32).astype(np.int32) if a.dtype == np.int32 else a for a in inputs]
        self.inner.run(rounded, outputs)


class LosesNegativeZero(Wrapped):
    def run(self, inputs, outputs):
        self.inner.run(inputs, outputs)
        for out in outputs:
            out[out == 0] = 0


class ReplaysFirstRun(Wrapped):
    """Runs once, then hands back the first results whatever the inputs."""

    def run(self, inputs, outputs):
        if not hasattr(self, "first"):
            self.first = [np.empty_like(o) for o in outputs]
            self.inner.run(inputs, self.first)
        for out, f in zip(outputs, self.first):
            out[...] = f


class ScribblesOnInputs(Wrapped):
    def run(self, inputs, outputs):
        self.inner.run(inputs, outputs)
        for a in inputs:
            a[...] = 0


_LAST: list[Any] = []


class LastLoadedWins(Wrapped):
    """Keeps the loaded blob in module state: every handle runs the blob loaded last."""

    def __init__(self, blob, threads=0):
        super().__init__(blob, threads)
        _LAST[:] = [self.inner]

    def run(self, inputs, outputs):
        _LAST[0].run(inputs, outputs)


class VagueTruncation(Wrapped):
    """Refuses a short blob, without saying how short."""

    def __init__(self, blob, threads=0):
        try:
            super().__init__(blob, threads)
        except ValueError:
            raise ValueError("invalid blob") from None


class ReadsOnePastTheEnd(Wrapped):
    """The bounds check ``n > remaining() + 1``: a read one byte short goes through.

    It reads the byte after the blob (a zero here), and the cursor ends past
    the end, so ``remaining()`` wraps around: a blob that parses to the end is
    then refused only by the trailing-bytes check, with a ValueError (which
    is all the kit used to ask for).
    """

    def __init__(self, blob, threads=0):
        try:
            super().__init__(blob, threads)
        except ValueError as exc:
            stated = shortfall(str(exc))
            if stated is None or stated[0] != stated[1] + 1:
                raise
            super().__init__(blob + b"\x00", threads)
            raise ValueError(f"blob offset {len(blob) + 1}: {(1 << 64) - 1} unexpected trailing bytes") from None


_STAMP = (1980, 1, 1, 0, 0, 0)


def serialize_graph(graph: Graph) -> bytes:
    """The partition as accel's own graph JSON and .npy constants, zipped."""
    doc, arrays = graph_to_json(graph)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(zipfile.ZipInfo("graph.json", _STAMP), json.dumps(doc, sort_keys=True))
        for key, arr in sorted(arrays.items()):
            data = io.BytesIO()
            np.save(data, np.asarray(arr, order="C"), allow_pickle=False)
            zf.writestr(zipfile.ZipInfo(f"{key}.npy", _STAMP), data.getvalue())
    return buf.getvalue()


class RunsTheReference:
    """Runs accel's own reference executor on the graph in the blob: right results, no compiled code."""

    def __init__(self, blob: bytes, threads: int = 0):
        self.threads = 1
        try:
            with zipfile.ZipFile(io.BytesIO(blob)) as zf:
                doc = json.loads(zf.read("graph.json"))
                arrays = {
                    n[:-4]: np.load(io.BytesIO(zf.read(n)), allow_pickle=False)
                    for n in zf.namelist()
                    if n.endswith(".npy")
                }
            self.executor = ReferenceExecutor(graph_from_json(doc, arrays))
        except Exception as exc:
            raise ValueError(f"bad blob: {exc}") from None

    def run(self, inputs, outputs):
        try:
            with np.errstate(all="ignore"):
                results = self.executor.run_positional([np.asarray(a) for a in inputs])
        except Exception as exc:
            raise RuntimeError(str(exc)) from None
        if len(outputs) != len(results):
            raise RuntimeError("wrong number of outputs")
        for out, res in zip(outputs, results):
            if not isinstance(out, np.ndarray) or out.shape != res.shape or not out.flags.writeable:
                raise RuntimeError("bad output buffer")
            out[...] = res


# -- the kit fails each of them ------------------------------------------------------------------

WRONG = {
    # runtime: (kit base, the check that must fail it, what its message says)
    WritesZeros: (Kit, "test_runtime_matches_reference", "Not equal to tolerance|not bitwise equal"),
    LeavesLastElement: (Kit, "test_runtime_matches_reference", "filled with 0x"),
    WritesNothing: (Kit, "test_runtime_matches_reference", "filled with 0x"),
    IgnoresNan: (Kit, "test_runtime_matches_reference", "NaN at other places"),
    Int32ThroughFloat: (Kit, "test_runtime_matches_reference", "integer extremes"),
    LosesNegativeZero: (ExactKit, "test_runtime_matches_reference", "not bitwise equal"),
    ReplaysFirstRun: (
        Kit,
        "test_runtime_matches_reference",
        "NaN at other places|Not equal to tolerance|not bitwise equal",
    ),
    ScribblesOnInputs: (Kit, "test_runtime_matches_reference", "wrote into input"),
    LastLoadedWins: (Kit, "test_compiled_model_matches_reference", "compiled for testbackend"),
    VagueTruncation: (Kit, "test_truncated_blobs_are_refused", "does not state the bytes needed"),
    ReadsOnePastTheEnd: (Kit, "test_truncated_blobs_are_refused", "does not state the bytes needed"),
}


@pytest.mark.parametrize("runtime", list(WRONG), ids=lambda r: r.__name__)
def test_the_kit_fails_a_wrong_runtime(runtime):
    base, check, message = WRONG[runtime]
    with pytest.raises(AssertionError, match=message):
        getattr(kit(backend_with(runtime), base), check)()


@pytest.mark.parametrize("runtime", list(WRONG), ids=lambda r: r.__name__)
def test_the_kit_fails_a_runtime_written_in_python(runtime):
    with pytest.raises(AssertionError, match="is not a compiled extension module"):
        kit(backend_with(runtime)).test_runtime_is_a_compiled_extension()


CHECKS = sorted({(base, check) for base, check, _ in WRONG.values()}, key=lambda bc: (bc[0].__name__, bc[1]))
CHECKS += [(Kit, "test_runtime_is_a_compiled_extension"), (Kit, "test_refusals_give_their_reason")]


@pytest.mark.parametrize(("base", "check"), CHECKS, ids=lambda x: x if isinstance(x, str) else x.__name__)
def test_the_right_backend_passes_the_same_checks(base, check):
    getattr(kit(TestBackend, base), check)()


def test_a_runtime_that_runs_the_reference_fails_only_where_it_is_not_native():
    """Right results every time: only the compiled-extension and truncation checks can tell."""
    wrong = kit(backend_with(RunsTheReference, serialize_graph))
    wrong.test_runtime_matches_reference()
    wrong.test_compiled_model_matches_reference()
    with pytest.raises(AssertionError, match="is not a compiled extension module"):
        wrong.test_runtime_is_a_compiled_extension()
    with pytest.raises(AssertionError, match="does not state the bytes needed"):
        wrong.test_truncated_blobs_are_refused()


class NoEdgeValuesKit(Kit):
    __test__ = False

    def cases(self):
        cases = super().cases()
        for case in cases:
            case.edge_values = False
        return cases


def test_some_wrong_runtimes_pass_everything_but_their_targeted_check():
    # each handle alone is right: only the compiled model, with both blobs loaded, shows it
    kit(backend_with(LastLoadedWins)).test_runtime_matches_reference()
    # without edge values in the inputs, the NaN-blind runtime and the one rounding int32 through float32 pass
    for runtime in (IgnoresNan, Int32ThroughFloat):
        kit(backend_with(runtime), NoEdgeValuesKit).test_runtime_matches_reference()


# -- bad cases, refusals ------------------------------------------------------------------------


class ConstantCaseKit(Kit):
    __test__ = False

    def cases(self):
        b = GraphBuilder(x=(4, 5))
        negative = {"x": -np.abs(np.random.default_rng(0).standard_normal((4, 5))).astype(np.float32) - 0.1}
        return [Case("relu_of_negatives", b.done(b.op("nn.relu", b.x["x"])), negative)]


class ClippedToOneValueKit(Kit):
    __test__ = False

    def cases(self):
        b = GraphBuilder(x=(4, 5))
        return [Case("clip_to_a_point", b.done(b.op("clip", b.x["x"], a_min=0.25, a_max=0.25)))]


@pytest.mark.parametrize("base", [ConstantCaseKit, ClippedToOneValueKit], ids=lambda k: k.__name__)
@pytest.mark.parametrize("check", ["test_runtime_matches_reference", "test_compiled_model_matches_reference"])
def test_a_case_whose_reference_is_one_value_is_a_bad_case(base, check):
    with pytest.raises(BadCaseError, match="bad case"):
        getattr(kit(TestBackend, base), check)()


class WrongReasonKit(Kit):
    __test__ = False

    def refusals(self):
        b = GraphBuilder(x=(2, 3), y=(1, 3))
        return [Refusal("broadcasting add", b.done(b.op("add", b.x["x"], b.x["y"])), "add is not supported")]


class TakenKit(Kit):
    __test__ = False

    def refusals(self):
        b = GraphBuilder(x=(2, 3), y=(2, 3))
        return [Refusal("plain add", b.done(b.op("add", b.x["x"], b.x["y"])), "anything")]


def test_a_refusal_with_another_reason_fails():
    with pytest.raises(AssertionError, match="is refused with 'add of shapes"):
        kit(TestBackend, WrongReasonKit).test_refusals_give_their_reason()


def test_a_refusal_the_backend_takes_fails():
    with pytest.raises(AssertionError, match="testbackend took node"):
        kit(TestBackend, TakenKit).test_refusals_give_their_reason()


# -- helpers of the kit ----------------------------------------------------------------------------


def test_outputs_are_filled_with_two_different_sentinels():
    (region, *_) = kit(TestBackend).regions()
    a, b = (region.filled_outputs(byte)[0] for byte in SENTINELS)
    assert SENTINELS[0] != SENTINELS[1]
    assert set(a.view(np.uint8).reshape(-1).tolist()) == {SENTINELS[0]}
    assert set(b.view(np.uint8).reshape(-1).tolist()) == {SENTINELS[1]}


def test_edge_values_hold_every_edge_of_the_dtype():
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    e = edge_values(x, seed=3)
    assert np.isnan(e).any() and np.isposinf(e).any() and np.isneginf(e).any()
    assert ((e == 0) & np.signbit(e)).any()  # -0.0
    tiny = np.finfo(np.float32).tiny
    assert ((e != 0) & (np.abs(e) < tiny)).any()  # denormals
    assert 40 <= int((e != x).sum() + ((e == x) & (x == 0)).sum()) <= 100  # about one element in 16
    assert np.array_equal(x, np.random.default_rng(0).standard_normal(1000).astype(np.float32))  # input kept
    i = edge_values(np.zeros(100, np.int32), seed=1)
    assert {np.iinfo(np.int32).min, np.iinfo(np.int32).max, -1, 1} <= set(i.tolist())
    u = edge_values(np.full(100, 7, np.uint8), seed=1)
    assert {0, 255} <= set(u.tolist())
    assert np.array_equal(edge_values(np.ones(3, bool)), np.ones(3, bool))


@pytest.mark.parametrize(
    ("message", "stated"),
    [
        ("blob offset 12: tensor count (u32): needs 4 bytes, 2 left", (4, 2)),
        ("blob offset 3: op: needs 1 byte, 0 left", (1, 0)),
        ("blob offset 40: ints: needs 3 x 8 bytes, 20 left", (24, 20)),
        ("blob offset 9: dims: 3 elements of 8 bytes do not fit in the 20 bytes left", (24, 20)),
        ("blob offset 8: tensor count=6 does not fit in the 0 bytes left (needs 6 x 11)", (66, 0)),
        ("blob offset 8: weights: size 100 does not fit (40 bytes left, at most 4096)", (100, 40)),
        ("blob offset 8: tensor count=6 does not fit in the 0 bytes left", None),  # how many were needed?
        ("invalid blob", None),
        ("blob offset 30: 1 unexpected trailing bytes", None),
    ],
)
def test_shortfall_reads_what_the_blob_reader_says(message, stated):
    assert shortfall(message) == stated


def test_a_shortfall_past_the_blob_means_the_reader_lost_track():
    from accel_sdk.testing import _truncation_problem

    assert _truncation_problem("needs 4 bytes, 2 left", 10) is None
    assert "lost track" in (_truncation_problem("needs 4 bytes, 18446744073709551615 left", 10) or "")
    assert "no shortfall" in (_truncation_problem("needs 4 bytes, 4 left", 10) or "")


def test_float_mismatch_holds_nan_and_infinities_to_their_places():
    want = np.array([1.0, np.nan, np.inf, -np.inf, -0.0, 250.0], np.float32)
    assert float_mismatch(want.copy(), want) is None
    assert float_mismatch(want + np.float32(1e-4), want) is None  # 4e-7 of the largest magnitude
    assert float_mismatch(np.where(np.isnan(want), 0.0, want), want) == "NaN at 0 places, expected 1"
    assert float_mismatch(np.where(np.isneginf(want), np.inf, want), want) == "+Inf at 2 places, expected 1"
    assert float_mismatch(want * np.float32(1.01), want).startswith("relative error 1.00e-02")
    assert float_mismatch(want[:3], want) == "shape (3,), expected (6,)"
