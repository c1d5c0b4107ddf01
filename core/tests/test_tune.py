"""Placement by measurement (accel.tune) with fake backends whose speed the test sets.

The model is the chain ``relu r1 → abs a1 → relu r2 → abs a2 → relu r3``; every
cost is a sleep of a multiple of ``U`` seconds, so the fastest placement is
known and ahead of the next by at least ``U``:

* backend ``a`` (first in priority) takes relu only, costs ``2U`` a call (its boundary);
* backend ``b`` takes relu and abs, ``2U`` a call, ``U`` per relu (slow on relu), abs free;
* the host is free on relu and takes ``3U`` per abs.

plain priority: a{r1} b{a1} a{r2} b{a2} a{r3}  = 5 calls          = 10U
b only:         b{r1 a1 r2 a2 r3}               = 2U + 3U          = 5U
a only:         a{r1} host a1 a{r2} host a2 a{r3} = 6U + 6U         = 12U
optimum:        host r1, b{a1 r2 a2}, host r3   = 2U + U           = 3U (next: 4U)

Summing kernels alone (no boundaries) would keep the plain placement, whose kernels cost nothing.
"""

from __future__ import annotations

import json
import time
import warnings
from typing import ClassVar

import numpy as np
import pytest
from backend_fakes import FakeBackend, JsonRuntime, runtime_module, serialize_json

import accel
import accel.runtime
from accel.artifact import artifact_from_bytes
from accel.builder import GraphBuilder
from accel.executor import StepKind
from accel.partition import FORBIDDEN, partition_graph
from accel.render import print_report, report_to_html, report_to_json
from accel.tune import MeasurementCache, TunedElsewhereWarning, TuneOptions, machine_kind, tuned_elsewhere

U = 0.01


class SleepyRuntime(JsonRuntime):
    """The fake runtime, sleeping ``sleep[op]`` per op and ``sleep["call"]`` per call."""

    def __init__(self, blob: bytes, threads: int = 0):
        super().__init__(blob, threads)
        self.sleep = json.loads(bytes(blob)).get("sleep", {})

    def run(self, inputs, outputs):
        time.sleep(self.sleep.get("call", 0.0) + sum(self.sleep.get(op, 0.0) for op, _, _ in self.ops))
        super().run(inputs, outputs)


class Sleepy(FakeBackend):
    sleep: ClassVar[dict[str, float]] = {}
    ops: tuple[str, ...] = ("nn.relu", "abs", "add")

    def op_checks(self):
        return {op: (lambda n: None) for op in self.ops}

    def pattern_table(self):
        return []

    def serialize(self, graph):
        doc = json.loads(serialize_json(graph))
        doc["sleep"] = self.sleep
        return json.dumps(doc).encode()

    def runtime_module(self):
        module = runtime_module(type(self).name)
        module.Runtime = SleepyRuntime
        return module


class A(Sleepy):
    name = "a"
    distribution = "accel-fake-a"
    ops = ("nn.relu",)
    sleep: ClassVar[dict[str, float]] = {"call": 2 * U}


class B(Sleepy):
    name = "b"
    distribution = "accel-fake-b"
    sleep: ClassVar[dict[str, float]] = {"call": 2 * U, "nn.relu": U}


class Fast(Sleepy):
    name = "fast"
    distribution = "accel-fake-fast"
    sleep: ClassVar[dict[str, float]] = {}


class Idle(Sleepy):
    """Takes only ``add``, which the chain has none of."""

    name = "idle"
    distribution = "accel-fake-idle"
    ops = ("add",)


AVAILABLE = {"a": A, "b": B, "fast": Fast, "idle": Idle}
OPTIONS = dict(runs=3, warmup=1, min_gain=0.05, threads=1)


