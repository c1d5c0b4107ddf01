"""fold_scale_shift: per-channel scales and shifts after a linear layer fold into its weight and bias.

Every rewrite is checked against the unfolded graph on the reference executor
(relative 1e-5), and the Caffe2-style generated models against ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import accel
from accel.builder import GraphBuilder
from accel.ir import Graph, QuantParams, TensorType, Value
from accel.ops.common import same_as_input
from accel.ops.registry import REGISTRY, Affine, Layout, get_op, register_op
from accel.passes import fold_scale_shift, simplify
from accel.testing import modelgen

RNG = np.random.default_rng(2024)
RTOL = 1e-5


class Builder(GraphBuilder):
    def randc(self, *shape: int, lo: float = -1.0, hi: float = 1.0, dtype: str = "float32") -> Value:
        return self.const(RNG.uniform(lo, hi, shape).astype(dtype))


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def assert_close(a: Graph, b: Graph, *, rtol: float = RTOL) -> None:
    """Same output names, shapes and dtypes; values within ``rtol`` of the largest magnitude."""
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        feed = {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype) for v in a.inputs}
        ra, rb = accel.execute(a, feed), accel.execute(b, feed)
        assert list(ra) == list(rb)
        for name in ra:
            assert ra[name].dtype == rb[name].dtype and ra[name].shape == rb[name].shape
            scale = max(float(np.abs(ra[name]).max()), 1e-30)
            err = float(np.abs(ra[name].astype(np.float64) - rb[name]).max()) / scale
            assert err <= rtol, f"{name}: relative error {err:.3g} > {rtol}"


def _conv(b: Builder, x: Value, cin: int, cout: int, layout: str = "NCHW", groups: int = 1) -> Value:
    kernel = "OIHW" if layout == "NCHW" else "OHWI"
    wshape = (cout, cin // groups, 3, 3) if layout == "NCHW" else (cout, 3, 3, cin // groups)
    return b.op(
        "nn.conv2d", x, b.randc(*wshape), padding=(1, 1, 1, 1), groups=groups, data_layout=layout, kernel_layout=kernel
    )


# --------------------------------------------------------------------------------------
# what folds


@pytest.mark.parametrize(
    ("layout", "scale_shape", "shift_shape", "groups"),
    [
        ("NCHW", (8, 1, 1), (8, 1, 1), 1),  # Caffe2's export
        ("NCHW", (1, 8, 1, 1), (1, 8, 1, 1), 1),
        ("NCHW", (), (8, 1, 1), 4),  # a scalar scale; grouped conv
        ("NCHW", (1,), (1, 1, 1, 1), 1),  # one value for every channel
        ("NHWC", (8,), (1, 1, 1, 8), 8),  # channels last; depthwise
    ],
)
def test_conv_bias_scale_shift_becomes_conv_bias_add(layout, scale_shape, shift_shape, groups):
    b = Builder(x=(2, 8, 7, 7) if layout == "NCHW" else (2, 7, 7, 8))
    axis = 1 if layout == "NCHW" else 3
    y = _conv(b, b.x["x"], 8, 8, layout, groups)
    y = b.op("nn.bias_add", y, b.randc(8), axis=axis)
    y = b.op("multiply", y, b.randc(*scale_shape, lo=0.2, hi=2.0))
    y = b.op("add", y, b.randc(*shift_shape))
    g = b.done(b.op("nn.relu", y))
    out = fold_scale_shift(g)
    assert ops(out) == ["nn.conv2d", "nn.bias_add", "nn.relu"]
    assert out.nodes[1].attrs["axis"] == axis and out.nodes[1].inputs[1].type.shape == (8,)
    assert_close(g, out)


def test_constant_on_either_side_negative_scales_and_chains_of_any_length():
    b = Builder(x=(1, 4, 6, 6))
    y = _conv(b, b.x["x"], 4, 6)
    y = b.op("multiply", b.randc(6, 1, 1, lo=-2.0, hi=-0.5), y)  # constant first, negative
    y = b.op("add", b.randc(6, 1, 1), y)
    y = b.op("multiply", y, b.randc(1, 6, 1, 1, lo=0.5, hi=1.5))
    y = b.op("nn.bias_add", y, b.randc(6))
    y = b.op("add", y, b.randc(6, 1, 1))
    g = b.done(y)
    out = fold_scale_shift(g)
    assert ops(out) == ["nn.conv2d", "nn.bias_add"]
    assert out.outputs[0].name == g.outputs[0].name
    assert_close(g, out)


def test_a_shift_alone_becomes_the_bias_and_a_lone_bias_add_is_left_as_it_is():
    b = Builder(x=(1, 4, 6, 6))
    shifted = b.op("add", _conv(b, b.x["x"], 4, 4), b.randc(4, 1, 1))
    biased = b.op("nn.bias_add", _conv(b, b.x["x"], 4, 4), b.randc(4))
    g = b.done(shifted, biased)
    out = fold_scale_shift(g)
    assert ops(out) == ["nn.conv2d", "nn.bias_add", "nn.conv2d", "nn.bias_add"]
    np.testing.assert_array_equal(out.nodes[0].inputs[1].const, g.nodes[0].inputs[1].const)  # no scale: same weight
    assert_close(g, out)
    lone = b.done(biased)
    assert fold_scale_shift(lone, in_place=True) is lone and ops(lone) == ["nn.conv2d", "nn.bias_add"]


def test_the_layer_keeps_its_name_and_the_chain_end_its_names():
    b = Builder(x=(1, 3, 5, 5))
    y = _conv(b, b.x["x"], 3, 4)
    y = b.op("multiply", y, b.randc(4, 1, 1))
    end = b.op("add", y, b.randc(4, 1, 1))
    g = b.done(b.op("nn.relu", end))
    out = fold_scale_shift(g)
    assert out.nodes[0].name == g.nodes[0].name
    assert (out.nodes[1].name, out.nodes[1].output.name) == (g.nodes[2].name, end.name)
    out.lint()


def test_dense_and_transposed_conv_fold():
    b = Builder(x=(3, 20), s=(2, 5, 20), z=(1, 6, 5, 5))
    y = b.op("nn.dense", b.x["x"], b.randc(10, 20))
    y = b.op("add", b.op("multiply", y, b.randc(10, lo=0.5, hi=2.0)), b.randc(10))
    seq = b.op("nn.dense", b.x["s"], b.randc(10, 20))  # on [batch, seq, features], as transformers run it
    seq = b.op("add", b.op("multiply", seq, b.randc(1, 1, 10)), b.randc(10))
    t = b.op("nn.conv2d_transpose", b.x["z"], b.randc(6, 4, 3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    t = b.op("multiply", t, b.randc(4, 1, 1))
    g = b.done(y, seq, t)
    out = fold_scale_shift(g)
    assert "multiply" not in ops(out) and "add" not in ops(out)
    assert ops(out).count("nn.bias_add") == 3
    assert_close(g, out)


def test_float64_folds():
    b = Builder(x=TensorType((1, 2, 4, 4), "float64"))
    y = b.op("nn.conv2d", b.x["x"], b.randc(3, 2, 1, 1, dtype="float64"))
    g = b.done(b.op("add", b.op("multiply", y, b.randc(3, 1, 1, dtype="float64")), b.randc(3, 1, 1, dtype="float64")))
    out = fold_scale_shift(g)
    assert ops(out) == ["nn.conv2d", "nn.bias_add"]
    assert_close(g, out, rtol=1e-12)


# --------------------------------------------------------------------------------------
# what stays


def test_scales_and_shifts_that_cannot_fold_are_left_alone():
    b = Builder(x=(1, 4, 6, 6), w=(4, 4, 3, 3))
    x = b.x["x"]
    shared = _conv(b, x, 4, 4)
    a = b.op("multiply", shared, b.randc(4, 1, 1))  # the conv's output has another reader (the concat)
    cat = b.op("concatenate", shared, x, axis=1)
    c = b.op("add", b.op("multiply", cat, b.randc(8, 1, 1)), b.randc(8, 1, 1))  # after a concat: no weight
    pre = b.op("multiply", b.op("nn.relu", x), b.randc(4, 1, 1))  # after a relu
    dynamic = b.op("nn.conv2d", x, b.x["w"], padding=(1, 1, 1, 1))  # its weight is no constant
    dyn = b.op("multiply", dynamic, b.randc(4, 1, 1))
    spatial = b.op("multiply", _conv(b, x, 4, 4), b.randc(4, 6, 6))  # not per channel
    widening = b.op("add", _conv(b, x, 4, 4), b.randc(2, 4, 1, 1))  # broadcasts the batch: a larger result
    nonfinite = b.op("multiply", _conv(b, x, 4, 4), b.const(np.array([1, np.inf, 1, 1], np.float32).reshape(4, 1, 1)))
    square = _conv(b, x, 4, 4)
    squared = b.op("multiply", square, square)  # no constant operand
    grouped = b.op("nn.conv2d_transpose", x, b.randc(4, 1, 3, 3), groups=4, padding=(1, 1, 1, 1))
    grouped = b.op("multiply", grouped, b.randc(4, 1, 1))  # the weight's O axis holds one group's channels
    g = b.done(a, c, pre, dyn, spatial, widening, nonfinite, squared, grouped)
    out = fold_scale_shift(g)
    assert str(out) == str(g)


def test_a_graph_output_ends_the_chain():
    b = Builder(x=(1, 3, 5, 5))
    conv = _conv(b, b.x["x"], 3, 4)
    scaled = b.op("multiply", conv, b.randc(4, 1, 1))
    g = b.done(b.op("add", scaled, b.randc(4, 1, 1)), scaled)  # the scaled value is an output too
    out = fold_scale_shift(g)
    assert ops(out) == ["nn.conv2d", "nn.bias_add", "add"]
    assert [v.name for v in out.outputs] == [v.name for v in g.outputs]
    assert_close(g, out)
    g2 = b.done(conv, scaled)  # the conv's output is itself an output: nothing folds (the add is dead)
    assert ops(fold_scale_shift(g2)) == ["nn.conv2d", "multiply"]


def test_float16_is_left_alone():
    b = Builder(x=TensorType((1, 2, 4, 4), "float16"))
    y = b.op("nn.conv2d", b.x["x"], b.randc(3, 2, 1, 1, dtype="float16"))
    g = b.done(b.op("multiply", y, b.randc(3, 1, 1, dtype="float16")))
    assert ops(fold_scale_shift(g)) == ["nn.conv2d", "multiply"]


def test_a_quantized_graph_is_left_alone():
    """Its float parts keep the weights its quantization was computed for."""
    q = QuantParams(0.05, 0)
    b = Builder(x=TensorType((1, 2, 4, 4), "int8", q))
    y = b.op("qnn.dequantize", b.x["x"])
    y = b.op("nn.conv2d", y, b.randc(3, 2, 1, 1))
    g = b.done(b.op("add", b.op("multiply", y, b.randc(3, 1, 1)), b.randc(3, 1, 1)))
    assert ops(fold_scale_shift(g)) == ops(g)


# --------------------------------------------------------------------------------------
# contract: purity, in place, sweeps, pipeline, trait


def _foldable() -> Graph:
    b = Builder(x=(1, 3, 5, 5))
    y = _conv(b, b.x["x"], 3, 4)
    b.op("exp", b.x["x"])  # dead
    return b.done(b.op("add", b.op("multiply", y, b.randc(4, 1, 1)), b.randc(4, 1, 1)))


def test_the_input_graph_is_left_alone_unless_in_place():
    g = _foldable()
    before, ids = str(g), [id(n) for n in g.nodes]
    out = fold_scale_shift(g)
    assert str(g) == before and [id(n) for n in g.nodes] == ids and out is not g
    assert fold_scale_shift(g, in_place=True) is g and ops(g) == ["nn.conv2d", "nn.bias_add"]


def test_dce_false_keeps_dead_nodes():
    assert "exp" in ops(fold_scale_shift(_foldable(), dce=False))
    assert "exp" not in ops(fold_scale_shift(_foldable()))


def test_simplify_folds_scales_after_batch_norms_and_is_idempotent():
    b = Builder(x=(1, 3, 6, 6))
    y = _conv(b, b.x["x"], 3, 4)
    params = [b.randc(4, lo=0.5, hi=1.5), b.randc(4), b.randc(4), b.randc(4, lo=0.5, hi=2.0)]
    y = b.op("nn.batch_norm", y, *params)
    y = b.op("add", b.op("multiply", y, b.randc(4, 1, 1)), b.randc(4, 1, 1))
    scale = b.op("reshape", b.randc(4), newshape=(4, 1, 1))  # a constant once folded
    y = b.op("multiply", b.op("nn.relu", y), scale)  # after a relu: stays
    g = b.done(y)
    out = simplify(g)
    assert ops(out) == ["nn.conv2d", "nn.bias_add", "nn.relu", "multiply"]
    assert str(simplify(out)) == str(out)
    assert_close(g, out)


@pytest.fixture
def probe() -> Iterator[Callable[..., str]]:
    added: list[str] = []

    def make(name: str, **traits: Any) -> str:
        full = f"probe.{name}"
        register_op(full, infer=lambda attrs, a, b: a, num_inputs=2, layout=Layout.ELEMENTWISE, **traits)(
            lambda ctx, a, b: (a * b).astype(a.dtype)
        )
        added.append(full)
        return full

    yield make
    for name in added:
        REGISTRY.pop(name, None)


def test_the_pass_follows_the_affine_trait_not_the_name(probe: Callable[..., str]) -> None:
    def graph(op: str) -> Graph:
        b = Builder(x=(1, 2, 4, 4))
        return b.done(b.op(op, _conv(b, b.x["x"], 2, 3), b.randc(1, 3, 1, 1)))

    scaled = graph(probe("scale", affine=Affine.SCALE))
    out = fold_scale_shift(scaled)
    assert ops(out) == ["nn.conv2d", "nn.bias_add"]
    assert_close(scaled, out)
    opaque = graph(probe("opaque"))
    assert ops(fold_scale_shift(opaque)) == ["nn.conv2d", "probe.opaque"]
    assert {get_op(o).affine for o in ("multiply", "add", "nn.bias_add")} == {Affine.SCALE, Affine.SHIFT}


@pytest.mark.parametrize("traits", [{"affine": "scale"}, {"affine": Affine.SCALE, "num_inputs": 1}])
def test_register_op_refuses_an_affine_trait_that_does_not_fit(traits: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match="affine must be an Affine"):
        register_op("probe.bad", infer=same_as_input, layout=Layout.ELEMENTWISE, **traits)
    assert "probe.bad" not in REGISTRY


# --------------------------------------------------------------------------------------
# Caffe2-style models against ONNX Runtime


def _reads_a_layer(node: Any) -> bool:
    """``node`` reads a linear layer's output, directly or through its ``nn.bias_add``."""
    for v in node.inputs:
        p = v.producer
        if p is not None and p.op == "nn.bias_add":
            p = p.inputs[0].producer
        if p is not None and p.op != "call" and get_op(p.op).channel_axes is not None:
            return True
    return False


