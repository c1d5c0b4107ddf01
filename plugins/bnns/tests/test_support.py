"""The bnns support table: what it takes, what it refuses and why, and the blobs it refuses to load."""

from __future__ import annotations

import math

import numpy as np
import pytest
from accel_bnns import BnnsBackend, _runtime
from accel_bnns.serializer import HEADER_SIZE
from pydantic import ValidationError

from accel.builder import GraphBuilder
from accel.ir import Graph, Node, TensorType, Value
from accel.partition import partition_graph

RNG = np.random.default_rng(11)


def w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def where(result) -> dict[str, tuple[str, str | None]]:
    return {n.name: (n.backend, n.composite) for n in result.report.nodes}


def test_dense_with_3d_weights_is_refused():
    # the IR's type rule already refuses 3-D dense weights; the check says why on its own too
    x = Value("x", TensorType((2, 8), "float32"))
    weight = Value.constant("w", np.zeros((2, 4, 8), np.float32))
    node = Node("nn.dense", [x, weight], {}, [TensorType((2, 4), "float32")], name="dense", output_names=["y"])
    reason = BnnsBackend().check_op(node)
    assert reason == "weight of rank 3 (shape [2, 4, 8]), dense weights must be 2-D [N, K]"


def test_dense_with_input_weights_is_refused():
    b = GraphBuilder(x=(2, 8), wt=(4, 8))
    g = b.done(b.op("nn.dense", b.x["x"], b.x["wt"]))
    (node,) = partition_graph(g, [BnnsBackend()]).report.nodes
    assert node.backend == "host"
    assert node.reasons["bnns"] == (
        "weight %wt is not a constant: bnns needs constant weights (bind them before partitioning)"
    )


def test_conv_add_of_a_whole_tensor_is_not_fused_and_the_add_runs_separately():
    b = GraphBuilder(x=(1, 4, 6, 6))
    conv = b.op("nn.conv2d", b.x["x"], b.const(w(4, 4, 3, 3)), padding=(1, 1, 1, 1))
    g = b.done(b.op("nn.relu", b.op("add", conv, b.const(w(1, 4, 6, 6)))))
    r = where(partition_graph(g, [BnnsBackend()]))
    assert r["conv2d"] == ("bnns", None)  # the conv alone
    assert r["add"][0] == "host" and r["relu"][0] == "host"


def test_conv_bias_relu_is_one_composite_in_priority_order():
    b = GraphBuilder(x=(1, 4, 6, 6))
    y = b.op("nn.conv2d", b.x["x"], b.const(w(4, 4, 3, 3)))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(w(4))))
    y = b.op("sigmoid", b.op("nn.conv2d", y, b.const(w(4, 4, 1, 1))))
    y = b.op("nn.bias_add", b.op("nn.conv2d", y, b.const(w(2, 4, 1, 1))), b.const(w(2)))
    g = b.done(y)
    r = where(partition_graph(g, [BnnsBackend()]))
    assert r["relu"] == ("bnns", "bnns.conv2d_bias_act")
    assert r["sigmoid"] == ("bnns", "bnns.conv2d_act")
    assert r[g.nodes[-1].name] == ("bnns", "bnns.conv2d_bias")


def test_gelu_chain_with_another_constant_is_not_gelu():
    b = GraphBuilder(x=(3, 8))
    y = b.op("add", b.op("nn.dense", b.x["x"], b.const(w(8, 8))), b.const(w(8)))

    def c(v):
        return b.const(np.array(v, np.float32))

    inner = b.op("add", y, b.op("multiply", b.op("power", y, c(3.0)), c(0.05)))  # 0.05, not 0.044715
    t = b.op("tanh", b.op("multiply", inner, c(math.sqrt(2 / math.pi))))
    out = b.op("multiply", b.op("multiply", y, c(0.5)), b.op("add", t, c(1.0)))
    r = partition_graph(b.done(out), [BnnsBackend()])
    assert where(r)["add"] == ("bnns", "bnns.dense_bias")
    assert where(r)["tanh"][0] == "host"


def test_bnns_regions_are_planar_and_need_no_transposes():
    b = GraphBuilder(x=(1, 3, 16, 16))
    y = b.op("nn.conv2d", b.x["x"], b.const(w(8, 3, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("abs", b.op("nn.relu", b.op("nn.bias_add", y, b.const(w(8)))))  # abs: on the host
    y = b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2))
    r = partition_graph(b.done(y), [BnnsBackend()])
    assert [n.op for n in r.graph.nodes] == ["call", "abs", "call"]
    assert all(p.transposes == 0 for p in r.report.partitions)
    conv = r.regions[0].body.nodes[0].body.nodes[0]
    assert (conv.attrs["data_layout"], conv.attrs["kernel_layout"]) == ("NCHW", "OIHW")
    assert r.regions[1].body.nodes[0].attrs["layout"] == "NCHW"


def _body() -> Graph:
    b = GraphBuilder(x=(1, 3, 8, 8))
    g = b.done(b.op("nn.relu", b.op("nn.conv2d", b.x["x"], b.const(w(4, 3, 3, 3)))))
    (region,) = partition_graph(g, [BnnsBackend()]).regions
    return region.body


def _blob() -> bytes:
    return BnnsBackend().serialize(_body())


def test_num_threads_option_is_accepted_and_ignored():
    """Artifacts compiled when the count was a target option name it: still valid, and no longer in the blob."""
    assert BnnsBackend({"num_threads": 2}).options.num_threads == 2
    with pytest.raises(ValidationError):
        BnnsBackend({"num_threads": -1})
    body = _body()
    blob = BnnsBackend({"num_threads": 2}).serialize(body)
    assert blob == BnnsBackend().serialize(body)
    assert blob[8:12] == bytes(4)  # the header's num_threads: 0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda b: b"XXXX" + b[4:], "magic"),
        (lambda b: b[:4] + (9).to_bytes(4, "little") + b[8:], "version"),
        (lambda b: b[:8] + (5000).to_bytes(4, "little") + b[12:], "num_threads"),
        (lambda b: b[:HEADER_SIZE] + b"XGRB" + b[HEADER_SIZE + 4 :], "magic"),
        (
            lambda b: b[:HEADER_SIZE] + b[HEADER_SIZE:].replace(b"\x04\x00\x00\x00bnns", b"\x04\x00\x00\x00bnnx", 1),
            "'bnnx' graph blob",
        ),
        (lambda b: b[:-1], "needs"),
        (lambda b: b + b"\0", "trailing"),
    ],
)
def test_bad_blobs_are_refused_with_one_line(edit, message):
    blob = edit(_blob())
    with pytest.raises(ValueError, match=message) as info:
        _runtime.Runtime(blob)
    assert "\n" not in str(info.value)


def test_blob_runs_after_the_checks():
    rt = _runtime.Runtime(_blob())
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    out = np.empty((1, 4, 6, 6), np.float32)
    rt.run([x], [out])
    assert np.isfinite(out).all() and (out >= 0).all() and out.max() > 0
