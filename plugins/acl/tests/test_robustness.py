"""Loaded blobs shared by threads, and blobs that are not what the serializer wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import acl_cases as cases
import numpy as np
import pytest
from accel_acl import AclBackend, _runtime
from accel_sdk.testing import concurrent_mismatches, edge_values, float_mismatch
from acl_helpers import compiled, inputs_for

import accel
from accel.builder import GraphBuilder
from accel.compiler import compile as compile_model
from accel.partition import partition_graph


def test_one_handle_from_several_threads_with_two_threads_each():
    """Each call runs on its own arena and stream; 2 oneDNN threads per call, 4 callers at once."""
    graph = cases.qnn_network("uint8")
    executable = compiled(graph).executable(threads=2)
    assert executable.threads == 2 and {h.threads for h in executable.handles.values()} == {2}
    feeds = [inputs_for(graph, seed) for seed in range(4)]
    errors = concurrent_mismatches(executable.run, feeds, [executable.run(f) for f in feeds], rounds=10)
    assert not errors, errors[:3]


def _blobs() -> list[bytes]:
    out = []
    for graph in (cases.network_fp32(), cases.qnn_network("int8"), cases.qnn_dense("uint8"), cases.l2_pool()):
        result = partition_graph(graph, [AclBackend()])
        out += [AclBackend().serialize(r.body) for r in result.regions]
    return out


def test_blob_of_another_kind_is_refused():
    blob = _blobs()[0]
    bad = blob.replace(b"\x03\x00\x00\x00acl", b"\x03\x00\x00\x00xyz", 1)
    with pytest.raises(ValueError, match="a 'xyz' graph blob, this runtime reads 'acl'"):
        _runtime.Runtime(bad)


def test_wrong_attribute_values_are_refused():
    """The serializer's attributes changed by hand: every kernel validates them against its tensors."""
    blob = _blobs()[0]
    # the first conv's strides (2 ints of 1) become 0: refused, not run
    key = b"\x07\x00\x00\x00strides\x05\x02\x00\x00\x00" + (1).to_bytes(8, "little") * 2
    assert key in blob
    bad = blob.replace(key, b"\x07\x00\x00\x00strides\x05\x02\x00\x00\x00" + (0).to_bytes(8, "little") * 2, 1)
    with pytest.raises(ValueError, match="strides"):
        _runtime.Runtime(bad)
    bad = blob.replace(key, b"\x07\x00\x00\x00strides\x05\x02\x00\x00\x00" + (3).to_bytes(8, "little") * 2, 1)
    with pytest.raises(ValueError, match="output must be"):
        _runtime.Runtime(bad)


FUZZ = """
import sys, numpy as np
from accel_acl import _runtime
blobs = [open(p, "rb").read() for p in sys.argv[2:]]
rng = np.random.default_rng(int(sys.argv[1]))
loaded = 0
for i in range(600):
    blob = bytearray(blobs[i % len(blobs)])
    kind = i % 3
    if kind == 0:      # a few random bytes changed
        for _ in range(int(rng.integers(1, 4))):
            blob[int(rng.integers(len(blob)))] = int(rng.integers(256))
    elif kind == 1:    # an aligned 4- or 8-byte field of the tables set to an extreme
        at = int(rng.integers(0, min(len(blob), 4096) - 8)) & ~3
        blob[at:at + 4] = int(rng.choice([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000])).to_bytes(4, "little")
    else:              # cut and spliced with another blob's tail
        other = blobs[int(rng.integers(len(blobs)))]
        cut = int(rng.integers(len(blob)))
        blob = blob[:cut] + other[int(rng.integers(len(other))):]
    try:
        rt = _runtime.Runtime(bytes(blob))
    except ValueError:
        continue
    loaded += 1
print("loaded", loaded)
"""


def test_mutated_blobs_never_crash(tmp_path: Path):
    """600 mutations (random bytes, extreme counts and sizes, splices) load or raise ValueError; run in a
    child process so that a crash is a failure with its signal, not a dead test run."""
    paths = []
    for i, blob in enumerate(_blobs()):
        p = tmp_path / f"blob{i}.bin"
        p.write_bytes(blob)
        paths.append(str(p))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FUZZ), "7", *paths], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert "loaded" in proc.stdout