@pytest.fixture(autouse=True)
def slow_host_abs(monkeypatch):
    """The host takes 3U per abs."""
    real = accel.runtime.host_step

    def host_step(node):
        step = real(node)
        if node.op != "abs":
            return step

        def slow(*args):
            time.sleep(3 * U)
            return step.fn(*args)

        return StepKind(step.backend, slow, step.label)

    monkeypatch.setattr(accel.runtime, "host_step", host_step)


def chain():
    b = GraphBuilder(x=(1, 8))
    y = b.x["x"]
    for op, name in (("nn.relu", "r1"), ("abs", "a1"), ("nn.relu", "r2"), ("abs", "a2"), ("nn.relu", "r3")):
        y = b.op(op, y)
        b.nodes[-1].name = name
    return b.done(y)


def where(artifact):
    return {n.name: n.backend for n in artifact.report.nodes}


def compile_tuned(backends, tmp_path, **options):
    opts = TuneOptions(cache=tmp_path / "tune.json", **{**OPTIONS, **options})
    return accel.compile(chain(), backends, available=AVAILABLE, tune=opts)


def test_forbid_moves_nodes_to_the_next_backend_with_a_reason():
    result = partition_graph(chain(), [B(), A()], forbid={"b": {"a1", "r2"}})
    placed = {n.name: n.backend for n in result.report.nodes}
    assert placed == {"r1": "b", "a1": "host", "r2": "a", "a2": "b", "r3": "b"}
    assert result.report.nodes[1].reasons["b"] == FORBIDDEN


def test_the_search_finds_the_known_optimum_boundaries_included(tmp_path):
    art = compile_tuned("a,b", tmp_path)
    assert where(art) == {"r1": "host", "a1": "b", "r2": "b", "a2": "b", "r3": "host"}
    record = art.report.tuning
    assert not record["kept_plain"]
    labels = [c["label"] for c in record["candidates"]]
    assert labels[:3] == ["priority", "a only", "b only"]
    by_label = {c["label"]: c for c in record["candidates"]}
    chosen = next(c for c in record["candidates"] if c["chosen"])
    # never slower than the plain placement and every single-backend placement
    assert chosen["time"] <= min(by_label[k]["time"] for k in ("priority", "a only", "b only"))
    assert record["confirm"]["priority"] > record["confirm"][record["chosen"]]
    assert record["machine"] == machine_kind()
    # the regions' table: times per backend and a reason
    assert record["regions"] and all(r["why"] for r in record["regions"])
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    got = art.executable(1).run({"x": x})
    np.testing.assert_allclose(next(iter(got.values())), np.abs(np.maximum(x, 0)))


def test_the_cache_makes_a_second_tune_measure_nothing(tmp_path):
    first = compile_tuned("a,b", tmp_path).report.tuning
    fresh = len(first["candidates"]) + first["segment_measured"]
    assert first["cache"]["misses"] == fresh
    assert first["cache"]["misses"] + first["cache"]["hits"] == len(first["candidates"]) + first["segment_spans"]
    doc = json.loads((tmp_path / "tune.json").read_text())
    assert doc["format"] == "accel-tune-cache" and len(doc["entries"]) == fresh
    second = compile_tuned("a,b", tmp_path).report.tuning
    assert second["cache"]["misses"] == 0
    assert all(c["cached"] for c in second["candidates"])
    assert second["chosen"] == first["chosen"]
    # another thread count is another measurement
    third = compile_tuned("a,b", tmp_path, threads=2).report.tuning
    assert not any(c["cached"] for c in third["candidates"]) and third["segment_measured"] > 0


def test_the_segment_search_measures_segments_alone_and_shares_alike_ones(tmp_path):
    """The shortest path over measured segments: every span's choices timed alone with their
    boundaries, the path's segments recorded with a reason; the plain placement's three relu runs
    on ``a`` are one structure, measured once."""
    record = compile_tuned("a,b", tmp_path).report.tuning
    segments = record["segments"]
    assert [s["size"] for s in segments] and sum(s["size"] for s in segments) == 5
    assert all(s["winner"] in s["times"] and s["why"] for s in segments)
    # the estimate is the sum of the path's segments, each the fastest measured for its span
    assert record["segment_estimate"] == pytest.approx(sum(s["times"][s["winner"]] for s in segments))
    assert all(s["times"][s["winner"]] == min(s["times"].values()) for s in segments)
    # r1, r2, r3 alone on a: one measurement, two cache hits
    assert record["segment_measured"] < record["segment_spans"]
    assert record["cache"]["hits"] >= 2


