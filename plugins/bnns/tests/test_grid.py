"""Every bnns composite and op against accel's reference executor over grids of shapes, groups,
strides, dilations and paddings: relative error at most 1e-5."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from accel_bnns import BnnsBackend, _runtime

from accel.builder import GraphBuilder
from accel.errors import TypeInferenceError
from accel.executor import ReferenceExecutor
from accel.ir import Graph
from accel.partition import partition_graph

RTOL = 1e-5


def _w(rng: np.random.Generator, *shape: int, scale: float = 0.3) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def run_on_bnns(graph: Graph, composite: str | None = None, seed: int = 0) -> None:
    """Partition for bnns alone: everything must be taken, in one region; its runtime must match the reference."""
    result = partition_graph(graph, [BnnsBackend()])
    host = [n.op for n in result.report.nodes if n.backend == "host"]
    assert not host, f"left on the host: {host} ({[n.reasons for n in result.report.nodes if n.backend == 'host']})"
    (region,) = result.regions
    body = region.body
    if composite is not None:
        assert [n.attrs.get("composite") for n in body.nodes] == [f"bnns.{composite}"]
    rt = _runtime.Runtime(BnnsBackend().serialize(body))
    rng = np.random.default_rng(seed)
    feeds = {v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in body.inputs}
    want = ReferenceExecutor(body).run(feeds)
    outs = [np.full(v.type.shape, np.nan, np.float32) for v in body.outputs]
    rt.run([feeds[v.name] for v in body.inputs], outs)
    for v, got in zip(body.outputs, outs, strict=True):
        ref = want[v.name].astype(np.float64)
        scale = max(1.0, float(np.abs(ref).max()))
        err = np.abs(got - ref).max() / scale
        assert err <= RTOL, f"%{v.name}: relative error {err:.2e}"


# cin, cout, groups; (8, 8, 1): a plain conv whose weights read the same shape with O and I swapped
CONV_SHAPES = [(4, 8, 1), (6, 6, 3), (8, 8, 8), (3, 16, 1), (16, 12, 4), (8, 8, 1)]
KERNELS = [(1, 1), (3, 3), (5, 3)]
STRIDES = [(1, 1), (2, 2), (1, 2)]
DILATIONS = [(1, 1), (2, 1)]
PADDINGS = [(0, 0, 0, 0), (1, 1, 1, 1), (2, 0, 1, 3)]
EPILOGUES = {
    "conv2d_bias_act": ["bias_add+relu", "add_c11+sigmoid", "add_1c11+relu", "bias_add+relu6"],
    "conv2d_act": ["relu", "sigmoid", "clip"],
    "conv2d_bias": ["bias_add", "add_c11", "add_1c11"],
    "conv2d_batch_norm": ["batch_norm"],
    None: [""],
}
CONV_GRID = [
    (shape, k, s, d, p, composite, epilogue)
    for (shape, k, s, d, p), (composite, epilogue) in zip(
        itertools.product(CONV_SHAPES, KERNELS, STRIDES, DILATIONS, PADDINGS),
        itertools.cycle([(c, e) for c, es in EPILOGUES.items() for e in es]),
    )
][::3]


@pytest.mark.parametrize(("shape", "kernel", "strides", "dilation", "padding", "composite", "epilogue"), CONV_GRID)
def test_conv2d_grid(shape, kernel, strides, dilation, padding, composite, epilogue):
    cin, cout, groups = shape
    rng = np.random.default_rng(hash((shape, kernel, strides, dilation, padding)) % 2**32)
    b = GraphBuilder(x=(2, cin, 11, 9))
    attrs = {"strides": strides, "dilation": dilation, "padding": padding, "groups": groups}
    try:
        y = b.op("nn.conv2d", b.x["x"], b.const(_w(rng, cout, cin // groups, *kernel)), **attrs)
    except TypeInferenceError:
        pytest.skip("window larger than the padded input")
    for step in filter(None, epilogue.split("+")):
        if step == "bias_add":
            y = b.op("nn.bias_add", y, b.const(_w(rng, cout)))
        elif step == "add_c11":
            y = b.op("add", y, b.const(_w(rng, cout, 1, 1)))
        elif step == "add_1c11":
            y = b.op("add", b.const(_w(rng, 1, cout, 1, 1)), y)
        elif step == "batch_norm":
            var = np.abs(_w(rng, cout)) + 0.5
            params = [_w(rng, cout) + 1, _w(rng, cout), _w(rng, cout), var]
            y = b.op("nn.batch_norm", y, *(b.const(p) for p in params))
        elif step == "relu6":  # BNNS's clamp activation
            y = b.op("clip", y, a_min=0.0, a_max=6.0)
        elif step == "clip":
            y = b.op("clip", y, a_min=-1.0, a_max=0.5)
        else:
            y = b.op("nn.relu" if step == "relu" else "sigmoid", y)
    run_on_bnns(b.done(y), composite)


POOL_GRID = list(
    itertools.product(
        ["max", "avg", "avg_include"], [(2, 2), (3, 3), (3, 2)], [(1, 1), (2, 2), (2, 1)], [0, 1], [False, True]
    )
)


@pytest.mark.parametrize(("kind", "pool", "strides", "pad", "ceil"), POOL_GRID)
def test_pool2d_grid(kind, pool, strides, pad, ceil):
    b = GraphBuilder(x=(2, 5, 10, 7))
    op = "nn.max_pool2d" if kind == "max" else "nn.avg_pool2d"
    attrs = {"pool_size": pool, "strides": strides, "padding": (pad, pad, pad, pad), "ceil_mode": ceil}
    if kind != "max":
        attrs["count_include_pad"] = kind == "avg_include"
    y = b.op(op, b.x["x"], **attrs)
    graph = b.done(y)
    reason = BnnsBackend().check_op(graph.nodes[0])
    if reason is not None:
        assert kind == "avg_include" and ceil and "ceil_mode with count_include_pad" in reason
        return
    run_on_bnns(graph)


@pytest.mark.parametrize("dilation", [(2, 2), (1, 3)])
@pytest.mark.parametrize("kind", ["nn.max_pool2d", "nn.avg_pool2d"])
def test_dilated_pools(kind, dilation):
    b = GraphBuilder(x=(1, 3, 12, 13))
    run_on_bnns(b.done(b.op(kind, b.x["x"], pool_size=(2, 3), dilation=dilation, padding=(1, 1, 0, 1))))


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 7, 5), (1, 64, 14, 14)])
@pytest.mark.parametrize("op", ["nn.global_avg_pool2d", "nn.global_max_pool2d"])
def test_global_pools(op, shape):
    b = GraphBuilder(x=shape)
    run_on_bnns(b.done(b.op(op, b.x["x"])))


def _gelu_chain(b: GraphBuilder, x, cube: str, order: int):
    def c(v: float):
        return b.const(np.array(v, np.float32))

    x3 = b.op("power", x, c(3.0)) if cube == "power" else b.op("multiply", b.op("multiply", x, x), x)
    inner = b.op("add", b.op("multiply", c(0.044715), x3), x)
    t = b.op("tanh", b.op("multiply", c(math.sqrt(2 / math.pi)), inner))
    one_plus = b.op("add", c(1.0), t)
    if order == 0:
        return b.op("multiply", b.op("multiply", x, c(0.5)), one_plus)
    if order == 1:
        return b.op("multiply", c(0.5), b.op("multiply", one_plus, x))
    return b.op("multiply", x, b.op("multiply", one_plus, c(0.5)))


DENSE_GRID = list(
    itertools.product(
        [(1, 7), (4, 64), (2, 3, 33)],
        [1, 5, 48],
        ["none", "bias_add", "add", "gelu_chain_power", "gelu_chain_cube", "gelu_tanh", "gelu_erf"],
    )
)


@pytest.mark.parametrize(("shape", "n", "epilogue"), DENSE_GRID)
def test_dense_grid(shape, n, epilogue):
    rng = np.random.default_rng(len(shape) * 1000 + n)
    b = GraphBuilder(x=shape)
    y = b.op("nn.dense", b.x["x"], b.const(_w(rng, n, shape[-1])))
    composite = None
    if epilogue == "bias_add":
        y = b.op("nn.bias_add", y, b.const(_w(rng, n)), axis=len(shape) - 1)
        composite = "dense_bias"
    elif epilogue != "none":
        y = b.op("add", y, b.const(_w(rng, n)))
        composite = "dense_bias"
    if epilogue.startswith("gelu_chain"):
        y = _gelu_chain(b, y, epilogue.rsplit("_", 1)[1], n % 3)
        composite = "dense_bias_gelu"
    elif epilogue.startswith("gelu_"):
        y = b.op("nn.gelu", y, approximate="tanh" if epilogue == "gelu_tanh" else "none")
        composite = "dense_bias_gelu"
    run_on_bnns(b.done(y), composite)


def test_gelu_matches_the_reference_tanh_form_over_a_wide_range():
    """GELU (tanh form) of values from -12 to 12, through an identity dense: within 1e-5 of the reference."""
    x = np.linspace(-12, 12, 4001, dtype=np.float32).reshape(1, -1, 1)
    b = GraphBuilder(x=x.shape)
    y = b.op("add", b.op("nn.dense", b.x["x"], b.const(np.ones((1, 1), np.float32))), b.const(np.zeros(1, np.float32)))
    graph = b.done(_gelu_chain(b, y, "power", 0))
    (region,) = partition_graph(graph, [BnnsBackend()]).regions
    rt = _runtime.Runtime(BnnsBackend().serialize(region.body))
    got = np.empty(x.shape, np.float32)
    rt.run([x], [got])
    want = ReferenceExecutor(graph).run({"x": x})[graph.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


BMM_GRID = list(
    itertools.product([(3, 3), (1, 4), (4, 1)], [(5, 7, 6), (1, 16, 1), (17, 33, 9)], [False, True], [False, True])
)


@pytest.mark.parametrize(("batches", "mkn", "ta", "tb"), BMM_GRID)
def test_batch_matmul_grid(batches, mkn, ta, tb):
    (ba, bb), (m, k, n) = batches, mkn
    b = GraphBuilder(a=(ba, k, m) if ta else (ba, m, k), c=(bb, n, k) if tb else (bb, k, n))
    run_on_bnns(b.done(b.op("nn.batch_matmul", b.x["a"], b.x["c"], transpose_a=ta, transpose_b=tb)))


def test_batch_matmul_with_a_constant_operand():
    rng = np.random.default_rng(3)
    b = GraphBuilder(a=(2, 5, 8))
    run_on_bnns(b.done(b.op("nn.batch_matmul", b.x["a"], b.const(_w(rng, 1, 6, 8)))))


@pytest.mark.parametrize("shape", [(1, 3, 10), (2, 4, 6, 5), (1, 32, 16, 16), (3, 1, 1, 7), (2, 5, 1)])
@pytest.mark.parametrize("epsilon", [1e-5, 1e-2])
def test_instance_norm_grid(shape, epsilon):
    rng = np.random.default_rng(shape[1])
    c = shape[1]
    b = GraphBuilder(x=shape)
    y = b.op("nn.instance_norm", b.x["x"], b.const(_w(rng, c) + 1), b.const(_w(rng, c)), epsilon=epsilon)
    run_on_bnns(b.done(y))


def test_conv_chain_pool_norm_in_one_region():
    """Formats chosen by the primitives flow between them; one reorder at each end."""
    rng = np.random.default_rng(5)
    b = GraphBuilder(x=(1, 3, 32, 32))
    y = b.op("nn.conv2d", b.x["x"], b.const(_w(rng, 16, 3, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(_w(rng, 16))))
    y = b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2))
    y = b.op("nn.conv2d", y, b.const(_w(rng, 32, 16, 3, 3)), padding=(1, 1, 1, 1), strides=(2, 2))
    y = b.op("nn.conv2d", y, b.const(_w(rng, 32, 1, 3, 3)), padding=(1, 1, 1, 1), groups=32)
    y = b.op("nn.instance_norm", y, b.const(_w(rng, 32) + 1), b.const(_w(rng, 32)))
    y = b.op("nn.avg_pool2d", y, pool_size=(3, 3), padding=(1, 1, 1, 1))
    run_on_bnns(b.done(y, b.op("nn.global_avg_pool2d", y)))


@pytest.mark.parametrize("offset", [10.0, 50.0])
def test_instance_norm_of_data_far_from_zero(offset):
    """Rows whose mean is many times their spread: statistics as accurate as the reference's."""
    shape = (2, 4, 32, 32)
    b = GraphBuilder(x=shape)
    g = b.done(b.op("nn.instance_norm", b.x["x"], b.const(np.ones(4, np.float32)), b.const(np.zeros(4, np.float32))))
    (region,) = partition_graph(g, [BnnsBackend()]).regions
    rt = _runtime.Runtime(BnnsBackend().serialize(region.body))
    x = (offset + np.random.default_rng(1).standard_normal(shape)).astype(np.float32)
    got = np.empty(shape, np.float32)
    rt.run([x], [got])
    want = ReferenceExecutor(g).run({"x": x})[g.outputs[0].name]
    assert np.abs(got - want).max() <= 1e-5


