"""The thread count chosen at load, blobs written before it was, and one loaded blob shared by threads."""

from __future__ import annotations

import threading

import numpy as np
from accel_bnns import BnnsBackend, _runtime
from accel_bnns.serializer import HEADER_SIZE
from accel_sdk.testing import edge_values, float_mismatch

import accel
from accel.builder import GraphBuilder
from accel.executor import ReferenceExecutor
from accel.ir import Graph
from accel.partition import partition_graph

RNG = np.random.default_rng(5)


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def network() -> Graph:
    """Every bnns kernel: conv + bias + relu, a max pool on the conv's own format, conv + sigmoid
    (fused activations: NaN kept by the second pass), a global pool and an instance norm; dense + GELU."""
    b = GraphBuilder(x=(1, 8, 16, 16), t=(2, 6, 32))
    y = b.op("nn.conv2d", b.x["x"], b.const(_w(16, 8, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(_w(16))))
    y = b.op("nn.max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    y = b.op("sigmoid", b.op("nn.conv2d", y, b.const(_w(16, 16, 1, 1))))
    pooled = b.op("nn.global_max_pool2d", y)
    norm = b.op("nn.instance_norm", y, b.const(_w(16) + 1), b.const(_w(16)))
    d = b.op("nn.gelu", b.op("nn.bias_add", b.op("nn.dense", b.x["t"], b.const(_w(24, 32))), b.const(_w(24)), axis=2))
    return b.done(y, pooled, norm, d)


def with_edges(shape: tuple[int, ...], seed: int, *, nan_only: bool = False) -> np.ndarray:
    """Normal values with NaN, +Inf, -Inf and values near float32's largest scattered through (or NaN only)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    for value in (np.nan,) if nan_only else (np.nan, np.inf, -np.inf, 3e38):
        flat[rng.choice(flat.size, size=max(1, flat.size // 200), replace=False)] = value
    return x


def test_the_thread_count_given_at_load_is_the_count_used(monkeypatch):
    """executable(threads=N) makes every handle with N threads; without it ACCEL_NUM_THREADS; the old
    target option num_threads changes nothing."""
    graph = network()
    artifact = accel.compile(graph, "bnns")
    for n in (1, 2, 3):
        exe = artifact.executable(threads=n)
        assert exe.threads == n and {h.threads for h in exe.handles.values()} == {n}
    monkeypatch.setenv("ACCEL_NUM_THREADS", "3")
    assert {h.threads for h in artifact.executable().handles.values()} == {3}
    assert {h.threads for h in artifact.executable(threads=1).handles.values()} == {1}
    old = accel.compile(graph, target={"devices": [{"kind": "bnns", "options": {"num_threads": 2}}]})
    assert {h.threads for h in old.executable().handles.values()} == {3}
    assert {h.threads for h in old.executable(threads=1).handles.values()} == {1}


def test_a_blob_with_a_thread_count_in_its_header_still_loads():
    """Blobs written when the count was a target option carry it in the header: read, checked, ignored."""
    for region in partition_graph(network(), [BnnsBackend()]).regions:
        new = BnnsBackend().serialize(region.body)
        assert new[8:12] == bytes(4)
        old = new[:8] + (7).to_bytes(4, "little") + new[12:]
        assert len(old) == len(new) and new[HEADER_SIZE:] == old[HEADER_SIZE:]
        feeds = [with_edges(v.type.shape, 1) for v in region.body.inputs]
        outs = []
        for blob in (old, new):
            rt = _runtime.Runtime(blob, threads=2)
            assert rt.threads == 2
            y = [np.empty(v.type.shape, np.float32) for v in region.body.outputs]
            rt.run(feeds, y)
            outs.append(y)
        for a, b in zip(*outs):
            assert a.tobytes() == b.tobytes()


def _outputs(body: Graph) -> list[np.ndarray]:
    return [np.full(v.type.shape, 7.0, np.float32) for v in body.outputs]


def _run_in_threads(rt, body: Graph, feeds: list, callers: int, runs: int) -> list:
    """Each caller's (feed index, outputs) of ``runs`` calls on one handle, started together, or its exception."""
    results: list = [None] * callers
    start = threading.Barrier(callers)

    def worker(i: int) -> None:
        try:
            start.wait()
            got = []
            for k in range(runs):
                which = (i + k) % len(feeds)
                y = _outputs(body)
                rt.run(feeds[which], y)
                got.append((which, y))
            results[i] = got
        except BaseException as exc:  # reported by the caller
            results[i] = exc

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(callers)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return results


def test_one_handle_from_several_threads_with_nan_and_inf():
    """Four callers at once on one handle of two threads, inputs holding NaN, infinities and huge values:
    every result is the one a lone call gives, bit for bit. With NaN in the inputs, the NaNs of the
    results are where the reference has them."""
    for region in partition_graph(network(), [BnnsBackend()]).regions:
        body = region.body
        rt = _runtime.Runtime(BnnsBackend().serialize(body), threads=2)
        for seed in range(4):
            f = [with_edges(v.type.shape, seed, nan_only=True) for v in body.inputs]
            y = _outputs(body)
            rt.run(f, y)
            with np.errstate(all="ignore"):
                want = ReferenceExecutor(body).run_positional(f)
            for got, ref in zip(y, want):
                np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        feeds = [[with_edges(v.type.shape, seed) for v in body.inputs] for seed in range(4)]
        alone = []
        for f in feeds:
            y = _outputs(body)
            rt.run(f, y)
            alone.append(y)
        for r in _run_in_threads(rt, body, feeds, callers=4, runs=12):
            assert not isinstance(r, BaseException), r
            for which, y in r:
                for a, b in zip(y, alone[which]):
                    assert a.tobytes() == b.tobytes()


def test_a_clamp_chain_skips_only_the_checks_it_may():
    """A convolution whose input is a clamp (ReLU6) or sigmoid convolution's output skips its NaN read when
    that convolution's own read found nothing this run; NaN, ±Inf and huge inputs still reach every layer as
    the reference computes them. 20 channels: oneDNN's blocked formats pad them."""
    b = GraphBuilder(x=(1, 20, 12, 12))
    y = b.op("nn.conv2d", b.x["x"], b.const(_w(20, 20, 1, 1)))
    y = b.op("clip", b.op("nn.bias_add", y, b.const(_w(20))), a_min=0.0, a_max=6.0)
    y = b.op("nn.conv2d", y, b.const(_w(20, 1, 3, 3)), padding=(1, 1, 1, 1), groups=20)
    y = b.op("sigmoid", b.op("nn.bias_add", y, b.const(_w(20))))
    y = b.op("nn.relu", b.op("nn.conv2d", y, b.const(_w(8, 20, 1, 1))))
    graph = b.done(y)
    exe = accel.compile(graph, ["bnns"]).executable(threads=1)
    assert len(exe.handles) == 1
    for kind in ("normal", "edges", "huge"):
        x = np.random.default_rng(5).standard_normal((1, 20, 12, 12)).astype(np.float32)
        if kind == "edges":
            x = edge_values(x)  # NaN, ±Inf, ±0, denormals
        if kind == "huge":
            x.reshape(-1)[::41] = 3e37
        for _ in range(2):  # each run starts with fresh flags
            got = exe.run({"x": x})[graph.outputs[0].name]
            want = ReferenceExecutor(graph).run({"x": x})[graph.outputs[0].name]
            assert kind != "edges" or np.isnan(want).any()
            assert float_mismatch(got, want) is None, (kind, float_mismatch(got, want))