def test_a_blob_written_with_a_thread_count_on_every_node_still_loads():
    """Blobs from before the count was chosen at load time carry `threads` on each node: ignored."""
    from accel_acl import serializer
    from accel_sdk.graph_blob import GraphBlobWriter, Kernel

    from accel.ir import CALL_OP
    from accel.pattern import composite_match

    graph = cases.qnn_network("uint8")
    (region,) = [r for r in partition_graph(graph, [AclBackend()]).regions]

    def old_lower(node, labels):
        k = serializer.lower(node, labels)
        return Kernel(k.name, {**k.attrs, "threads": 7}, k.inputs)

    body = region.body
    writer = GraphBlobWriter(serializer.KIND, serializer.KIND_VERSION, lower=old_lower)
    old = writer.write(body, matches={n: composite_match(n) for n in body.nodes if n.op == CALL_OP})
    new = AclBackend().serialize(body)
    assert old != new
    feeds = [inputs_for(body, 0)[v.name] for v in body.inputs]
    outs = []
    for blob in (old, new):
        rt = _runtime.Runtime(blob, threads=2)
        assert rt.threads == 2
        y = [np.empty(v.type.shape, v.type.dtype) for v in body.outputs]
        rt.run(feeds, y)
        outs.append(y)
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


def _blob_with(graph, kernel: str, edit) -> bytes:
    """The acl blob of graph's one partition, the attributes of its `kernel` nodes passed through edit."""
    from accel_acl import serializer
    from accel_sdk.graph_blob import GraphBlobWriter, Kernel

    from accel.ir import CALL_OP
    from accel.pattern import composite_match

    (region,) = partition_graph(graph, [AclBackend()]).regions
    edited = []

    def lower(node, labels):
        k = serializer.lower(node, labels)
        if k.name != kernel:
            return k
        edited.append(k.name)
        return Kernel(k.name, edit(dict(k.attrs)), k.inputs)

    writer = GraphBlobWriter(serializer.KIND, serializer.KIND_VERSION, lower=lower)
    blob = writer.write(region.body, matches={n: composite_match(n) for n in region.body.nodes if n.op == CALL_OP})
    assert edited, f"no {kernel} kernel in the partition"
    return blob


def _set(key, value):
    def edit(attrs):
        attrs[key] = value
        return attrs

    return edit


@pytest.mark.parametrize(
    "kernel,edit,message",
    [
        # a multiplier of 0 encodes a real one below 2^-32, always with shift 0; below 2^30 it was not encoded
        ("qnn_conv2d", lambda a: {**a, "multiplier": [0] * len(a["multiplier"])}, "not a fixed-point multiplier"),
        ("qnn_conv2d", lambda a: {**a, "multiplier": [1 << 29] * len(a["multiplier"])}, "not a fixed-point multiplier"),
        (
            "requantize",
            lambda a: {**a, "multiplier": [0] * len(a["multiplier"]), "shift": [7] * len(a["shift"])},
            "not a fixed-point",
        ),
        (
            "qnn_add",
            lambda a: {**a, "multipliers": [0, *a["multipliers"][1:]], "shifts": [4, *a["shifts"][1:]]},
            "not a fixed-point",
        ),
        # the requantize axis: the channel axis or -1, nothing else
        ("qnn_conv2d", _set("axis", 5), "axis"),
        ("qnn_conv2d", _set("axis", -2), "axis"),
        ("qnn_conv2d", _set("axis", 1 << 40), "axis"),
        ("qnn_conv2d", _set("axis", 1), "axis must be -1 or the channel axis 3"),
        ("requantize", _set("axis", 5), "axis"),
        ("requantize", _set("axis", -2), "axis"),
        ("requantize", _set("axis", 1 << 40), "axis"),
    ],
)
def test_requantize_parameters_no_serializer_writes_are_refused(kernel, edit, message):
    graph = cases.qnn_network("uint8")
    with pytest.raises(ValueError, match=message):
        _runtime.Runtime(_blob_with(graph, kernel, edit))