CHAIN = """
import sys
import numpy as np
from accel.builder import GraphBuilder
from accel.partition import partition_graph
from accel_bnns import BnnsBackend, _runtime

rng = np.random.default_rng(0)
b = GraphBuilder(x=(1, 16, 28, 28))
y = b.x["x"]
for _ in range(3):
    y = b.op("nn.conv2d", y, b.const(rng.standard_normal((16, 16, 3, 3)).astype(np.float32)), padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(np.zeros(16, np.float32))))
y = b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2))
(region,) = partition_graph(b.done(y), [BnnsBackend()]).regions
rt = _runtime.Runtime(BnnsBackend().serialize(region.body), threads=int(sys.argv[1]))
x = rng.standard_normal((1, 16, 28, 28)).astype(np.float32)
out = np.empty((1, 16, 14, 14), np.float32)
rt.run([x], [out])
print("RUN", flush=True)
rt.run([x], [out])
np.save(sys.argv[2], out)
"""


def test_a_chain_reorders_only_at_its_entry_and_exit(tmp_path):
    """Three convolutions and a pool in the formats oneDNN chose: one reorder in, one out (oneDNN's log).
    On two threads the chain is NHWC and each convolution two bands, one a thread of accel_sdk's
    pool: still one reorder in and one out, and the one-thread result."""
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    results = []
    for threads, convs in ((1, 3), (2, 6)):
        saved = tmp_path / f"{threads}.npy"
        out = subprocess.run(
            [sys.executable, "-c", CHAIN, str(threads), str(saved)], env=env, capture_output=True, text=True, check=True
        ).stdout
        run = out.split("RUN\n", 1)[1].splitlines()
        kinds = [line.split(",")[3] for line in run if line.startswith("onednn_verbose,") and ",exec," in line]
        assert kinds.count("convolution") == convs and kinds.count("pooling") == 1
        assert kinds.count("reorder") <= 2, kinds
        results.append(np.load(saved))
    scale = float(np.abs(results[0]).max())
    assert float(np.abs(results[1] - results[0]).max()) <= 1e-5 * scale


