"""A loaded command stream run from several threads at once (the kit checks the thread count given at load)."""

from __future__ import annotations

import numpy as np
from accel_sdk.testing import concurrent_mismatches, random_inputs
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


def test_one_handle_from_several_threads_is_bit_exact():
    """Each run borrows its own arena, stream and scratch: 4 callers at once on one handle of 2 threads,
    every result bitwise the reference's."""
    graph = conv_pools()
    exe = _artifact(graph).executable(threads=2)
    assert {h.threads for h in exe.handles.values()} == {2}
    ref = ReferenceExecutor(graph)
    feeds = [random_inputs(graph, seed) for seed in range(4)]
    errors = concurrent_mismatches(exe.run, feeds, [ref.run(f) for f in feeds])
    assert not errors, errors[:3]
