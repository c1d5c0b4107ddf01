"""The conformance kit: the tests every accel backend should pass, as a pytest base class.

A backend subclasses :class:`BackendConformance` in its own test file::

    from accel_sdk.testing import BackendConformance, Case, Refusal

    class TestConformance(BackendConformance):
        backend = MyBackend                  # the Backend subclass
        exact = True                         # float outputs bitwise equal to the reference (else rtol/atol)

        def cases(self):
            return [Case("maxpool", graph, inputs), ...]   # small accel IR graphs (NCHW) and their inputs

        def refusals(self):
            return [Refusal("grouped conv", graph, "mynpu.conv2d: groups=2, groups must = 1")]

The kit partitions every case for the backend alone
(:func:`accel.partition.partition_graph`), serializes every region the
backend took, loads the blob in the backend's compiled runtime and checks:

- the backend is discovered through its entry point with state ok, and its
  runtime speaks this accel-core's ABI version;
- the runtime is a compiled extension module whose ``Runtime`` class is
  defined in it (not a Python module, nor a Python class calling accel's
  reference executor);
- every pattern-table entry and every op check claims a node in some case;
- the serializer is deterministic and its blobs load;
- every region's outputs match accel's reference executor on the region's
  body, on one loaded handle run with the case's inputs, then with
  edge values mixed in (NaN, ±Inf, −0.0, denormals, integer extremes), then
  with the case's inputs again. Outputs are filled with two different byte
  patterns before two runs each (an output the runtime leaves untouched
  fails), inputs must be left unchanged. Integers compare bitwise; floats
  have the same NaN positions and are bitwise equal elsewhere with ``exact``,
  else within ``rtol``/``atol`` (overridable per case);
- a case whose reference output is trivial (one value everywhere, or a
  single zero) is refused as a bad case (:class:`BadCaseError`): a runtime
  writing that constant would pass it;
- every case compiled end to end (:func:`accel.compile` for the backend
  alone, through an artifact's bytes) and run matches the reference
  executor on the original graph;
- the thread count given when a blob is loaded is the count its handle computes with;
- every :class:`Refusal` is reported with its exact reason, as
  ``accel inspect --format json`` shows it;
- every truncation of every blob (up to ``truncation_cap`` lengths, then a
  seeded sample) is refused with a ValueError that states the bytes needed
  and the bytes left (``needs 8 bytes, 3 left``); the blob with a byte
  appended is refused with ValueError; seeded single-byte corruptions
  either load or raise ValueError, and a corrupted blob that loads runs or
  raises RuntimeError (a corrupted float payload may legitimately load):
  nothing crashes;
- ``run`` refuses wrong arguments with RuntimeError;
- one loaded blob run from several threads at once gives identical results.

The test methods are plain methods: a test may also instantiate a subclass
(with ``__test__ = False``) and call one of them, e.g. to show that the kit
fails a deliberately wrong backend.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import inspect
import re
import sys
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from accel.backend import ABI_VERSION, Backend, BackendOptions
from accel.executor import ReferenceExecutor
from accel.ir import CALL_OP, Graph, Node

__all__ = [
    "SENTINELS",
    "BackendConformance",
    "BadCaseError",
    "Case",
    "Refusal",
    "Region",
    "concurrent_mismatches",
    "edge_values",
    "float_mismatch",
    "random_inputs",
    "shortfall",
]

#: Bytes output buffers are filled with before a run (each region runs once with each).
SENTINELS = (0xA5, 0x5A)


class BadCaseError(AssertionError):
    """A conformance case that cannot tell a right backend from a wrong one."""


@dataclass
class Case:
    """One small graph (in the model's NCHW layout) and its inputs (None: seeded random data).

    ``exact``, ``rtol`` and ``atol`` override the class's tolerance for this
    case's float outputs. ``edge_values`` off skips the run with NaN, ±Inf,
    −0.0, denormals and integer extremes in the inputs (for inputs that are
    indices or sizes, where such values are not valid).
    """

    name: str
    graph: Graph
    inputs: Mapping[str, np.ndarray] | None = None
    exact: bool | None = None
    rtol: float | None = None
    atol: float | None = None
    edge_values: bool = True


@dataclass
class Refusal:
    """A graph the backend must not take one node of, and the exact reason it must give.

    ``node`` names that node; None means the producer of the graph's first
    output. ``reason`` is compared with the partition report's reason for
    this backend, as ``accel inspect --format json`` shows it.
    """

    name: str
    graph: Graph
    reason: str
    node: str | None = None


@dataclass
class Region:
    """One region a case offloaded to the backend: its call node, blob and input values."""

    case: Case
    node: Node
    blob: bytes
    inputs: list[np.ndarray] = field(repr=False)

    @property
    def body(self) -> Graph:
        assert self.node.body is not None
        return self.node.body

    @property
    def label(self) -> str:
        return f"case {self.case.name!r}, region {self.node.name!r}"

    def filled_outputs(self, byte: int = SENTINELS[0]) -> list[np.ndarray]:
        """Output buffers with every byte set to ``byte`` (so an element nobody writes shows)."""
        outs = []
        for v in self.body.outputs:
            buf = np.empty(v.type.shape, v.type.dtype)
            buf.view(np.uint8)[...] = byte
            outs.append(buf)
        return outs


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded data for every graph input: floats standard normal, integers over their dtype's range."""
    rng = np.random.default_rng(seed)
    out = {}
    for v in graph.inputs:
        dt = v.type.np_dtype
        if dt.kind == "f":
            out[v.name] = rng.standard_normal(v.type.shape).astype(dt)
        elif dt.kind == "b":
            out[v.name] = rng.integers(0, 2, v.type.shape).astype(bool)
        else:
            info = np.iinfo(dt)
            lo, hi = max(int(info.min), -(1 << 20)), min(int(info.max), 1 << 20)
            out[v.name] = rng.integers(lo, hi, v.type.shape, endpoint=True).astype(dt)
    return out


def _edges(dt: np.dtype) -> list[Any]:
    if dt.kind == "f":
        info = np.finfo(dt)
        sub = info.smallest_subnormal
        return [np.nan, np.inf, -np.inf, -0.0, sub, -sub, info.tiny / 2, 0.0]
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return [info.min, info.max, info.min + 1, info.max - 1, 0, 1, -1 if info.min < 0 else info.max // 2]
    return []


def edge_values(array: np.ndarray, seed: int = 0) -> np.ndarray:
    """A copy of ``array`` with about one element in 16 replaced by edge values, at seeded places.

    Floats get NaN, ±Inf, −0.0, +0.0 and denormals; integers their dtype's
    extremes (and their neighbours), 0 and ±1; every edge value appears when
    the array has room for all of them. Booleans are returned unchanged.
    """
    out = np.array(array, copy=True)
    edges = _edges(out.dtype)
    flat = out.reshape(-1)
    if not edges or flat.size == 0:
        return out
    rng = np.random.default_rng(seed)
    count = min(flat.size, max(len(edges), flat.size // 16))
    places = rng.choice(flat.size, count, replace=False)
    start = int(rng.integers(len(edges)))
    for k, at in enumerate(places):
        flat[at] = edges[(start + k) % len(edges)]
    return out


def float_mismatch(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5) -> str | None:
    """None when ``got`` has NaN, +Inf and −Inf exactly where ``want`` has them and its other values are
    within ``rtol`` of ``want``'s largest finite magnitude (at least 1); else what differs."""
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got64.shape != want64.shape:
        return f"shape {got64.shape}, expected {want64.shape}"
    for name, where in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)):
        if not np.array_equal(where(got64), where(want64)):
            return f"{name} at {int(np.sum(where(got64)))} places, expected {int(np.sum(where(want64)))}"
    finite = np.isfinite(want64)
    scale = max(1.0, float(np.abs(want64[finite]).max(initial=0.0)))
    err = float(np.abs(got64[finite] - want64[finite]).max(initial=0.0)) / scale
    return None if err <= rtol else f"relative error {err:.2e} > {rtol:.0e}"


_SHORTFALL: tuple[tuple[re.Pattern[str], Callable[[Sequence[str]], tuple[int, int]]], ...] = (
    # "<what>: needs 8 bytes, 3 left"
    (re.compile(r"needs (\d+) bytes?, (\d+)(?: bytes?)? left"), lambda g: (int(g[0]), int(g[1]))),
    # "<what>: needs 12 x 4 bytes, 40 left" (an array)
    (
        re.compile(r"needs (\d+) x (\d+) bytes?, (\d+)(?: bytes?)? left"),
        lambda g: (int(g[0]) * int(g[1]), int(g[2])),
    ),
    # "<what>: 12 elements of 4 bytes do not fit in the 40 bytes left"
    (
        re.compile(r"(\d+) elements? of (\d+) bytes? do(?:es)? not fit in the (\d+) bytes? left"),
        lambda g: (int(g[0]) * int(g[1]), int(g[2])),
    ),
    # "<what>=12 does not fit in the 40 bytes left (needs 12 x 4)"
    (
        re.compile(r"does not fit in the (\d+) bytes? left \(needs (\d+) x (\d+)\)"),
        lambda g: (int(g[1]) * int(g[2]), int(g[0])),
    ),
    # "<what>: size 100 does not fit (40 bytes left, ...)"
    (re.compile(r"size (\d+) does not fit \((\d+) bytes? left"), lambda g: (int(g[0]), int(g[1]))),
)


def shortfall(message: str) -> tuple[int, int] | None:
    """(bytes needed, bytes left) stated by a blob reader's error message, or None when it states no shortfall.

    Understands accel-sdk's ``BlobReader`` messages: ``needs N bytes, M left``,
    ``needs A x B bytes, M left``,
    ``A elements of B bytes do not fit in the M bytes left``,
    ``... does not fit in the M bytes left (needs A x B)`` and
    ``size N does not fit (M bytes left, ...)``.
    """
    for pattern, read in _SHORTFALL:
        found = pattern.search(message)
        if found is not None:
            return read(found.groups())
    return None


_REGIONS: dict[type, list[Region]] = {}


class BackendConformance:
    """Base class of a backend's conformance tests (pytest collects the subclass, not this class)."""

    #: The Backend subclass under test.
    backend: ClassVar[type[Backend]]
    #: Target options to instantiate it with.
    options: ClassVar[Mapping[str, Any] | BackendOptions | None] = None
    #: Float outputs must equal the reference bit for bit (else within rtol/atol).
    exact: ClassVar[bool] = False
    rtol: ClassVar[float] = 1e-5
    atol: ClassVar[float] = 1e-6
    #: Every truncation shorter than this is tried; a longer blob adds ``truncation_samples`` seeded lengths.
    truncation_cap: ClassVar[int] = 2048
    truncation_samples: ClassVar[int] = 256
    #: Seeded single-byte corruptions tried per blob.
    flips: ClassVar[int] = 300
    threads: ClassVar[int] = 4
    thread_iterations: ClassVar[int] = 8
    seed: ClassVar[int] = 0

    def cases(self) -> Sequence[Case]:
        """The graphs that exercise the backend: every pattern and op check must claim a node in one."""
        raise NotImplementedError("a conformance test class defines cases()")

    def refusals(self) -> Sequence[Refusal]:
        """Graphs with a node the backend must refuse, each with the exact reason (none by default)."""
        return ()

    # -- helpers --------------------------------------------------------------------------
    def make_backend(self) -> Backend:
        return self.backend(self.options)

    def runtime(self) -> Any:
        return self.make_backend().runtime_module()

    def regions(self) -> list[Region]:
        """Every region of every case, partitioned and serialized once per test class."""
        cls = type(self)
        found = _REGIONS.get(cls)
        if found is None:
            found = _REGIONS[cls] = self._build_regions()
        return found

    def case_inputs(self, index: int, case: Case) -> dict[str, np.ndarray]:
        """The inputs of ``case`` (the ``index``-th): its own, or seeded random data."""
        if case.inputs is not None:
            return {k: np.asarray(v) for k, v in case.inputs.items()}
        return random_inputs(case.graph, self.seed + index)

    def _build_regions(self) -> list[Region]:
        from accel.partition import partition_graph

        backend = self.make_backend()
        regions = []
        for index, case in enumerate(self.cases()):
            result = partition_graph(case.graph, [backend])
            host = result.graph
            inputs = self.case_inputs(index, case)
            arrays = [np.asarray(inputs[v.name]) for v in host.inputs]
            for node in host.nodes:
                if node.op != CALL_OP or node.attrs.get("compiler") != backend.name:
                    continue
                feeds = Graph(host.inputs, list(node.inputs), host.nodes, name="feeds")
                values = _reference(feeds, arrays)
                assert node.body is not None
                blob = backend.serialize(node.body)
                assert isinstance(blob, bytes), f"{backend.name}.serialize returned {type(blob).__name__}, not bytes"
                values = [np.ascontiguousarray(v) for v in values]
                regions.append(Region(case, node, blob, values))
        return regions

    def _tolerance(self, case: Case) -> tuple[bool, float, float]:
        exact = self.exact if case.exact is None else case.exact
        rtol = self.rtol if case.rtol is None else case.rtol
        atol = self.atol if case.atol is None else case.atol
        return exact, rtol, atol

    def _unique_blobs(self) -> list[tuple[Region, bytes]]:
        seen: dict[bytes, Region] = {}
        for r in self.regions():
            seen.setdefault(r.blob, r)
        return [(r, blob) for blob, r in seen.items()]

    def _check_run(self, handle: Any, r: Region, inputs: list[np.ndarray], what: str) -> None:
        """Run ``handle`` on ``inputs`` once per sentinel and compare with the reference on the body."""
        expected = _reference(r.body, inputs)
        exact, rtol, atol = self._tolerance(r.case)
        for byte in SENTINELS:
            given = [a.copy() for a in inputs]  # the runtime gets copies: what it does to them stays here
            outputs = r.filled_outputs(byte)
            handle.run(given, outputs)
            for i, (a, b) in enumerate(zip(given, inputs)):
                if a.tobytes() != b.tobytes():
                    raise AssertionError(f"{r.label}, {what}: run wrote into input {i}")
            for v, got, want in zip(r.body.outputs, outputs, expected):
                where = f"{r.label}, {what}, output %{v.name} (buffer filled with 0x{byte:02X} before the run)"
                _compare(got, np.asarray(want), exact, rtol, atol, where)

    # -- plugin contract ------------------------------------------------------------------
    def test_discoverable_through_its_entry_point(self):
        from accel.plugins import discover

        statuses = {s.name: s for s in discover()}
        status = statuses.get(self.backend.name)
        assert status is not None, (
            f"no plugin provides backend {self.backend.name!r}: is the distribution installed, with an entry "
            f"point in the group 'accel.backends'? (found: {', '.join(sorted(statuses)) or 'none'})"
        )
        assert status.state == "ok", f"{status.describe()}: {status.state}: {status.error}"
        assert status.backend is self.backend, f"the entry point registers {status.backend!r}, not {self.backend!r}"

    def test_runtime_abi_version(self):
        backend = self.make_backend()
        assert backend.abi_version() == ABI_VERSION
        assert self.runtime().ABI_VERSION == ABI_VERSION

    def test_runtime_is_a_compiled_extension(self):
        module = self.runtime()
        problem = _not_compiled(module)
        assert problem is None, f"the runtime of backend {self.backend.name!r}: {problem}"

    def test_every_case_offloads(self):
        with_regions = {r.case.name for r in self.regions()}
        missing = [c.name for c in self.cases() if c.name not in with_regions]
        assert not missing, f"these cases offload nothing to {self.backend.name}: {missing}"

    def test_every_pattern_and_op_check_is_exercised(self):
        backend = self.make_backend()
        prefix = backend.name + "."
        patterns, ops = set(), set()
        for r in self.regions():
            for node in r.body.nodes:
                composite = node.attrs.get("composite") if node.op == CALL_OP else None
                if composite is not None and composite.startswith(prefix):
                    patterns.add(composite[len(prefix) :])
                else:
                    ops.add(node.op)
        missing_patterns = sorted({e.name for e in backend.pattern_table()} - patterns)
        missing_ops = sorted(set(backend.op_checks()) - ops)
        assert not missing_patterns, f"no case makes these patterns claim a node: {missing_patterns}"
        assert not missing_ops, f"no case makes these op checks claim a node: {missing_ops}"

    def test_refusals_give_their_reason(self):
        from accel.partition import partition_graph
        from accel.render import report_to_json

        backend = self.make_backend()
        for ref in self.refusals():
            name = ref.node
            if name is None:
                producer = ref.graph.outputs[0].producer if ref.graph.outputs else None
                assert producer is not None, f"refusal {ref.name!r}: the graph's first output has no producer"
                name = producer.name
            doc = report_to_json(partition_graph(ref.graph, [backend], materialize=False).report)
            rows = [n for n in doc["nodes"] if n["name"] == name]
            assert rows, f"refusal {ref.name!r}: the graph has no node {name!r}"
            row = rows[0]
            assert row["backend"] != backend.name, (
                f"refusal {ref.name!r}: {backend.name} took node {name!r} ({row['op']}); it must refuse it "
                f"with {ref.reason!r}"
            )
            got = row["reasons"].get(backend.name)
            assert got == ref.reason, (
                f"refusal {ref.name!r}: node {name!r} ({row['op']}) is refused with {got!r}, expected {ref.reason!r}"
            )

    # -- serializer -----------------------------------------------------------------------
    def test_serializer_is_deterministic(self):
        backend = self.make_backend()
        module = self.runtime()
        for r in self.regions():
            assert backend.serialize(r.body) == r.blob, f"{r.label}: serializing twice gave different bytes"
            assert backend.serialize(r.body.copy()) == r.blob, f"{r.label}: a copy of the body serializes differently"
            module.Runtime(r.blob)

    # -- runtime --------------------------------------------------------------------------
    def test_runtime_matches_reference(self):
        module = self.runtime()
        for r in self.regions():
            for v, want in zip(r.body.outputs, _reference(r.body, r.inputs)):
                problem = _trivial(np.asarray(want))
                if problem is not None:
                    raise BadCaseError(
                        f"bad case {r.case.name!r}: the reference output %{v.name} of region {r.node.name!r} "
                        f"{problem}, so a runtime writing that would pass: give the case inputs or weights "
                        "that make varied outputs"
                    )
            handle = module.Runtime(r.blob)
            self._check_run(handle, r, r.inputs, "case inputs")
            if r.case.edge_values:
                edge = [edge_values(a, self.seed + i) for i, a in enumerate(r.inputs)]
                self._check_run(handle, r, edge, "inputs with NaN, ±Inf, -0.0, denormals, integer extremes")
            self._check_run(handle, r, r.inputs, "case inputs, run again on the same handle")

    def test_compiled_model_matches_reference(self):
        """accel.compile for this backend alone, through the artifact's bytes, run: the original graph's results."""
        from accel.artifact import artifact_from_bytes

        name = self.backend.name
        available = {name: self.backend}
        for index, case in enumerate(self.cases()):
            artifact = self._compile(case)
            assert artifact.partitions, f"case {case.name!r}: accel.compile offloaded nothing to {name}"
            loaded = artifact_from_bytes(artifact.to_bytes(), backends=available)
            executable = loaded.executable()
            inputs = self.case_inputs(index, case)
            runs = [("case inputs", inputs)]
            if case.edge_values:
                edge = {k: edge_values(v, self.seed + i) for i, (k, v) in enumerate(sorted(inputs.items()))}
                runs.append(("inputs with edge values", edge))
            runs.append(("case inputs again", inputs))
            exact, rtol, atol = self._tolerance(case)
            names = [v.name for v in case.graph.outputs]
            for what, feed in runs:
                expected = dict(zip(names, _reference(case.graph, [feed[v.name] for v in case.graph.inputs])))
                if what == "case inputs":
                    for out, want in expected.items():
                        problem = _trivial(np.asarray(want))
                        if problem is not None:
                            raise BadCaseError(f"bad case {case.name!r}: the reference output %{out} {problem}")
                got = executable.run(feed)
                for out, want in expected.items():
                    where = f"case {case.name!r} compiled for {name}, {what}, output %{out}"
                    _compare(np.asarray(got[out]), np.asarray(want), exact, rtol, atol, where)

    def test_truncated_blobs_are_refused(self):
        module = self.runtime()
        rng = np.random.default_rng(self.seed)
        for r, blob in self._unique_blobs():
            lengths = list(range(min(len(blob), self.truncation_cap)))
            if len(blob) > self.truncation_cap:
                lengths += rng.integers(self.truncation_cap, len(blob), self.truncation_samples).tolist()
            for n in lengths:
                try:
                    module.Runtime(blob[:n])
                except ValueError as exc:
                    problem = _truncation_problem(str(exc), n)
                    if problem is not None:
                        raise AssertionError(
                            f"{r.label}: the blob truncated to {n} of {len(blob)} bytes was refused with "
                            f"{str(exc)!r}, {problem}"
                        ) from None
                    continue
                raise AssertionError(f"{r.label}: the blob truncated to {n} of {len(blob)} bytes was accepted")
            try:
                module.Runtime(blob + b"\x00")
            except ValueError:
                continue
            raise AssertionError(f"{r.label}: the blob with one byte appended was accepted")

    def test_corrupted_blobs_never_crash(self):
        module = self.runtime()
        rng = np.random.default_rng(self.seed)
        for r, blob in self._unique_blobs():
            for _ in range(self.flips):
                pos = int(rng.integers(len(blob)))
                bad = bytearray(blob)
                bad[pos] ^= int(rng.integers(1, 256))
                try:
                    handle = module.Runtime(bytes(bad))
                except ValueError:
                    continue
                except Exception as exc:
                    raise AssertionError(
                        f"{r.label}: corrupting byte {pos} raised {type(exc).__name__}, not ValueError: {exc}"
                    ) from exc
                with contextlib.suppress(RuntimeError):
                    handle.run(r.inputs, r.filled_outputs())

    def test_run_refuses_wrong_arguments(self):
        module = self.runtime()
        for r in self.regions():
            handle = module.Runtime(r.blob)
            good_in, good_out = list(r.inputs), r.filled_outputs()
            bad_calls: dict[str, tuple[list[Any], list[Any]]] = {
                "one input too many": ([*good_in, good_in[0] if good_in else np.zeros(1)], good_out),
                "one output too many": (good_in, [*good_out, good_out[0].copy()]),
                "an output of the wrong shape": (
                    good_in,
                    [np.empty((*good_out[0].shape, 2), good_out[0].dtype), *good_out[1:]],
                ),
                "a read-only output": (good_in, [_read_only(o) for o in good_out]),
                "a list instead of an array": (good_in, [o.tolist() for o in good_out]),
            }
            if good_in:
                x = good_in[0]
                other = np.float64 if x.dtype != np.float64 else np.float32
                bad_calls["one input too few"] = (good_in[1:], good_out)
                bad_calls["an input of the wrong dtype"] = ([x.astype(other), *good_in[1:]], good_out)
                if x.size > 1:
                    strided = np.empty(x.size * 2, x.dtype)[::2].reshape(x.shape)
                    strided[...] = x
                    bad_calls["a non-contiguous input"] = ([strided, *good_in[1:]], good_out)
            for what, (ins, outs) in bad_calls.items():
                try:
                    handle.run(ins, outs)
                except RuntimeError:
                    continue
                raise AssertionError(f"{r.label}: run accepted {what}")

    def _compile(self, case: Case) -> Any:
        """accel.compile of the case for this backend alone, with the kit's target options."""
        from accel.compiler import compile as compile_model

        options = self.options
        if isinstance(options, BackendOptions):
            options = options.model_dump(exclude_unset=True)
        target = {"devices": [{"kind": self.backend.name, "options": dict(options or {})}]}
        return compile_model(case.graph, target=target, available={self.backend.name: self.backend})

    def test_the_thread_count_chosen_at_load_is_used(self):
        """``Runtime(blob, threads=n)`` computes with n threads (its ``threads`` says so) and agrees with the
        reference at every n; ``executable(threads=n)`` makes every handle with n."""
        module = self.runtime()
        for r in self.regions():
            exact, rtol, atol = self._tolerance(r.case)
            want = None
            for n in (1, 2, 3):
                handle = module.Runtime(r.blob, threads=n)
                assert handle.threads == n, f"{r.label}: Runtime(blob, threads={n}).threads is {handle.threads}"
                got = r.filled_outputs()
                handle.run(r.inputs, got)
                if want is None:
                    want = got
                    continue
                for k, (a, b) in enumerate(zip(got, want)):
                    _compare(a, b, exact, rtol, atol, f"{r.label}: output {k} on {n} threads against 1 thread")
        artifact = self._compile(self.cases()[0])
        for n in (1, 2):
            executable = artifact.executable(threads=n)
            assert executable.threads == n and {h.threads for h in executable.handles.values()} == {n}

    def test_concurrent_runs_agree(self):
        module = self.runtime()
        for r in self.regions():
            handle = module.Runtime(r.blob)
            baseline = r.filled_outputs()
            handle.run(r.inputs, baseline)
            results = _run_in_threads(handle, r, self.threads, self.thread_iterations)
            for i, got in enumerate(results):
                if isinstance(got, BaseException):
                    raise AssertionError(f"{r.label}: thread {i} failed: {got!r}") from got
                for outs in got:
                    for a, b in zip(outs, baseline):
                        assert a.tobytes() == b.tobytes(), f"{r.label}: thread {i} got other results than one thread"


def concurrent_mismatches(
    run: Callable[[dict[str, np.ndarray]], dict[str, Any]],
    feeds: Sequence[dict[str, np.ndarray]],
    want: Sequence[dict[str, Any]],
    *,
    rounds: int = 8,
) -> list[str]:
    """Calls ``run(feeds[i])`` ``rounds`` times from one thread per feed, all at once (one loaded model
    shared by its callers); returns the outputs that differed from ``want[i]`` (NaN equal to NaN)."""
    errors: list[str] = []

    def work(i: int) -> None:
        try:
            for _ in range(rounds):
                got = run(feeds[i])
                for k, v in want[i].items():
                    if not np.array_equal(np.asarray(got[k]), np.asarray(v), equal_nan=np.asarray(v).dtype.kind == "f"):
                        errors.append(f"caller {i}: %{k} differs")
        except Exception as exc:  # reported with the mismatches
            errors.append(f"caller {i} failed: {type(exc).__name__}: {exc}")

    callers = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds))]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    return errors