def test_a_backend_that_takes_no_node_is_not_measured_alone(tmp_path):
    record = compile_tuned("a,b,idle", tmp_path).report.tuning
    idle = next(c for c in record["candidates"] if c["label"] == "idle only")
    assert "idle takes no node of this model" in idle["error"] and not idle["chosen"]
    assert record["chosen"] != "idle only"


def test_segments_are_subgraphs_with_their_boundaries():
    from accel.tune import segment_graph, structural_hash

    g = chain()
    sub = segment_graph(g, 1, 4)  # a1 r2 a2: reads r1's output, gives a2's
    assert [n.name for n in sub.nodes] == ["a1", "r2", "a2"]
    assert [v.name for v in sub.inputs] == [g.nodes[0].outputs[0].name]
    assert [v.name for v in sub.outputs] == [g.nodes[3].outputs[0].name]
    # relu alone at 0, 2 and 4: one structure; abs another
    assert structural_hash(segment_graph(g, 0, 1)) == structural_hash(segment_graph(g, 2, 3))
    assert structural_hash(segment_graph(g, 0, 1)) != structural_hash(segment_graph(g, 1, 2))


def test_the_budget_bounds_the_search(tmp_path):
    record = compile_tuned("a,b", tmp_path, budget=0).report.tuning
    assert record["budget_reached"]
    assert [c["label"] for c in record["candidates"]] == ["priority"]
    assert record["kept_plain"] and "no candidate wins" in record["note"]


def test_no_win_keeps_the_plain_placement(tmp_path):
    art = compile_tuned("fast", tmp_path)
    record = art.report.tuning
    assert record["kept_plain"] and record["chosen"] == "priority"
    assert "no candidate wins" in record["note"]
    assert set(where(art).values()) == {"fast"}
    assert any(c["label"].endswith("on host") for c in record["candidates"])


def test_the_record_is_in_the_artifact_and_every_report_form(tmp_path):
    art = compile_tuned("a,b", tmp_path)
    again = artifact_from_bytes(art.to_bytes(), backends=AVAILABLE)
    assert again.report.tuning == json.loads(json.dumps(art.report.tuning))
    assert report_to_json(again.report)["tuning"]["chosen"] == art.report.tuning["chosen"]
    assert "<h2>Tuning</h2>" in report_to_html(again.report, "t")
    from rich.console import Console

    console = Console(record=True, width=200)
    print_report(again.report, console)
    text = console.export_text()
    assert "Tuning: candidate placements" in text and "b only" in text
    assert "Tuning: segments" in text and "The segment search measured" in text


def test_an_artifact_tuned_elsewhere_runs_and_says_so(tmp_path):
    art = compile_tuned("a,b", tmp_path, budget=0)
    assert tuned_elsewhere(art.report) is None
    art.report.tuning["machine"] = {"arch": "riscv64", "cpu": "elsewhere", "isa": [], "id": "0"}
    with pytest.warns(TunedElsewhereWarning, match="tuned on elsewhere"):
        exe = art.executable(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exe.run({"x": np.ones((1, 8), np.float32)})


def test_an_unreadable_cache_is_an_empty_one(tmp_path):
    path = tmp_path / "tune.json"
    path.write_text("not json")
    cache = MeasurementCache(path)
    assert cache.get("k") is None
    cache.put("k", {"time": 1.0})
    cache.save()
    assert MeasurementCache(path).get("k") == {"time": 1.0}
