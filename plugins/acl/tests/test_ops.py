"""Every composite and op of acl's table against accel's reference, over a grid of shapes, strides,
paddings, dtypes and scales (float32 within 1e-5; quantized bit-exact). test_forced_isa reruns this
module with oneDNN limited to AVX2 (no AVX-512, no VNNI), the other kind of machine acl runs on."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import acl_cases as cases
import numpy as np
import pytest
from accel_acl import AclBackend
from accel_acl.serializer import serialize
from acl_cases import qtype
from acl_helpers import check, compiled, host_ops, inputs_for

from accel.builder import GraphBuilder
from accel.executor import ReferenceExecutor
from accel.ir import Graph, Node, TensorType, Value
from accel.runtime import create_handle

CONVS = [
    # shape, out, kernel, strides, padding, dilation, groups, act, pad
    ((1, 8, 12, 11), 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "relu", None),
    ((1, 3, 17, 15), 8, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1, None, None),
    ((1, 16, 9, 9), 24, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, "relu6", None),
    ((1, 8, 10, 13), 8, (3, 2), (2, 1), (0, 2, 1, 0), (2, 3), 1, "bounded", (1, 0, 0, 2)),
    ((1, 12, 11, 10), 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 12, "relu6", None),
    ((1, 12, 11, 10), 12, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 12, None, (0, 0, 1, 1)),
    ((1, 16, 13, 12), 16, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 16, "relu", None),
    ((1, 16, 13, 12), 16, (5, 5), (2, 2), (2, 1, 2, 1), (1, 1), 16, None, None),
    ((4, 8, 12, 11), 16, (3, 3), (2, 1), (1, 1, 1, 1), (1, 1), 1, "relu", None),  # a batch of 4
    ((2, 12, 11, 10), 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 12, None, None),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("shape", "out", "kernel", "strides", "padding", "dilation", "groups", "act", "pad"), CONVS)
def test_conv2d_fp32(shape, out, kernel, strides, padding, dilation, groups, act, pad, bias):
    g = cases.conv_fp32(
        shape,
        out,
        kernel,
        strides=strides,
        padding=padding,
        dilation=dilation,
        groups=groups,
        bias=bias,
        act=act,
        pad=pad,
    )
    check(g)


QCONVS = [
    # shape, out, kernel, strides, padding, dilation, groups, pad
    ((1, 8, 10, 9), 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, None),
    ((1, 3, 17, 15), 16, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1, None),
    ((1, 32, 7, 6), 40, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, None),
    ((1, 64, 6, 6), 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, None),  # sums past 2^24 / 255 per part
    ((1, 8, 10, 13), 8, (3, 2), (2, 1), (0, 2, 1, 0), (2, 3), 1, (1, 0, 0, 2)),
    ((1, 12, 11, 10), 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 12, None),
    ((1, 12, 11, 10), 12, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 12, (0, 0, 1, 1)),
    ((3, 32, 7, 6), 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, None),  # a batch of 3
    ((2, 12, 11, 10), 12, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 12, None),
    ((1, 16, 13, 12), 16, (5, 5), (2, 2), (2, 1, 2, 1), (1, 1), 16, None),
]


@pytest.mark.parametrize(("dtype", "per_channel", "relu"), [("uint8", True, False), ("int8", False, True)])
@pytest.mark.parametrize(("shape", "out", "kernel", "strides", "padding", "dilation", "groups", "pad"), QCONVS)
def test_qnn_conv2d(shape, out, kernel, strides, padding, dilation, groups, pad, dtype, per_channel, relu):
    g = cases.qnn_conv(
        shape,
        out,
        kernel,
        dtype=dtype,
        per_channel=per_channel,
        strides=strides,
        padding=padding,
        dilation=dilation,
        groups=groups,
        relu=relu,
        pad=pad,
    )
    check(g)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("per_channel", [True, False])
def test_qnn_dense(dtype, per_channel):
    check(cases.qnn_dense(dtype, per_channel))


def test_network_fp32():
    check(cases.network_fp32())


def test_l2_pool():
    check(cases.l2_pool())


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qnn_ops(dtype):
    check(cases.qnn_network(dtype, conv=False))
    check(cases.qnn_network(dtype))


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("widen_scale", [1 / 8, 0.37])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_widened_average_pools(dtype, widen_scale, shared):
    """An 8-bit tensor widened to int32 by a requantize, averaged, narrowed back: when only the pool
    reads the widened tensor it reads the 8-bit one itself (summing bytes when the widening is
    affine, a power-of-two scale; through the table with 0.37); read twice, the requantize runs."""
    lo = 0 if dtype == "uint8" else -128
    b = GraphBuilder(x=qtype((1, 9, 11, 16), dtype, 0.05, lo + 90))
    wide = b.op("qnn.requantize", b.x["x"], out_scale=0.05 * widen_scale, out_zero_point=0, out_dtype="int32")
    pool = {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1), "layout": "NHWC"}
    avg = b.op("nn.avg_pool2d", wide, count_include_pad=True, **pool)
    outs = [b.op("qnn.requantize", avg, out_scale=0.04, out_zero_point=lo + 20, out_dtype=dtype)]
    if shared:
        glob = b.op("nn.global_avg_pool2d", wide, layout="NHWC")
        outs.append(b.op("qnn.requantize", glob, out_scale=0.03, out_zero_point=lo + 10, out_dtype=dtype))
    graph = b.done(*outs)
    assert not host_ops(graph), host_ops(graph)
    check(graph)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_large_qnn_add_in_ranges(dtype, threads):
    """A qnn.add of more than 2^15 elements runs in ranges on the handle's threads (one on one)."""
    lo = 0 if dtype == "uint8" else -128
    b = GraphBuilder(x=qtype((1, 24, 56, 57), dtype, 0.05, lo + 30), y=qtype((1, 24, 56, 57), dtype, 0.11, lo + 200))
    graph = b.done(b.op("qnn.add", b.x["x"], b.x["y"], out_scale=0.07, out_zero_point=lo + 100))
    feed = inputs_for(graph)
    artifact = compiled(graph)
    assert [backend for _, backend in artifact.partitions] == ["acl"]
    got = artifact.executable(threads=threads).run(feed)
    want = ReferenceExecutor(graph).run(feed)
    name = graph.outputs[0].name
    np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("per_axis", [False, True])
