"""Each composite and op over a grid of shapes, windows, scales and dtypes: the runtime bitwise equal to the reference.

``ETHOSN_GRID_ISA`` is set when test_forced_isa re-runs this file in a subprocess under ``ONEDNN_MAX_CPU_ISA``.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from accel_ethosn import EthosnBackend, EthosnOptions, _runtime
from accel_sdk.testing import random_inputs
from ethosn_graphs import dq_act_q, qconv, qdense, qt, widen_avg

from accel.builder import GraphBuilder
from accel.executor import ReferenceExecutor
from accel.ir import QuantParams
from accel.partition import partition_graph

RNG = np.random.default_rng(11)
BACKEND = EthosnBackend(EthosnOptions(min_work=1))


def check(graph, expect_ops: set[str], seed: int = 0, threads: int = 0) -> None:
    """Every region: loaded once (on ``threads``; 0: every core), run on seeded inputs, bitwise the
    reference; ``expect_ops`` all offloaded."""
    result = partition_graph(graph, [BACKEND])
    taken = set()
    for region in result.regions:
        body = region.body
        assert body is not None
        taken |= {n.attrs.get("composite", n.op) for n in body.nodes}
        rt = _runtime.Runtime(BACKEND.serialize(body), threads)
        feeds = random_inputs(body, seed)
        ins = [np.ascontiguousarray(feeds[v.name]) for v in body.inputs]
        outs = [np.full(v.type.shape, 0x5A, v.type.dtype) for v in body.outputs]
        rt.run(ins, outs)
        want = ReferenceExecutor(body).run_positional(ins)
        for got, ref in zip(outs, want, strict=True):
            np.testing.assert_array_equal(got, ref)
    missing = expect_ops - taken
    assert not missing, f"not offloaded: {missing}; host: {[(n.op, n.reasons) for n in result.report.host_nodes()]}"


def grid(*axes):
    return list(itertools.product(*axes))


CONV_GRID = grid(
    ("uint8", "int8"),
    ((1, 1), (3, 3), (5, 3)),
    ((1, 1), (2, 2), (2, 1)),
    ((0, 0, 0, 0), (1, 2, 2, 0)),
    (False, True),  # depthwise
    (True, False),  # per-channel weight scales
)


@pytest.mark.parametrize(("dtype", "kernel", "strides", "padding", "depthwise", "per_channel"), CONV_GRID)
def test_conv2d(dtype, kernel, strides, padding, depthwise, per_channel):
    c = 6
    b = GraphBuilder(x=qt((1, c, 9, 10), dtype, 0.04, 7 if dtype == "int8" else 121))
    x = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))  # NHWC from here
    y = qconv(
        b,
        x,
        c if depthwise else 10,
        kernel,
        rng=RNG,
        strides=strides,
        padding=padding,
        groups=c if depthwise else 1,
        per_channel=per_channel,
        relu=padding[0] == 1,
        out_scale=0.08,
    )
    check(b.done(y), {"ethosn.qnn_conv2d"})


@pytest.mark.parametrize(("dtype", "relu", "units"), grid(("uint8", "int8"), (False, True), (1, 7, 33)))
def test_fully_connected(dtype, relu, units):
    b = GraphBuilder(x=qt((1, 40), dtype, 0.03))
    check(b.done(qdense(b, b.x["x"], units, rng=RNG, relu=relu)), {"ethosn.qnn_fc"})


@pytest.mark.parametrize(
    ("dtype", "pool", "strides", "padding", "ceil"),
    grid(("uint8", "int8"), ((2, 2), (3, 3), (3, 2)), ((1, 1), (2, 2)), ((0, 0, 0, 0), (1, 1, 1, 1)), (False, True)),
)
def test_pools(dtype, pool, strides, padding, ceil):
    b = GraphBuilder(x=qt((1, 5, 11, 10), dtype, 0.05))
    x = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))
    m = b.op("nn.max_pool2d", x, pool_size=pool, strides=strides, padding=padding, ceil_mode=ceil)
    kw = {"pool_size": pool, "strides": strides, "padding": padding, "ceil_mode": ceil}
    a = widen_avg(b, x, "nn.avg_pool2d", count_include_pad=ceil, **kw)
    check(b.done(m, a), {"nn.max_pool2d", "ethosn.qnn_avg_pool2d"})


@pytest.mark.parametrize(("dtype", "shape"), grid(("uint8", "int8"), ((1, 3, 4, 5), (1, 16, 7, 7), (1, 1, 1, 9))))
def test_mean_and_add(dtype, shape):
    lo = 0 if dtype == "uint8" else -128
    b = GraphBuilder(x=qt(shape, dtype, 0.05, lo + 30), z=qt(shape, dtype, 0.11, lo + 200))
    x = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))
    z = b.op("nn.max_pool2d", b.x["z"], pool_size=(1, 1))
    mean = widen_avg(b, x, "mean", axis=(2, 3), keepdims=True)
    add = b.op("qnn.add", x, z, out_scale=0.07, out_zero_point=lo + 100)
    check(b.done(mean, add), {"ethosn.qnn_mean", "ethosn.qnn_add"})


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("widen_scale", [1 / 8, 0.37, 1.0])
def test_mean_widened_by_requantize(dtype, widen_scale):
    """A mean widened by a requantize to int32: with a power-of-two scale the widening is affine in the
    input (the runtime sums the inputs and scales the sums), with 0.37 it rounds (each byte looked up)."""
    lo = 0 if dtype == "uint8" else -128
    b = GraphBuilder(x=qt((1, 40, 9, 7), dtype, 0.05, lo + 90))
    x = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))
    wide = b.op("qnn.requantize", x, out_scale=0.05 * widen_scale, out_zero_point=0, out_dtype="int32")
    mean = b.op("mean", wide, axis=(2, 3), keepdims=True)
    y = b.op("qnn.requantize", mean, out_scale=0.03, out_zero_point=lo + 20, out_dtype=dtype)
    check(b.done(y), {"ethosn.qnn_mean"})


@pytest.mark.parametrize("threads", [1, 2])
def test_large_add_in_shares(threads):
    """An add of more than 2^15 elements runs in shares on the handle's threads (one share on one)."""
    b = GraphBuilder(x=qt((1, 24, 56, 57), "uint8", 0.05, 30), z=qt((1, 24, 56, 57), "uint8", 0.11, 200))
    x = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))
    z = b.op("nn.max_pool2d", b.x["z"], pool_size=(1, 1))
    add = b.op("qnn.add", x, z, out_scale=0.07, out_zero_point=100)
    check(b.done(add), {"ethosn.qnn_add"}, threads=threads)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_tables(dtype):
    lo = 0 if dtype == "uint8" else -128
    b = GraphBuilder(x=qt((1, 4, 6, 6), dtype, 0.06, lo + 140))
    x = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))
    outs = [
        dq_act_q(b, x, "sigmoid", 1 / 256, lo),
        dq_act_q(b, x, "tanh", 0.0078125, lo + 128),
        dq_act_q(b, x, "nn.leaky_relu", 0.04, lo + 90, alpha=0.1),
        b.op("qnn.requantize", x, out_scale=0.02, out_zero_point=lo + 3, out_dtype=dtype),
        b.op("clip", x, a_min=float(lo + 100), a_max=float(lo + 180)),
        b.op(
            "qnn.add",
            x,
            b.const(RNG.integers(lo, lo + 255, (1, 4, 1, 1)).astype(dtype), QuantParams(0.03, lo + 9)),
            out_scale=0.05,
            out_zero_point=lo + 60,
        ),
        b.op(
            "qnn.mul",
            x,
            b.const(np.array(lo + 77, dtype), QuantParams(0.02, lo + 5)),
            out_scale=0.08,
            out_zero_point=lo + 50,
        ),
    ]
    check(
        b.done(*outs),
        {
            "ethosn.qnn_sigmoid",
            "ethosn.qnn_tanh",
            "ethosn.qnn_leaky_relu",
            "qnn.requantize",
            "clip",
            "qnn.add",
            "qnn.mul",
        },
    )


