"""Placement by measurement: ``accel compile --tune`` (DESIGN §4, docs/partition.md "Tuning").

The partitioner's priority placement is a guess; this module measures. A
*placement* says where every node runs; it is expressed to the partitioner as
``forbid`` (:func:`accel.partition.partition_graph`): for each backend, the
nodes it may not take. Every candidate placement is compiled and run end to
end on this machine (real input shapes, the boundary transposes and copies it
costs, ``threads`` threads), several times after a warm-up; its time is a
percentile above the median. Candidates, in this order:

1. the plain priority placement (always measured, whatever the budget);
2. every single-backend placement (each backend alone, the host for the rest);
3. the segment search (:meth:`_Tuner.segment_search`): the node order cut
   where those placements' runs meet, each segment compiled and measured as a
   graph of its own on each choice that runs it (its boundaries included,
   keyed by :func:`structural_hash`, so alike blocks are measured once), and
   the least-time tiling found by dynamic programming over the topological
   order, then measured whole;
4. a search from the fastest of those: region by region (the largest work
   first), each region is offered to every other backend and to the host; a
   move is kept when the whole model gets faster.

The choice is then measured again with the plain placement and every
single-backend one measured within 25 % of it, in one interleaved run of
three times the runs; the fastest there replaces the
plain placement only when it is at least ``min_gain`` faster, and otherwise
the plain one is kept and the record says so. Each measurement is a pure function of (graph hash, placement,
backend versions, machine kind, threads, runs, percentile) and is kept in a
JSON file (:class:`MeasurementCache`), so re-tuning only compiles what it
chooses. The record (:func:`tune`'s artifact's ``report.tuning``) is shown by
``accel inspect``; an artifact tuned on another machine kind still runs and
says so (:func:`tuned_elsewhere`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import platform
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from accel.artifact import Artifact
from accel.backend import Backend
from accel.errors import AccelError
from accel.ir import Graph, Node, Value
from accel.partition import partition_report
from accel.report import HOST, Report
from accel.runtime import Executable, resolve_threads
from accel.target import CompositeTarget

Progress = Callable[[str, int, int], None]
Forbid = dict[str, frozenset[str]]

#: The final check runs each single-backend placement measured within this factor of the best.
FINALIST_SPREAD = 1.25
#: Seconds of quiet before the final check.
QUIET_BEFORE_CHECK = 0.5
CACHE_FORMAT = "accel-tune-cache"
CACHE_VERSION = 1
#: ISA features that decide which kernels a backend runs (those this CPU has make its machine kind).
_ISA_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "asimd",
    "asimddp",
    "sve",
    "sve2",
    "i8mm",
    "bf16",
)


@dataclass(frozen=True)
class TuneOptions:
    """How to tune. ``threads``: as the artifact will run with (None: ``ACCEL_NUM_THREADS`` or every core)."""

    #: Seconds for the search; the plain placement and the final check are always measured.
    budget: float = 60.0
    threads: int | None = None
    #: Timed runs per measurement, after ``warmup`` untimed ones.
    runs: int = 10
    warmup: int = 2
    #: The percentile of the runs a candidate is judged by (above the median: a slow tail counts).
    percentile: float = 75.0
    #: A move, and the final choice, must be this much faster (a share) than what it replaces.
    min_gain: float = 0.02
    #: The measurement cache file; None: :func:`default_cache_path`; False: no cache.
    cache: str | os.PathLike[str] | bool | None = None


# --------------------------------------------------------------------------- machine, hashes


def machine_kind() -> dict[str, Any]:
    """This machine's kind: architecture, CPU model and the ISA features in :data:`_ISA_FLAGS` it has,
    with ``id``, a short digest of the three (what the cache and an artifact's record compare)."""
    arch = platform.machine() or "unknown"
    cpu, flags = "", set[str]()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "CPU part") and not cpu:
                    cpu = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    cpu = cpu or platform.processor() or "unknown"
    isa = [f for f in _ISA_FLAGS if f in flags]
    digest = hashlib.sha256(json.dumps([arch, cpu, isa]).encode()).hexdigest()[:16]
    return {"arch": arch, "cpu": cpu, "isa": isa, "id": digest}


