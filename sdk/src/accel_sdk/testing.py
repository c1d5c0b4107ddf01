"""The conformance kit: the tests every accel backend should pass, as a pytest base class.

A backend subclasses :class:`BackendConformance` in its own test file::

    from accel_sdk.testing import BackendConformance, Case

    class TestConformance(BackendConformance):
        backend = MyBackend                  # the Backend subclass
        exact = True                         # float outputs bitwise equal to the reference (else rtol/atol)

        def cases(self):
            return [Case("maxpool", graph, inputs), ...]   # small accel IR graphs (NCHW) and their inputs

The kit partitions every case for the backend alone
(:func:`accel.partition.partition_graph`), serializes every region the
backend took, loads the blob in the backend's compiled runtime and checks:

- the backend is discovered through its entry point with state ok, and its
  runtime speaks this accel-core's ABI version;
- every pattern-table entry and every op check claims a node in some case;
- the serializer is deterministic and its blobs load;
- every region's outputs match accel's reference executor on the region's
  body (integers always bitwise; floats bitwise with ``exact``, else within
  ``rtol``/``atol``, overridable per case);
- every truncation of every blob (up to ``truncation_cap`` lengths, then a
  seeded sample) and the blob with a byte appended are refused with
  ValueError; seeded single-byte corruptions either load or raise
  ValueError, and a corrupted blob that loads runs or raises RuntimeError
  (a corrupted float payload may legitimately load): nothing crashes;
- ``run`` refuses wrong arguments with RuntimeError;
- one loaded blob run from several threads at once gives identical results.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from accel.backend import ABI_VERSION, Backend
from accel.executor import ReferenceExecutor
from accel.ir import CALL_OP, Graph, Node

__all__ = ["BackendConformance", "Case", "Region", "random_inputs"]


@dataclass
class Case:
    """One small graph (in the model's NCHW layout) and its inputs (None: seeded random data).

    ``exact``, ``rtol`` and ``atol`` override the class's tolerance for this case's float outputs.
    """

    name: str
    graph: Graph
    inputs: Mapping[str, np.ndarray] | None = None
    exact: bool | None = None
    rtol: float | None = None
    atol: float | None = None


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

    def empty_outputs(self) -> list[np.ndarray]:
        return [np.empty(v.type.shape, v.type.dtype) for v in self.body.outputs]


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


_REGIONS: dict[type, list[Region]] = {}


class BackendConformance:
    """Base class of a backend's conformance tests (pytest collects the subclass, not this class)."""

    #: The Backend subclass under test.
    backend: ClassVar[type[Backend]]
    #: Target options to instantiate it with.
    options: ClassVar[Mapping[str, Any] | None] = None
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

    def _build_regions(self) -> list[Region]:
        from accel.partition import partition_graph

        backend = self.make_backend()
        regions = []
        for index, case in enumerate(self.cases()):
            result = partition_graph(case.graph, [backend])
            host = result.graph
            inputs = case.inputs if case.inputs is not None else random_inputs(case.graph, self.seed + index)
            arrays = [np.asarray(inputs[v.name]) for v in host.inputs]
            for node in host.nodes:
                if node.op != CALL_OP or node.attrs.get("compiler") != backend.name:
                    continue
                feeds = Graph(host.inputs, list(node.inputs), host.nodes, name="feeds")
                values = ReferenceExecutor(feeds).run_positional(arrays)
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
            expected = ReferenceExecutor(r.body).run_positional(list(r.inputs))
            outputs = r.empty_outputs()
            module.Runtime(r.blob).run(r.inputs, outputs)
            exact, rtol, atol = self._tolerance(r.case)
            for v, got, want in zip(r.body.outputs, outputs, expected):
                what = f"{r.label}, output %{v.name}"
                if exact or got.dtype.kind in "iub":
                    same = got.tobytes() == np.ascontiguousarray(want).tobytes()
                    if not same:
                        diff = np.flatnonzero(got.reshape(-1) != np.asarray(want).reshape(-1))
                        at = diff[:5].tolist()
                        raise AssertionError(
                            f"{what}: not bitwise equal to the reference at {len(diff)} element(s), first {at}: "
                            f"got {got.reshape(-1)[at].tolist()}, expected {np.asarray(want).reshape(-1)[at].tolist()}"
                        )
                else:
                    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)

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
                except ValueError:
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
                    handle.run(r.inputs, r.empty_outputs())

    def test_run_refuses_wrong_arguments(self):
        module = self.runtime()
        for r in self.regions():
            handle = module.Runtime(r.blob)
            good_in, good_out = list(r.inputs), r.empty_outputs()
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

    def test_concurrent_runs_agree(self):
        module = self.runtime()
        for r in self.regions():
            handle = module.Runtime(r.blob)
            baseline = r.empty_outputs()
            handle.run(r.inputs, baseline)
            results = _run_in_threads(handle, r, self.threads, self.thread_iterations)
            for i, got in enumerate(results):
                if isinstance(got, BaseException):
                    raise AssertionError(f"{r.label}: thread {i} failed: {got!r}") from got
                for outs in got:
                    for a, b in zip(outs, baseline):
                        assert a.tobytes() == b.tobytes(), f"{r.label}: thread {i} got other results than one thread"


def _run_in_threads(handle: Any, region: Region, threads: int, iterations: int) -> list[Any]:
    """Each thread's list of outputs (``iterations`` runs of one handle, started together), or its exception."""
    start = threading.Barrier(threads)
    results: list[Any] = [[] for _ in range(threads)]

    def worker(i: int) -> None:
        try:
            start.wait()
            for _ in range(iterations):
                outs = region.empty_outputs()
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
