"""A loaded command stream: the thread count given at load, and one handle run from several threads at once."""

from __future__ import annotations

import threading

import numpy as np
from accel_ethosn import EthosnBackend
from accel_sdk.testing import random_inputs
from ethosn_graphs import qconv, qt, widen_avg

import accel
from accel.builder import GraphBuilder
from accel.executor import ReferenceExecutor
from accel.ir import Graph

RNG = np.random.default_rng(31)


def conv_pools() -> Graph:
    """conv → max pool → conv, an average pool and a mean beside: max pooling large enough to get
    the handle's threads, and every command kind with scratch (the mean's sums, the average pool's bands)."""
    b = GraphBuilder(x=qt((1, 16, 66, 66), scale=0.04, zp=120))
    y = qconv(b, b.x["x"], 32, rng=RNG, relu=True, out_scale=0.08)
    m = b.op("nn.max_pool2d", y, pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))
    z = qconv(b, m, 16, (1, 1), rng=RNG, out_scale=0.1)
    a = widen_avg(b, y, "nn.avg_pool2d", pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))
    mean = widen_avg(b, z, "mean", axis=(2, 3), keepdims=True)
    return b.done(z, a, mean)


def _artifact(graph: Graph):
    art = accel.compile(graph, target={"devices": [{"kind": "ethosn", "options": {"min_work": 1}}]})
    assert [b for _, b in art.partitions] == ["ethosn"], art.partitions
    assert "nn.max_pool2d" not in {n.op for n in art.report.host_nodes()}
    return art


def test_the_thread_count_given_at_load_is_the_count_used(monkeypatch):
    """executable(threads=N) / accel.load(path, threads=N) makes every handle with N threads; without it
    ACCEL_NUM_THREADS; the stream never fixes it."""
    art = _artifact(conv_pools())
    for n in (1, 2, 3):
        exe = art.executable(threads=n)
        assert exe.threads == n and {h.threads for h in exe.handles.values()} == {n}
    monkeypatch.setenv("ACCEL_NUM_THREADS", "3")
    assert {h.threads for h in art.executable().handles.values()} == {3}
    assert {h.threads for h in art.executable(threads=1).handles.values()} == {1}
    (region,) = [n for n in art.graph.nodes if n.op == "call"]
    assert EthosnBackend().runtime_module().Runtime(art.blobs[region.name], threads=2).threads == 2


def test_one_handle_from_several_threads_is_bit_exact():
    """Each run borrows its own arena, stream and scratch: 4 callers at once on one handle of 2 threads,
    every result bitwise the reference's."""
    graph = conv_pools()
    exe = _artifact(graph).executable(threads=2)
    assert {h.threads for h in exe.handles.values()} == {2}
    ref = ReferenceExecutor(graph)
    feeds = [random_inputs(graph, seed) for seed in range(4)]
    want = [ref.run(f) for f in feeds]
    errors: list[str] = []

    def work(i: int) -> None:
        for _ in range(8):
            got = exe.run(feeds[i])
            for k, v in want[i].items():
                if not np.array_equal(np.asarray(got[k]), np.asarray(v)):
                    errors.append(f"caller {i}: %{k} differs")

    callers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert not errors, errors[:3]