def test_values_read_late_survive_the_arena_reuse():
    """Intermediates share arena memory once dead; one read many steps later must still see its data."""
    rng = np.random.default_rng(9)
    b = GraphBuilder(x=(1, 8, 20, 20))
    y1 = b.op("nn.relu", b.op("nn.conv2d", b.x["x"], b.const(_w(rng, 8, 8, 3, 3)), padding=(1, 1, 1, 1)))
    y = y1
    mids = []
    for _ in range(4):
        y = b.op("sigmoid", b.op("nn.conv2d", y, b.const(_w(rng, 8, 8, 3, 3)), padding=(1, 1, 1, 1)))
        mids.append(y)
    late = b.op("nn.max_pool2d", y1, pool_size=(2, 2), strides=(2, 2))
    norm = b.op("nn.instance_norm", mids[1], b.const(_w(rng, 8) + 1), b.const(_w(rng, 8)))
    run_on_bnns(b.done(y, late, b.op("nn.global_avg_pool2d", mids[0]), norm))


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4, 5), (1, 24, 9, 9), (1, 2, 3, 1, 2, 3)])
@pytest.mark.parametrize("relu", [False, True])
def test_add_grid(shape, relu):
    b = GraphBuilder(x=shape, y=shape)
    y = b.op("add", b.x["x"], b.x["y"])
    run_on_bnns(b.done(b.op("nn.relu", y) if relu else y), "add_relu" if relu else None)