# (model, its Mul/Add pairs after a conv, pairs after something else: DenseNet's pre-activations)
CAFFE2_MODELS = [(modelgen.inception_v2_caffe2, 69, 0), (modelgen.densenet121_caffe2, 59, 62)]


@pytest.mark.parametrize(("make", "after_conv", "standalone"), CAFFE2_MODELS)
def test_caffe2_models_fold_and_match_onnxruntime(make, after_conv, standalone):
    from ort_helpers import ort_outputs

    model = make(64)
    unfolded = accel.import_onnx(model, optimize=False)
    g = accel.import_onnx(model)

    def affine(graph: Graph) -> list[Any]:
        return [n for n in graph.nodes if n.op in ("multiply", "add")]

    assert sum(n.op == "multiply" and _reads_a_layer(n) for n in affine(unfolded)) == after_conv
    assert len(affine(unfolded)) == 2 * (after_conv + standalone)
    kept = affine(g)
    assert len(kept) == 2 * standalone and not [n.name for n in kept if _reads_a_layer(n)]
    assert {n.inputs[0].producer.op for n in kept if n.op == "multiply"} <= {
        "concatenate",
        "nn.max_pool2d",
        "nn.avg_pool2d",
    }
    assert_close(unfolded, g)
    (feed,) = modelgen.random_inputs(model)
    got = accel.execute(g, feed)[modelgen.OUTPUT_NAME]
    for optimize in (False, True):  # as written, and with ONNX Runtime's own Conv+Mul+Add fusions
        (want,) = ort_outputs(model, feed, optimize=optimize)
        err = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())
        assert err <= RTOL, f"relative error {err:.3g} against onnxruntime (optimize={optimize})"


def test_caffe2_model_generation_is_seeded():
    a, b = modelgen.densenet121_caffe2(32, seed=3), modelgen.densenet121_caffe2(32, seed=3)
    assert a.SerializeToString() == b.SerializeToString()
    assert (
        modelgen.inception_v2_caffe2(32, seed=1).SerializeToString()
        != modelgen.inception_v2_caffe2(32).SerializeToString()
    )