def graph_hash(graph: Graph) -> str:
    """A digest of the graph's structure and constants (its serialized form), stable across processes."""
    from accel.serialize import graph_to_json

    doc, arrays = graph_to_json(graph)
    h = hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        h.update(f"{key}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def structural_hash(graph: Graph) -> str:
    """A digest of what a graph's speed depends on: its ops, attributes, wiring, and the shapes,
    dtypes and quantization of its tensors, but not its constants' values. Two blocks of a model
    alike in these (the repeated blocks of a ResNet stage) share their measurements."""
    ids: dict[int, str] = {id(v): f"i{k}" for k, v in enumerate(graph.inputs)}
    h = hashlib.sha256()
    h.update(json.dumps([str(v.type) for v in graph.inputs]).encode())
    for k, node in enumerate(graph.nodes):
        ins = []
        for v in node.inputs:
            if v.const is not None:
                ins.append(f"c:{v.type}")
            else:
                ins.append(ids.get(id(v), "?"))
        attrs = json.dumps({a: repr(node.attrs[a]) for a in sorted(node.attrs)})
        h.update(f"{node.op}|{attrs}|{ins}|{[str(v.type) for v in node.outputs]}\n".encode())
        for j, v in enumerate(node.outputs):
            ids[id(v)] = f"n{k}.{j}"
    h.update(json.dumps([ids.get(id(v), "?") for v in graph.outputs]).encode())
    return h.hexdigest()


def segment_graph(graph: Graph, start: int, end: int) -> Graph | None:
    """Nodes ``start:end`` of the graph (a topological order) as a graph of their own: its inputs
    are the values they read from before ``start`` (constants stay constants), its outputs the
    values they make that later nodes or the graph's outputs read. None when it reads no input."""
    nodes = graph.nodes[start:end]
    inside = set(nodes)
    made = {v for n in nodes for v in n.outputs}
    mapping: dict[Value, Value] = {}
    inputs: list[Value] = []
    for n in nodes:
        for v in n.inputs:
            if v.const is None and v not in made and v not in mapping:
                mapping[v] = Value(v.name, v.type)
                inputs.append(mapping[v])
    if not inputs:
        return None
    wanted = set(graph.outputs)
    copies: list[Node] = []
    for n in nodes:
        c = n.copy_reading([mapping.get(v, v) for v in n.inputs])
        mapping.update(zip(n.outputs, c.outputs))
        copies.append(c)
    outputs = [
        mapping[v] for n in nodes for v in n.outputs if v in wanted or any(u not in inside for u in graph.users(v))
    ]
    return Graph(inputs, outputs, copies, name=f"{graph.name}_segment")


# --------------------------------------------------------------------------- the cache


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/accel/tune.json``, else ``~/.cache/accel/tune.json``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "accel" / "tune.json"


class MeasurementCache:
    """Measurements by key, in one JSON file: ``{"format", "version", "entries": {key: entry}}``.

    An entry is ``{"time", "median", "runs", "key": {what the key digests}}``. A missing, unreadable or
    foreign file is an empty cache (it is a cache); :meth:`save` merges with what the file holds then
    and renames a temporary file over it, so concurrent tuners lose at most each other's new entries.
    """

    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, dict[str, Any]] = self._read() if path is not None else {}
        self.new: dict[str, dict[str, Any]] = {}
        self.hits = 0
        self.misses = 0

    def _read(self) -> dict[str, dict[str, Any]]:
        assert self.path is not None
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or doc.get("version") != CACHE_VERSION:
            return {}
        entries = doc.get("entries")
        return entries if isinstance(entries, dict) else {}

    @staticmethod
    def key(parts: Mapping[str, Any]) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        found = self.entries.get(key)
        if isinstance(found, dict) and isinstance(found.get("time"), (int, float)):
            self.hits += 1
            return found
        self.misses += 1
        return None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        self.entries[key] = self.new[key] = entry

    def save(self) -> None:
        if self.path is None or not self.new:
            return
        merged = self._read()
        merged.update(self.new)
        doc = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "entries": merged}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc, separators=(",", ":")), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass  # an unwritable cache only costs the next tune its time