def _reference(graph: Graph, arrays: Sequence[np.ndarray]) -> list[Any]:
    """accel's reference executor on ``graph`` (edge values make numpy warn; the results are what count)."""
    with np.errstate(all="ignore"):
        return ReferenceExecutor(graph).run_positional(list(arrays))


def _trivial(a: np.ndarray) -> str | None:
    """Why a reference output cannot tell a right runtime from a wrong one, or None."""
    flat = a.reshape(-1)
    if flat.size == 0:
        return "is empty"
    if flat.size == 1:
        value = flat[0]
        if a.dtype.kind == "f" and np.isnan(value):
            return "is a single NaN"
        return "is a single zero" if value == 0 else None
    first = flat[:1]
    if a.dtype.kind == "f" and np.isnan(first[0]):
        same = bool(np.isnan(flat).all())
    else:
        same = bool((flat == first).all())
    return f"holds {first[0]!r} in all {flat.size} elements" if same else None


def _compare(got: np.ndarray, want: np.ndarray, exact: bool, rtol: float, atol: float, what: str) -> None:
    """Integers bitwise; floats with the same NaN places, then bitwise (exact) or within rtol/atol."""
    want = np.ascontiguousarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{what}: got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}")
    g, w = got.reshape(-1), want.reshape(-1)
    if got.dtype.kind == "f":
        nan_g, nan_w = np.isnan(g), np.isnan(w)
        if not np.array_equal(nan_g, nan_w):
            wrong = np.flatnonzero(nan_g != nan_w)
            at = wrong[:5].tolist()
            raise AssertionError(
                f"{what}: NaN at other places than the reference, {len(wrong)} element(s), first {at}: "
                f"got {g[at].tolist()}, expected {w[at].tolist()}"
            )
        keep = ~nan_w
        g, w = g[keep], w[keep]
        if not exact:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=what)
            return
    same = g.view(np.uint8).reshape(len(g), g.itemsize) == w.view(np.uint8).reshape(len(w), w.itemsize)
    diff = np.flatnonzero(~same.all(axis=1))
    if len(diff):
        at = diff[:5].tolist()
        raise AssertionError(
            f"{what}: not bitwise equal to the reference at {len(diff)} element(s), first {at}: "
            f"got {g[at].tolist()}, expected {w[at].tolist()}"
        )