def test_the_serializers_own_multipliers_load():
    graph = cases.qnn_network("int8")
    assert _runtime.Runtime(_blob_with(graph, "qnn_conv2d", lambda a: a)).threads >= 1


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads the resident set from /proc")
def test_loading_and_dropping_a_model_again_and_again_does_not_grow():
    """A server that reloads a model: each load packs ResNet-18's 45 MB of weights; dropping the handle
    gives the memory back (the heap is trimmed), so the resident set stays flat."""
    import gc

    from accel.testing import modelgen

    artifact = compile_model(accel.import_onnx(modelgen.resnet18(32)), "acl")
    sizes = []
    for i in range(24):
        exe = artifact.executable(threads=1)
        del exe
        gc.collect()
        if i in (7, 23):
            sizes.append(_rss_bytes())
    grown = sizes[1] - sizes[0]
    assert grown < 20 << 20, f"the resident set grew by {grown >> 20} MB over 16 loads"


def test_concurrent_runs_with_nan_and_inf_inputs_agree_with_one_run_at_a_time():
    """NaN and ±Inf take the float layers' second pass, whose buffers are per thread; a dilated convolution
    runs a kernel with a scratchpad. Four threads, each its own inputs, each result equal (NaN included) to
    the same input run alone."""
    b = GraphBuilder(x=(1, 16, 40, 40))
    y = b.op("nn.conv2d", b.x["x"], b.const(cases.weights(16, 16, 3, 3)), padding=(2, 2, 2, 2), dilation=(2, 2))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(cases.weights(16))))
    y = b.op("nn.conv2d", y, b.const(cases.weights(16, 16, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("clip", y, a_min=0.0, a_max=6.0)
    graph = b.done(b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2)))
    executable = compiled(graph).executable(threads=2)
    assert len(executable.handles) == 1
    feeds = []
    for seed in range(4):
        x = np.random.default_rng(seed).standard_normal((1, 16, 40, 40)).astype(np.float32)
        flat = x.reshape(-1)
        flat[seed * 97 :: 251] = np.nan
        flat[seed * 13 :: 509] = np.inf
        flat[seed * 29 :: 701] = -np.inf
        feeds.append({"x": x})
    want = [executable.run(f) for f in feeds]
    assert any(np.isnan(next(iter(w.values()))).any() for w in want)
    errors = concurrent_mismatches(executable.run, feeds, want)
    assert not errors, errors[:3]


@pytest.mark.parametrize("kind", ["normal", "edges", "huge"])
def test_a_bounded_relu_chain_skips_only_the_checks_it_may(kind):
    """A convolution whose input is a bounded ReLU convolution's output skips its NaN scan when that
    convolution's own scan found nothing this run; NaN, ±Inf and huge inputs still reach every layer as
    the reference computes them (the first scan finds them, so the next ones run)."""
    from accel.executor import ReferenceExecutor

    b = GraphBuilder(x=(1, 8, 20, 20))
    y = b.op("nn.conv2d", b.x["x"], b.const(cases.weights(16, 8, 1, 1)))
    y = b.op("clip", b.op("nn.bias_add", y, b.const(cases.weights(16))), a_min=0.0, a_max=6.0)
    y = b.op("nn.conv2d", y, b.const(cases.weights(16, 1, 3, 3)), padding=(1, 1, 1, 1), groups=16)
    y = b.op("clip", b.op("nn.bias_add", y, b.const(cases.weights(16))), a_min=0.0, a_max=6.0)
    y = b.op("nn.relu", b.op("nn.conv2d", y, b.const(cases.weights(8, 16, 1, 1))))
    graph = b.done(y)
    executable = compiled(graph).executable(threads=1)
    assert len(executable.handles) == 1
    x = np.random.default_rng(5).standard_normal((1, 8, 20, 20)).astype(np.float32)
    if kind == "edges":
        x = edge_values(x)  # NaN, ±Inf, ±0, denormals
    if kind == "huge":
        x.reshape(-1)[::41] = 3e37
    for _ in range(2):  # a second run starts with fresh flags
        got = executable.run({"x": x})[graph.outputs[0].name]
        want = ReferenceExecutor(graph).run({"x": x})[graph.outputs[0].name]
        assert kind != "edges" or np.isnan(want).any()
        assert float_mismatch(got, want) is None, float_mismatch(got, want)