@pytest.mark.parametrize(
    ("dtype", "strides", "padding"),
    grid(("uint8", "int8"), ((1, 1), (2, 2)), ((0, 0, 0, 0), (1, 0, 1, 1))),
)
def test_conv2d_transpose(dtype, strides, padding):
    b = GraphBuilder(x=qt((1, 6, 5, 7), dtype, 0.05))
    x = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))
    w = RNG.integers(-127, 127, (6, 4, 3, 3)).astype(np.int8)
    y = b.op("qnn.conv2d_transpose", x, b.const(w, QuantParams(0.02, 0)), strides=strides, padding=padding)
    y = b.op("qnn.requantize", y, out_scale=0.3, out_zero_point=3, out_dtype=dtype)
    check(b.done(y), {"ethosn.qnn_conv2d_transpose"})


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_moves(dtype):
    b = GraphBuilder(x=qt((1, 8, 4, 6), dtype, 0.05), z=qt((1, 4, 4, 6), dtype, 0.09))
    x = b.op("nn.max_pool2d", b.x["x"], pool_size=(1, 1))
    z = b.op("nn.max_pool2d", b.x["z"], pool_size=(1, 1))
    cat = b.op("qnn.concatenate", x, z, axis=1, out_scale=0.06, out_zero_point=0)
    a, c = b.op("split", cat, indices_or_sections=(5,), axis=1)
    d = b.op("nn.depth_to_space", x, block_size=2, mode="DCR")
    r = b.op("image.resize2d", z, size=(7, 12), method="nearest_neighbor")
    check(b.done(a, c, d, r), {"qnn.concatenate", "split", "nn.depth_to_space", "ethosn.qnn_resize"})


@pytest.mark.skipif(bool(os.environ.get("ETHOSN_GRID_ISA")), reason="already in the forced-ISA run")
@pytest.mark.parametrize("isa", ["SSE41", "AVX2"])
def test_forced_isa(isa):
    """The convolution grid again with oneDNN held to an ISA without VNNI (its int8 kernels would saturate)."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": isa, "ETHOSN_GRID_ISA": isa}
    here = Path(__file__)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(here), "-k", "conv or fully", "-x"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=here.parent, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