# --------------------------------------------------------------------------- measuring


def example_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of the graph's shapes and dtypes (normal floats, integers over the dtype's range)."""
    rng = np.random.default_rng(seed)
    out = {}
    for v in graph.inputs:
        dt = v.type.np_dtype
        if np.issubdtype(dt, np.floating):
            out[v.name] = rng.standard_normal(v.type.shape).astype(dt)
        elif dt == np.bool_:
            out[v.name] = rng.integers(0, 2, v.type.shape).astype(dt)
        else:
            info = np.iinfo(dt)
            out[v.name] = rng.integers(max(info.min, -128), min(info.max, 127) + 1, v.type.shape).astype(dt)
    return out


def measure(
    executables: list[Executable], inputs: Mapping[str, np.ndarray], options: TuneOptions
) -> list[tuple[float, float]]:
    """(percentile, median) seconds of each executable, their runs interleaved (so drift hits all alike)."""
    arrays = [exe.check_inputs(inputs) for exe in executables]
    for _ in range(options.warmup):
        for exe, a in zip(executables, arrays):
            exe.run_positional(a)
    times: list[list[float]] = [[] for _ in executables]
    for r in range(max(options.runs, 1)):
        # forward, then backward: what one leaves behind (a thread pool still spinning) falls on
        # a different neighbour each round
        order = range(len(executables)) if r % 2 == 0 else range(len(executables) - 1, -1, -1)
        for k in order:
            t0 = time.perf_counter()
            executables[k].run_positional(arrays[k])
            times[k].append(time.perf_counter() - t0)
    return [(float(np.percentile(t, options.percentile)), float(np.median(t))) for t in times]


# --------------------------------------------------------------------------- tuning


@dataclass
class Candidate:
    label: str
    forbid: Forbid
    #: Where every node runs (node order), as the partitioner placed it.
    placement: tuple[str, ...]
    time: float = 0.0
    median: float = 0.0
    cached: bool = False
    #: Why it could not be compiled or run (then it is no choice).
    error: str | None = None
    labels: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.placement:
            out[b] = out.get(b, 0) + 1
        return out


class _Tuner:
    def __init__(
        self,
        graph: Graph,
        tgt: CompositeTarget,
        instances: list[Backend],
        options: TuneOptions,
        progress: Progress | None,
    ):
        self.graph, self.tgt, self.instances, self.options, self.progress = graph, tgt, instances, options, progress
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + max(options.budget, 0.0)
        self.names = [b.name for b in instances]
        self.node_names = [n.name for n in graph.nodes]
        self.threads = resolve_threads(options.threads)
        self.machine = machine_kind()
        self.ghash = graph_hash(graph)
        self.inputs = example_inputs(graph)
        if options.cache is False:
            path = None
        elif options.cache is None or options.cache is True:
            path = default_cache_path()
        else:
            path = Path(options.cache)
        self.cache = MeasurementCache(path)
        self.seen: dict[tuple[str, ...], Candidate] = {}
        self.order: list[Candidate] = []
        self.budget_reached = False
        self.step = 0
        #: (start, end, choice) -> seconds of nodes start:end alone on choice (segment_cost)
        self.segment_times: dict[tuple[int, int, str], float] = {}
        self.segments_measured = 0

    def _tick(self, total: int) -> None:
        self.step += 1
        if self.progress:
            self.progress("tune", self.step, max(total, self.step))

    def report_of(self, forbid: Mapping[str, Collection[str]]) -> Report:
        return partition_report(self.graph, self.instances, forbid=forbid)

    def build(self, forbid: Mapping[str, Collection[str]]) -> Artifact:
        from accel.compiler import build_artifact

        return build_artifact(self.graph, self.tgt, self.instances, forbid=forbid)

    def cache_key(self, placement: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
        used = sorted(set(placement) - {HOST})
        by_name = {b.name: b for b in self.instances}
        parts = {
            "graph": self.ghash,
            "placement": hashlib.sha256("\0".join(placement).encode()).hexdigest(),
            "backends": {n: f"{by_name[n].distribution} {by_name[n].version}" for n in used},
            "options": {n: _options_of(by_name[n]) for n in used},
            "machine": self.machine["id"],
            "threads": self.threads,
            "runs": [self.options.warmup, self.options.runs, self.options.percentile],
        }
        return MeasurementCache.key(parts), parts

    def evaluate(self, label: str, forbid: Forbid, total: int, needs: str | None = None) -> Candidate:
        """The candidate ``forbid`` gives, measured (or found measured: in this tune or the cache).
        With ``needs``, a placement in which that backend takes no node is not measured: it is the
        host's placement, never a choice, and running the whole model on the host leaves its BLAS
        threads spinning on the measurements that follow."""
        report = self.report_of(forbid)
        placement = tuple(n.backend for n in report.nodes)
        found = self.seen.get(placement)
        if found is not None:
            found.labels.append(label)
            return found
        self._tick(total)
        cand = Candidate(label, forbid, placement, labels=[label])
        if needs is not None and needs not in placement:
            cand.time = cand.median = float("inf")
            cand.error = f"{needs} takes no node of this model (the host's placement: not measured)"
            self.seen[placement] = cand
            self.order.append(cand)
            return cand
        key, parts = self.cache_key(placement)
        entry = self.cache.get(key)
        if entry is not None:
            cand.time, cand.median, cand.cached = float(entry["time"]), float(entry.get("median", entry["time"])), True
        else:
            try:
                exe = self.build(forbid).executable(self.threads)
                ((cand.time, cand.median),) = measure([exe], self.inputs, self.options)
            except AccelError as exc:
                if not forbid:
                    raise  # the plain placement must compile and run, tuned or not
                cand.time = cand.median = float("inf")
                cand.error = str(exc)  # this placement is not a choice; not cached (a fix may come)
            else:
                self.cache.put(key, {"time": cand.time, "median": cand.median, "key": parts})
        self.seen[placement] = cand
        self.order.append(cand)
        return cand

    # -- the segment search ------------------------------------------------------------
    def segment_cost(self, start: int, end: int, choice: str) -> float:
        """Seconds nodes ``start:end`` take as a graph of their own on ``choice`` (a backend, where it
        takes them, or the host), boundary conversions included; measured once per structure."""
        span = (start, end, choice)
        if span in self.segment_times:
            return self.segment_times[span]
        cost = float("inf")
        sub = segment_graph(self.graph, start, end)
        if sub is not None:
            by_name = {b.name: b for b in self.instances}
            parts = {
                "segment": structural_hash(sub),
                "on": choice,
                "backend": "" if choice == HOST else f"{by_name[choice].distribution} {by_name[choice].version}",
                "options": {} if choice == HOST else _options_of(by_name[choice]),
                "machine": self.machine["id"],
                "threads": self.threads,
                "runs": [self.options.warmup, self.options.runs, self.options.percentile],
            }
            key = MeasurementCache.key(parts)
            entry = self.cache.get(key)
            if entry is not None:
                cost = float(entry["time"])
            else:
                every = frozenset(n.name for n in sub.nodes)
                forbid = {b: every for b in self.names if b != choice}
                try:
                    from accel.compiler import build_artifact

                    exe = build_artifact(sub, self.tgt, self.instances, forbid=forbid).executable(self.threads)
                    ((cost, median),) = measure([exe], example_inputs(sub), self.options)
                    self.segments_measured += 1
                except AccelError:
                    cost = float("inf")  # not a choice for this span (not cached: a fix may come)
                else:
                    self.cache.put(key, {"time": cost, "median": median, "key": parts})
        self.segment_times[span] = cost
        return cost

    def segment_search(self, bases: list[Candidate], total: int) -> tuple[Forbid, list[dict[str, Any]], float] | None:
        """The fastest tiling of the node order by segments, each on one choice: a shortest path
        over the cut points of the base placements' runs (dynamic programming over the topological
        order), the cost of a segment measured as a graph of its own with its boundaries. Segments:
        every run of every base placement (the plain one first, so a tiling always exists), and each
        backend's runs in its single-backend placement cut where the plain placement's runs meet.
        Returns the placement as ``forbid``, the path's segments with the times of every choice
        measured for them, and the summed estimate; None when the budget ran out before a tiling."""
        n = len(self.node_names)
        plain_runs = _runs(bases[0].placement)
        cuts = sorted({0, n, *(start for start, _, _ in plain_runs)})
        spans: list[tuple[int, int, str]] = []
        for cand in bases:
            if cand.error is None:
                spans += _runs(cand.placement)
        for cand in bases[1:]:
            if cand.error is not None:
                continue
            for start, end, owner in _runs(cand.placement):
                if owner == HOST:
                    continue
                inner = [c for c in cuts if start < c < end]
                edges = [start, *inner, end]
                spans += [(a, b, owner) for a, b in itertools.pairwise(edges)]
        ordered = list(dict.fromkeys(spans))  # the plain placement's runs first
        for k, (start, end, choice) in enumerate(ordered):
            if k >= len(plain_runs) and not self.in_budget():
                break
            self._tick(total)
            self.segment_cost(start, end, choice)
        by_start: dict[int, list[tuple[int, int, str]]] = {}
        for span in ordered:
            if span in self.segment_times and self.segment_times[span] != float("inf"):
                by_start.setdefault(span[0], []).append(span)
        best: dict[int, tuple[float, tuple[int, int, str] | None]] = {0: (0.0, None)}
        for point in sorted({0, *(e for _, e, _ in ordered)}):
            if point not in best:
                continue
            for span in by_start.get(point, []):
                t = best[point][0] + self.segment_times[span]
                if span[1] not in best or t < best[span[1]][0]:
                    best[span[1]] = (t, span)
        if n not in best:
            return None
        path: list[tuple[int, int, str]] = []
        at = n
        while at > 0:
            step = best[at][1]
            assert step is not None
            path.append(step)
            at = step[0]
        path.reverse()
        allowed: dict[str, set[str]] = {b: set() for b in self.names}
        records = []
        for start, end, choice in path:
            names = self.node_names[start:end]
            if choice != HOST:
                allowed[choice].update(names)
            times = {
                c: t for (s0, e0, c), t in self.segment_times.items() if (s0, e0) == (start, end) and t != float("inf")
            }
            records.append(
                {
                    "nodes": [names[0], names[-1]],
                    "size": len(names),
                    "times": times,
                    "winner": choice,
                    "why": _why_segment(choice, times),
                }
            )
        every = set(self.node_names)
        forbid = _frozen({b: every - allowed[b] for b in self.names})
        return forbid, records, best[n][0]

    def in_budget(self) -> bool:
        if time.perf_counter() < self.deadline:
            return True
        self.budget_reached = True
        return False

    def forbid_all_but(self, keep: str | None, nodes: Collection[str]) -> Forbid:
        return {b: frozenset(nodes) for b in self.names if b != keep}

    def run(self) -> tuple[Artifact, dict[str, Any]]:
        every = self.node_names
        plain_report = self.report_of({})
        regions = sorted(plain_report.partitions, key=lambda p: -p.work)
        # a rough total for progress: base candidates plus one move per region and choice
        total = 1 + len(self.names) + len(regions) * len(self.names)
        plain = self.evaluate("priority", {}, total)
        singles = []
        if len(self.names) > 1:
            for b in self.names:
                if not self.in_budget():
                    break
                singles.append(self.evaluate(f"{b} only", self.forbid_all_but(b, every), total, needs=b))
        best = min([plain, *singles], key=lambda c: c.time)
        # the segment search: a placement assembled from measured segments, then measured whole
        segment_records: list[dict[str, Any]] = []
        estimate = None
        if self.in_budget():
            found = self.segment_search([plain, *singles], total)
            if found is not None:
                searched, segment_records, estimate = found
                cand = self.evaluate("segment search", searched, total)
                if cand.error is None and cand.time < best.time * (1 - self.options.min_gain):
                    best = cand
        region_records = []
        # the search: each region of the plain placement, then any the best base candidate adds
        seen_regions: set[tuple[str, ...]] = set()
        base_regions = [list(p.nodes) for p in regions]
        if best is not plain:
            extra = self.report_of(best.forbid).partitions
            base_regions += [list(p.nodes) for p in sorted(extra, key=lambda p: -p.work)]
        index = {name: i for i, name in enumerate(every)}
        for nodes in base_regions:
            if tuple(nodes) in seen_regions:
                continue
            seen_regions.add(tuple(nodes))
            if not self.in_budget():
                break
            owner = best.placement[index[nodes[0]]]
            times = {owner: best.time}
            start = best
            for choice in [*self.names, HOST]:
                if choice == owner or not self.in_budget():
                    continue
                forbid = {b: set(s) - set(nodes) for b, s in best.forbid.items()}
                for b, s in self.forbid_all_but(None if choice == HOST else choice, nodes).items():
                    forbid.setdefault(b, set()).update(s)
                cand = self.evaluate(f"{nodes[0]}..{nodes[-1]} on {choice}", _frozen(forbid), total)
                landed = cand.placement[index[nodes[0]]]
                if landed != choice or cand.error:
                    continue  # the backend declines the region (or part of it): not a choice for it
                times[choice] = cand.time
                if cand.time < best.time * (1 - self.options.min_gain):
                    best = cand
            winner = best.placement[index[nodes[0]]]
            region_records.append(
                {
                    "nodes": [nodes[0], nodes[-1]],
                    "size": len(nodes),
                    "was": owner,
                    "times": times,
                    "winner": winner,
                    "why": _why(winner, times, start.time, self.options.min_gain),
                }
            )
        # the final check: the choice, the plain placement and every single-backend one, measured together
        chosen, note = plain, ""
        confirm: dict[str, float] = {}
        if best is not plain:
            self._tick(total)
            # every single-backend placement too: two of them within noise of each other in the
            # search are told apart here, in one interleaved run
            # (those measured within FINALIST_SPREAD of the best: a far slower one only adds noise, a
            # host-bound one leaving its BLAS threads spinning on the next)
            finalists = [plain, best]
            finalists += [
                c for c in singles if c.error is None and c not in finalists and c.time <= best.time * FINALIST_SPREAD
            ]
            built = [self.build(c.forbid) for c in finalists]
            # three times the runs: the finalists are close, and this decides; after a pause, so
            # that thread pools the search left spinning (BLAS after a host-heavy candidate) sleep
            final = dataclasses.replace(self.options, runs=3 * self.options.runs)
            time.sleep(QUIET_BEFORE_CHECK)
            final_times = measure([a.executable(self.threads) for a in built], self.inputs, final)
            confirm = {c.label: t for c, (t, _) in zip(finalists, final_times)}
            k = min(range(len(finalists)), key=lambda i: final_times[i][0])
            tp, tk = final_times[0][0], final_times[k][0]
            if k > 0 and tk < tp * (1 - self.options.min_gain):
                chosen, artifact = finalists[k], built[k]
            else:
                runner_up = finalists[k] if k > 0 else best
                note = (
                    f"no candidate wins: {runner_up.label} measured {_ms(confirm[runner_up.label])} against the "
                    f"plain placement's {_ms(tp)} in the final check; the plain priority placement is kept"
                )
                artifact = built[0]
        else:
            note = "no candidate wins: the plain priority placement is the fastest measured; it is kept"
            artifact = self.build(plain.forbid)
        self.cache.save()
        elapsed = time.perf_counter() - self.t0
        record = {
            "machine": self.machine,
            "threads": self.threads,
            "runs": self.options.runs,
            "warmup": self.options.warmup,
            "percentile": self.options.percentile,
            "min_gain": self.options.min_gain,
            "budget": self.options.budget,
            "budget_reached": self.budget_reached,
            "elapsed": elapsed,
            "cache": {
                "path": str(self.cache.path) if self.cache.path else None,
                "hits": self.cache.hits,
                "misses": self.cache.misses,
            },
            "candidates": [
                {
                    "label": c.label,
                    "placement": c.counts(),
                    "time": c.time,
                    "median": c.median,
                    "cached": c.cached,
                    "chosen": c is chosen,
                    **({"error": c.error} if c.error else {}),
                }
                for c in self.order
            ],
            "regions": region_records,
            "segments": segment_records,
            "segment_estimate": estimate,
            "segment_spans": len(self.segment_times),
            "segment_measured": self.segments_measured,
            "confirm": confirm,
            "chosen": chosen.label,
            "kept_plain": chosen is plain,
            "note": note,
        }
        return artifact, record


def _options_of(backend: Backend) -> Any:
    """A backend instance's target options as JSON (part of a measurement's key)."""
    options = getattr(backend, "options", None)
    dump = getattr(options, "model_dump", None)
    return dump(mode="json") if dump is not None else {}


def _runs(placement: tuple[str, ...]) -> list[tuple[int, int, str]]:
    """The maximal runs ``(start, end, owner)`` of one owner in a placement (node order)."""
    out = []
    start = 0
    for k in range(1, len(placement) + 1):
        if k == len(placement) or placement[k] != placement[start]:
            out.append((start, k, placement[start]))
            start = k
    return out


def _why_segment(winner: str, times: Mapping[str, float]) -> str:
    """Why the search put a segment on ``winner``, from each choice's time for it alone."""
    others = sorted((t, b) for b, t in times.items() if b != winner)
    if not others:
        return f"only {winner} was measured for it"
    t_best, b_best = others[0]
    if times.get(winner, float("inf")) <= t_best:
        return f"{winner} fastest alone: {_ms(times[winner])}, {b_best} next at {_ms(t_best)}"
    return f"{winner}: with its neighbours the path is fastest ({b_best} alone {_ms(t_best)})"