def _truncation_problem(message: str, length: int) -> str | None:
    """What is wrong with the error refusing a blob truncated to ``length`` bytes, or None."""
    stated = shortfall(message)
    if stated is None:
        return "which does not state the bytes needed and the bytes left (e.g. 'needs 8 bytes, 3 left')"
    needed, left = stated
    if left > length:
        return f"which says {left} bytes were left of a {length}-byte blob: the reader lost track of the end"
    if needed <= left:
        return f"which says {needed} bytes were needed and {left} left: that is no shortfall"
    return None


def _not_compiled(module: Any) -> str | None:
    """Why ``module`` is not a compiled runtime with a compiled ``Runtime`` class, or None."""
    if not _is_extension(module):
        where = getattr(module, "__file__", None) or "no file"
        return f"module {getattr(module, '__name__', module)!r} ({where}) is not a compiled extension module"
    runtime = getattr(module, "Runtime", None)
    if not isinstance(runtime, type):
        return "its module has no Runtime class"
    owner = sys.modules.get(runtime.__module__)
    if owner is None or not _is_extension(owner):
        return f"its Runtime class is defined in {runtime.__module__!r}, not in a compiled extension module"
    for name in ("__init__", "run"):
        for klass in runtime.__mro__[:-1]:
            if name in vars(klass):
                attr = inspect.getattr_static(klass, name)
                if isinstance(attr, (staticmethod, classmethod)):
                    attr = attr.__func__
                if isinstance(attr, (types.FunctionType, types.MethodType, property)):
                    return f"Runtime.{name} is Python code ({klass.__module__}.{klass.__qualname__})"
                break
    return None


def _is_extension(module: Any) -> bool:
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None) or getattr(module, "__file__", None)
    if not isinstance(origin, str):
        return False
    loader = getattr(spec, "loader", None)
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return origin.endswith(suffixes) and (loader is None or isinstance(loader, importlib.machinery.ExtensionFileLoader))


def _run_in_threads(handle: Any, region: Region, threads: int, iterations: int) -> list[Any]:
    """Each thread's list of outputs (``iterations`` runs of one handle, started together), or its exception."""
    start = threading.Barrier(threads)
    results: list[Any] = [[] for _ in range(threads)]

    def worker(i: int) -> None:
        try:
            start.wait()
            for k in range(iterations):
                outs = region.filled_outputs(SENTINELS[k % len(SENTINELS)])
                handle.run(region.inputs, outs)
                results[i].append(outs)
        except BaseException as exc:  # reported by the caller
            results[i] = exc

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return results


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.setflags(write=False)
    return a