@pytest.mark.parametrize("out_dtype", ["uint8", "int8", "int32"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_byte_requantize(dtype, out_dtype, per_axis):
    check(cases.byte_requantize(dtype, out_dtype, per_axis))


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_quantized_head(dtype):
    """Dequantize, dense and softmax run in acl's partition; logits far past exp's range too."""
    for scale in (0.07, 0.9):
        graph = cases.quantized_head(dtype, scale)
        assert not host_ops(graph), host_ops(graph)
        check(graph)


def test_softmax_rows_without_a_number():
    """Rows the reference makes all NaN (a NaN, a +Inf, only -Inf) come out NaN; a -Inf among numbers
    gives 0 there; a row of one repeated value is uniform."""
    inf, nan = np.inf, np.nan
    rows = np.array(
        [
            [1.0, nan, 2.0, 0.5],
            [1.0, 2.0, inf, -1.0],
            [-inf, -inf, -inf, -inf],
            [-inf, 3.0, -inf, 1.0],
            [88.0, 90.0, -90.0, 0.0],
            [7.0, 7.0, 7.0, 7.0],
        ],
        np.float32,
    )
    graph = cases.softmax_fp32(rows.shape)
    got = compiled(graph).executable().run({"x": rows})
    want = ReferenceExecutor(graph).run({"x": rows})
    (name,) = want
    np.testing.assert_array_equal(np.isnan(got[name]), np.isnan(want[name]))
    assert np.isnan(got[name][:3]).all() and not np.isnan(got[name][3:]).any()
    np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-7)


def _rerun(env: dict[str, str], select: str) -> None:
    here = Path(__file__).parent
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__)), "-k", select],
        cwd=here,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.skipif(os.environ.get("ONEDNN_MAX_CPU_ISA") is not None, reason="already running with a forced ISA")
@pytest.mark.skipif(
    not AclBackend().kernel_library().startswith("oneDNN"), reason="oneDNN's ISA levels: the x86-64 build"
)
def test_forced_isa():
    """This module again with ONEDNN_MAX_CPU_ISA=AVX2: the kernels a CPU without AVX-512 and VNNI runs
    (there accel-sdk's IntConv splits int8 weights into parts, or takes its exact float32 path)."""
    _rerun({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "not forced_isa")


@pytest.mark.parametrize("dtype", ["float32", "uint8", "int8", "int32"])
def test_transpose_kernel_every_permutation(dtype):
    """The transpose kernel (a oneDNN reorder; NEPermute on Arm) against numpy, for every permutation of
    2, 3 and 4 axes: what the partitioner puts first in a region whose input arrives in another layout."""
    backend = AclBackend()
    rng = np.random.default_rng(3)
    for shape in ((5, 7), (2, 3, 5), (2, 3, 4, 5)):
        for axes in itertools.permutations(range(len(shape))):
            x = Value("x", TensorType(shape, dtype))
            out_shape = tuple(shape[a] for a in axes)
            node = Node("transpose", [x], {"axes": axes}, [TensorType(out_shape, dtype)], name="t", output_names=["y"])
            handle = create_handle(backend, serialize(Graph([x], node.outputs, [node])), "t", threads=1)
            data = rng.integers(-100, 100, size=shape).astype(dtype)
            got = np.empty(out_shape, dtype)
            handle.run([data], [got])
            np.testing.assert_array_equal(got, np.transpose(data, axes), err_msg=f"{shape} {axes}")


def test_transpose_check_reasons():
    """What acl's transpose check refuses (asked of a region's input transposes): rank 5, float16."""
    backend = AclBackend()

    def reason(shape, dtype):
        axes = tuple(reversed(range(len(shape))))
        out = TensorType(tuple(shape[a] for a in axes), dtype)
        return backend.check_op(Node("transpose", [Value("x", TensorType(shape, dtype))], {"axes": axes}, [out],
                                     name="t", output_names=["y"]))  # fmt: skip

    assert reason((2, 3, 4, 5), "uint8") is None and reason((2, 3), "int32") is None
    assert reason((1, 2, 3, 4, 5), "float32") == "rank=5, rank must be <= 4: NEPermute permutes at most 4 dimensions"
    assert reason((2, 3, 4, 5), "float16") == "dtype='float16', dtype must be float32, uint8, int8 or int32"