def _frozen(forbid: Mapping[str, Collection[str]]) -> Forbid:
    return {b: frozenset(s) for b, s in forbid.items() if s}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _why(winner: str, times: Mapping[str, float], before: float, min_gain: float) -> str:
    """Why ``winner`` keeps (or took) a region, from the end-to-end times of each choice for it."""
    if len(times) == 1:
        return f"only {winner} takes it"
    others = sorted((t, b) for b, t in times.items() if b != winner)
    t_best, b_best = others[0]
    mine = times[winner]
    if mine <= t_best:
        return f"{winner} fastest: {_ms(mine)} end to end, {b_best} next at {_ms(t_best)}"
    return (
        f"{winner} kept: {b_best} measured {_ms(t_best)} against {_ms(mine)}, less than the "
        f"{min_gain:.0%} gain a move needs"
    )


def tune(
    graph: Graph,
    tgt: CompositeTarget,
    instances: list[Backend],
    options: TuneOptions | None = None,
    *,
    progress: Progress | None = None,
) -> Artifact:
    """The artifact of the fastest placement measured (see the module docstring); ``report.tuning`` says how
    it was chosen. Never slower in its final check than the plain priority placement."""
    options = options or TuneOptions()
    tuner = _Tuner(graph, tgt, instances, options, progress)
    artifact, record = tuner.run()
    artifact.report.tuning = record
    return artifact


def tuned_elsewhere(report: Report) -> str | None:
    """One line when ``report`` was tuned on another machine kind than this one, else None."""
    record = report.tuning
    if not isinstance(record, dict) or not isinstance(record.get("machine"), dict):
        return None
    there = record["machine"]
    here = machine_kind()
    if there.get("id") == here["id"]:
        return None
    return (
        f"note: this model was tuned on {there.get('cpu', '?')} ({there.get('arch', '?')}), not on this "
        f"{here['cpu']} ({here['arch']}): it runs, but its placement was measured elsewhere "
        "(recompile with --tune here to measure it)"
    )


class TunedElsewhereWarning(UserWarning):
    """An artifact tuned on another machine kind is being run."""


__all__ = [
    "Candidate",
    "MeasurementCache",
    "TuneOptions",
    "TunedElsewhereWarning",
    "default_cache_path",
    "example_inputs",
    "graph_hash",
    "machine_kind",
    "measure",
    "segment_graph",
    "structural_hash",
    "tune",
    "tuned_elsewhere",
]