def test_add_relu_keeps_nan_and_negative_zero_as_the_reference():
    """After a conv (a blocked format, 24 channels padded to the block): NaN stays NaN, -0.0 stays -0.0."""
    rng = np.random.default_rng(3)
    b = GraphBuilder(x=(1, 24, 6, 6), r=(1, 24, 6, 6))
    y = b.op("nn.conv2d", b.x["x"], b.const(_w(rng, 24, 24, 1, 1)))
    g = b.done(b.op("nn.relu", b.op("add", y, b.x["r"])))
    (region,) = partition_graph(g, [BnnsBackend()]).regions
    rt = _runtime.Runtime(BnnsBackend().serialize(region.body))
    x = rng.standard_normal((1, 24, 6, 6)).astype(np.float32)
    r = rng.standard_normal((1, 24, 6, 6)).astype(np.float32)
    r[0, 3, 2, 2] = np.nan
    r[0, 23, 5, 5] = np.inf
    got = np.empty((1, 24, 6, 6), np.float32)
    rt.run([x, r], [got])
    want = ReferenceExecutor(g).run({"x": x, "r": r})[g.outputs[0].name]
    assert np.isnan(got[0, 3, 2, 2]) and np.isnan(want[0, 3, 2, 2])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # -0.0: the add of 0.0 and -0.0 is 0.0; (-0.0) + (-0.0) is -0.0, which relu keeps
    b = GraphBuilder(x=(1, 4, 2, 2), y=(1, 4, 2, 2))
    g = b.done(b.op("nn.relu", b.op("add", b.x["x"], b.x["y"])))
    (region,) = partition_graph(g, [BnnsBackend()]).regions
    rt = _runtime.Runtime(BnnsBackend().serialize(region.body))
    z = np.full((1, 4, 2, 2), -0.0, np.float32)
    got = np.empty_like(z)
    rt.run([z, z], [got])
    want = ReferenceExecutor(g).run({"x": z, "y": z})[g.outputs[0].name]
    assert np.array_equal(np.signbit(got), np.signbit(want))
