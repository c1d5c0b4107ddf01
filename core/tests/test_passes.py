"""Graph passes: type inference, dead code, constant folding, batch-norm folding, the simplify pipeline.

Every pass is checked for numerical equivalence (the reference executor on
random inputs, before and after) and for the structure it promises.
"""

from __future__ import annotations

import numpy as np
import pytest

import accel
from accel.builder import GraphBuilder
from accel.errors import TypeInferenceError
from accel.ir import Graph, QuantParams, TensorType, Value
from accel.passes import (
    eliminate_dead_code,
    fold_batch_norm,
    fold_constants,
    infer_types,
    qdq_to_qnn,
    simplify,
)

RNG = np.random.default_rng(1234)


class Builder(GraphBuilder):
    """A graph under construction, with random float constants."""

    def randc(self, *shape: int, lo: float = -1.0, hi: float = 1.0) -> Value:
        return self.const(RNG.uniform(lo, hi, shape).astype(np.float32))


def feeds(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype) for v in g.inputs}


def run(g: Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return accel.execute(g, inputs)


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def assert_same(a: Graph, b: Graph, *, rtol: float = 0.0, seeds: tuple[int, ...] = (0, 1)) -> None:
    """Both graphs give the same outputs (names included) on random inputs."""
    for seed in seeds:
        inputs = feeds(a, seed)
        ra, rb = run(a, inputs), run(b, inputs)
        assert list(ra) == list(rb)
        for name in ra:
            assert ra[name].dtype == rb[name].dtype and ra[name].shape == rb[name].shape
            if rtol == 0.0:
                np.testing.assert_array_equal(ra[name], rb[name], err_msg=name)
            else:
                scale = max(float(np.abs(ra[name]).max()), 1e-30)
                err = float(np.abs(ra[name].astype(np.float64) - rb[name]).max()) / scale
                assert err <= rtol, f"{name}: relative error {err:.3g} > {rtol}"


# --------------------------------------------------------------------------------------
# purity


def _conv_bn_graph() -> Graph:
    b = Builder(x=(1, 3, 10, 10))
    y = b.op("nn.conv2d", b.x["x"], b.randc(8, 3, 3, 3), padding=(1, 1, 1, 1))
    y = b.op("nn.bias_add", y, b.randc(8))
    y = b.op("nn.batch_norm", y, b.randc(8, lo=0.5, hi=1.5), b.randc(8), b.randc(8), b.randc(8, lo=0.5, hi=2.0))
    y = b.op("nn.relu", y)
    dead = b.op("sigmoid", y)  # noqa: F841  (dead code on purpose)
    y = b.op("reshape", b.op("reshape", y, newshape=(1, 8, 100)), newshape=(8, 100))
    folded = b.op("add", b.randc(8, 1), b.randc(8, 1))
    return b.done(b.op("add", y, folded))


@pytest.mark.parametrize("pass_", [infer_types, eliminate_dead_code, fold_constants, fold_batch_norm, simplify])
def test_passes_leave_their_input_alone(pass_):
    g = _conv_bn_graph()
    before = str(g)
    ids = [id(n) for n in g.nodes]
    out = pass_(g)
    assert str(g) == before and [id(n) for n in g.nodes] == ids
    assert out is not g and not {id(n) for n in out.nodes} & set(ids)
    out.lint()


# --------------------------------------------------------------------------------------
# infer_types


def test_infer_types_follows_new_input_shapes():
    b = Builder(x=(1, 3, 8, 8))
    y = b.op("nn.conv2d", b.x["x"], b.randc(4, 3, 3, 3), strides=(2, 2))
    y = b.op("nn.max_pool2d", b.op("nn.relu", y), pool_size=(2, 2), strides=(2, 2))
    g = b.done(y)
    g.inputs[0].type = TensorType((2, 3, 16, 16), "float32")  # rebind batch and resolution
    out = infer_types(g)
    assert out.outputs[0].type == TensorType((2, 4, 3, 3), "float32")
    assert g.outputs[0].type == TensorType((1, 4, 1, 1), "float32")  # the input graph keeps its types
    out.lint()
    res = run(out, {"x": np.ones((2, 3, 16, 16), np.float32)})
    assert next(iter(res.values())).shape == (2, 4, 3, 3)


def test_infer_types_error_names_the_node():
    b = Builder(x=(2, 16))
    y = b.op("nn.dense", b.x["x"], b.randc(4, 16))
    g = b.done(b.op("nn.relu", y))
    g.inputs[0].type = TensorType((2, 15), "float32")
    dense = g.nodes[0].name
    with pytest.raises(TypeInferenceError, match=f"node '{dense}' \\(nn.dense\\).*K=15"):
        infer_types(g)


def test_infer_types_completes_attributes():
    b = Builder(x=(1, 2, 4, 4))
    g = b.done(b.op("nn.avg_pool2d", b.x["x"], pool_size=(2, 2)))
    g.nodes[0].attrs = {"pool_size": (2, 2)}  # as a hand-made node might have them
    out = infer_types(g)
    assert out.nodes[0].attrs["count_include_pad"] is False and out.nodes[0].attrs["layout"] == "NCHW"


# --------------------------------------------------------------------------------------
# eliminate_dead_code


def test_dce_drops_unreachable_nodes_only():
    b = Builder(x=(4, 6))
    x = b.x["x"]
    parts = b.op("split", x, indices_or_sections=2, axis=1)
    keep = b.op("nn.relu", parts[0])  # only the first split output is used
    b.op("tanh", parts[1])  # dead
    dead2 = b.op("exp", x)
    b.op("sigmoid", dead2)  # dead chain
    g = b.done(keep, x)
    out = eliminate_dead_code(g)
    assert ops(out) == ["split", "nn.relu"]
    assert [v.name for v in out.outputs] == [v.name for v in g.outputs]
    assert_same(g, out)


def test_dce_of_a_graph_without_dead_code_is_identity():
    g = _conv_bn_graph()
    g = eliminate_dead_code(g)
    assert str(eliminate_dead_code(g)) == str(g)


# --------------------------------------------------------------------------------------
# fold_constants


def test_fold_constants_evaluates_constant_subgraphs():
    b = Builder(x=(3, 4))
    c = b.op("nn.relu", b.op("subtract", b.randc(3, 4), b.randc(3, 4)))
    c = b.op("transpose", b.op("reshape", c, newshape=(4, 3)), axes=(1, 0))
    y = b.op("multiply", b.x["x"], c)
    g = b.done(y, c)
    out = fold_constants(g)
    assert ops(out) == ["multiply"]
    assert out.outputs[1].is_constant and out.outputs[1].name == g.outputs[1].name
    assert_same(g, out)


def test_fold_constants_respects_max_bytes_but_folds_weight_sized_results():
    b = Builder(x=(64, 256))
    big = b.op("add", b.randc(64, 1), b.randc(1, 256))  # 64 KiB from 1.3 KiB of inputs
    moved = b.op("transpose", b.randc(256, 64), axes=(1, 0))  # as big as its input
    y = b.op("add", b.op("add", b.x["x"], big), moved)
    g = b.done(y)
    small = fold_constants(g, max_bytes=1024)
    assert ops(small) == ["add", "add", "add"]  # the broadcast stays, the transpose folds
    assert ops(fold_constants(g)) == ["add", "add"]
    assert_same(g, small)
    assert_same(g, fold_constants(g))


def test_fold_constants_merges_reshapes_and_transposes():
    b = Builder(x=(2, 3, 4))
    x = b.x["x"]
    r = b.op("reshape", b.op("reshape", x, newshape=(6, 4)), newshape=(4, 6))
    t = b.op("transpose", b.op("transpose", x, axes=(1, 2, 0)), axes=(2, 0, 1))  # identity
    u = b.op("transpose", b.op("transpose", x, axes=(1, 2, 0)), axes=(1, 0, 2))  # one transpose
    same = b.op("reshape", x, newshape=(2, 3, 4))  # identity reshape
    c = b.op("cast", x, dtype="float32")  # identity cast
    y = b.op("add", b.op("nn.relu", t), b.op("add", same, c))
    g = b.done(r, y, u)
    out = fold_constants(g)
    assert ops(out).count("reshape") == 1 and ops(out).count("transpose") == 1
    assert "cast" not in ops(out)
    (tr,) = [n for n in out.nodes if n.op == "transpose"]
    assert tr.inputs[0] is out.inputs[0] and tuple(tr.attrs["axes"]) == (2, 1, 0)
    assert [v.name for v in out.outputs] == [v.name for v in g.outputs]
    assert_same(g, out)


def test_fold_constants_keeps_an_identity_op_between_input_and_output():
    b = Builder(x=(2, 3))
    g = b.done(b.op("reshape", b.x["x"], newshape=(2, 3)))
    out = fold_constants(g)
    assert ops(out) == ["reshape"] and out.outputs[0].name == g.outputs[0].name
    assert_same(g, out)


def _qdq_conv_with_float_head() -> Graph:
    """DQ(x) * DQ(int8 w) -> conv -> Q, then a float dense whose weight is a dequantized constant."""
    xq = TensorType((1, 2, 6, 6), "uint8", QuantParams(0.05, 128))
    b = Builder(x=xq)
    w = b.const(RNG.integers(-127, 128, (3, 2, 3, 3)).astype(np.int8), QuantParams(0.01, 0))
    y = b.op("nn.conv2d", b.op("qnn.dequantize", b.x["x"]), b.op("qnn.dequantize", w))
    y = b.op("qnn.quantize", y, scale=0.1, zero_point=120, out_dtype="uint8")
    f = b.op("reshape", b.op("qnn.dequantize", y), newshape=(1, 48))
    hw = b.const(RNG.integers(-127, 128, (5, 48)).astype(np.int8), QuantParams(0.02, 0))
    return b.done(b.op("nn.dense", f, b.op("qnn.dequantize", hw)))


def test_fold_constants_keeps_quantized_weights_of_qdq_groups():
    g = _qdq_conv_with_float_head()
    out = fold_constants(g)
    # the conv weight's dequantize survives (qdq_to_qnn needs it), the head's folds
    dq = [n for n in out.nodes if n.op == "qnn.dequantize"]
    assert len(dq) == 3 and sum(n.inputs[0].is_constant for n in dq) == 1
    (dense,) = [n for n in out.nodes if n.op == "nn.dense"]
    assert dense.inputs[1].is_constant and dense.inputs[1].type.dtype == "float32"
    assert_same(g, out)


# --------------------------------------------------------------------------------------
# fold_batch_norm


def _bn_params(b: Builder, c: int) -> list[Value]:
    return [b.randc(c, lo=0.5, hi=1.5), b.randc(c), b.randc(c), b.randc(c, lo=0.3, hi=2.0)]


@pytest.mark.parametrize(
    ("layout", "groups", "bias"),
    [("NCHW", 1, None), ("NCHW", 1, "bias_add"), ("NHWC", 1, "add"), ("NCHW", 4, "add"), ("NHWC", 8, "bias_add")],
)
def test_conv_batch_norm_becomes_conv_bias_add(layout, groups, bias):
    shape = (2, 8, 9, 9) if layout == "NCHW" else (2, 9, 9, 8)
    b = Builder(x=shape)
    kernel = "OIHW" if layout == "NCHW" else "OHWI"
    wshape = (16, 8 // groups, 3, 3) if layout == "NCHW" else (16, 3, 3, 8 // groups)
    y = b.op(
        "nn.conv2d",
        b.x["x"],
        b.randc(*wshape),
        padding=(1, 1, 1, 1),
        groups=groups,
        data_layout=layout,
        kernel_layout=kernel,
    )
    axis = 1 if layout == "NCHW" else 3
    if bias == "bias_add":
        y = b.op("nn.bias_add", y, b.randc(16), axis=axis)
    elif bias == "add":
        y = b.op("add", y, b.randc(16, 1, 1) if layout == "NCHW" else b.randc(16))
    y = b.op("nn.batch_norm", y, *_bn_params(b, 16), axis=axis, epsilon=1e-3)
    g = b.done(b.op("nn.relu", y))
    out = fold_batch_norm(g)
    assert ops(out) == ["nn.conv2d", "nn.bias_add", "nn.relu"]
    assert out.nodes[1].attrs["axis"] == axis
    assert_same(g, out, rtol=1e-5)


def test_dense_and_transposed_conv_batch_norms_fold():
    b = Builder(x=(3, 20), z=(1, 6, 5, 5))
    y = b.op("nn.dense", b.x["x"], b.randc(10, 20))
    y = b.op("nn.batch_norm", y, *_bn_params(b, 10), axis=-1)
    t = b.op("nn.conv2d_transpose", b.x["z"], b.randc(6, 4, 3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    t = b.op("nn.batch_norm", t, *_bn_params(b, 4))
    g = b.done(y, t)
    out = fold_batch_norm(g)
    assert "nn.batch_norm" not in ops(out)
    assert ops(out).count("nn.bias_add") == 2
    assert_same(g, out, rtol=1e-5)


def test_batch_norm_that_cannot_fold_is_left_alone():
    b = Builder(x=(1, 4, 6, 6))
    conv = b.op("nn.conv2d", b.x["x"], b.randc(4, 4, 1, 1))
    bn1 = b.op("nn.batch_norm", conv, *_bn_params(b, 4))  # conv output also read by the add below
    bn2 = b.op("nn.batch_norm", b.x["x"], *_bn_params(b, 4))  # no layer before it
    grouped = b.op("nn.conv2d_transpose", b.x["x"], b.randc(4, 1, 3, 3), groups=4)
    bn3 = b.op("nn.batch_norm", grouped, *_bn_params(b, 4))  # grouped transposed conv: not folded
    const_bn = b.op("nn.batch_norm", b.randc(4, 1, 1), *_bn_params(b, 4), axis=0)  # folds to a constant
    y = b.op("add", b.op("add", bn1, conv), b.op("multiply", bn2, const_bn))
    g = b.done(y, bn3)
    out = fold_batch_norm(g)
    assert ops(out).count("nn.batch_norm") == 3
    assert_same(g, out)


# --------------------------------------------------------------------------------------
# simplify


def test_simplify_pipeline():
    g = _conv_bn_graph()
    out = simplify(g)
    assert ops(out) == ["nn.conv2d", "nn.bias_add", "nn.relu", "reshape", "add"]
    assert_same(g, out, rtol=1e-5)


def test_simplify_is_idempotent():
    for g in (_conv_bn_graph(), _qdq_conv_with_float_head()):
        once = simplify(g)
        assert str(simplify(once)) == str(once)


def test_one_folding_sweep_leaves_nothing_to_fold():
    """simplify folds once when there is no batch norm: a second sweep must find nothing."""
    from accel.testing import modelgen

    b = Builder(x=(2, 3, 4))
    x = b.op("transpose", b.op("transpose", b.x["x"], axes=(1, 0, 2)), axes=(2, 1, 0))
    x = b.op("reshape", b.op("reshape", b.op("cast", x, dtype="float32"), newshape=(4, 6)), newshape=(24,))
    c = b.op("reshape", b.op("transpose", b.randc(2, 12), axes=(1, 0)), newshape=(24,))
    graphs = [b.done(b.op("add", x, b.op("exp", c)))]
    graphs += [accel.import_onnx(m) for m in (modelgen.transformer_encoder(), modelgen.mobilenet_v2(32))]
    for g in graphs:
        assert not any(n.op == "nn.batch_norm" for n in g.nodes)
        once = simplify(g)
        assert str(fold_constants(once)) == str(once)


def test_simplify_on_qdq_graph_folds_the_float_head():
    g = _qdq_conv_with_float_head()
    out = simplify(g)
    assert ops(out) == ["qnn.conv2d", "qnn.requantize", "qnn.dequantize", "reshape", "nn.dense"]
    (dense,) = [n for n in out.nodes if n.op == "nn.dense"]
    assert dense.inputs[1].is_constant
    inputs = {"x": RNG.integers(0, 256, (1, 2, 6, 6)).astype(np.uint8)}
    ref, got = run(g, inputs), run(out, inputs)
    # ±1 on the quantized conv output, times the head's weights
    (name,) = ref
    assert np.abs(ref[name] - got[name]).max() <= 0.1 * 48 * 127 * 0.02


def test_simplify_is_linear():
    """No pass rescans the graph per node: copies and type inferences grow linearly."""
    import accel.ir as ir
    import accel.ops.registry as registry

    counts = {"copy": 0, "infer": 0}
    # complete_attrs runs once per type inference (the passes import infer_node_types by name)
    real_copy, real_infer = ir.Graph.copy, registry.complete_attrs

    def counting_copy(self):
        counts["copy"] += 1
        return real_copy(self)

    def counting_infer(*a, **k):
        counts["infer"] += 1
        return real_infer(*a, **k)

    def chain(n: int) -> Graph:
        b = Builder(x=(1, 4, 8, 8))
        y = b.x["x"]
        for _ in range(n):
            y = b.op("nn.conv2d", y, b.randc(4, 4, 1, 1))
            y = b.op("nn.batch_norm", y, *_bn_params(b, 4))
            y = b.op("nn.relu", y)
        return b.done(y)

    small, large = chain(10), chain(40)
    results = []
    for g in (small, large):
        counts.update(copy=0, infer=0)
        ir.Graph.copy, registry.complete_attrs = counting_copy, counting_infer  # type: ignore[method-assign]
        try:
            simplify(g)
        finally:
            ir.Graph.copy, registry.complete_attrs = real_copy, real_infer  # type: ignore[method-assign]
        results.append(dict(counts))
    assert results[0]["copy"] == results[1]["copy"] <= 8
    assert results[1]["infer"] <= 4.5 * results[0]["infer"]


@pytest.mark.parametrize("pass_", [fold_constants, fold_batch_norm, qdq_to_qnn])
def test_a_pass_asked_not_to_sweep_keeps_dead_nodes_and_simplify_sweeps_once(pass_, monkeypatch):
    """``dce=False`` leaves nodes nobody reads (with or without a rewrite); ``simplify`` sweeps once, at its end."""
    import sys

    import accel.passes.dce as dce

    # the modules (``accel.passes`` re-exports their functions under the same names)
    fbn, fc, q = (sys.modules[f"accel.passes.{m}"] for m in ("fold_batch_norm", "fold_constants", "qdq_to_qnn"))
    b = Builder(x=(4, 6))
    x = b.x["x"]
    b.op("exp", x)  # dead
    g = b.done(b.op("nn.relu", b.op("add", x, b.op("add", b.randc(6), b.randc(6)))))  # a foldable add
    assert "exp" in ops(pass_(g, dce=False))
    assert "exp" not in ops(pass_(g))
    sweeps = []
    real = dce.remove_dead_nodes
    for module in (dce, fbn, fc, q):  # each pass's own reference to the sweep
        monkeypatch.setattr(module, "remove_dead_nodes", lambda graph, **kw: sweeps.append(1) or real(graph, **kw))
    out = simplify(g)
    assert "exp" not in ops(out) and len(sweeps) == 1
    assert_same(g, out)
