"""Realistic test networks built with ``onnx.helper``: ResNet-18/50, MobileNetV2, DenseNet-121,
a transformer encoder, Caffe2-style Inception v2 and DenseNet-121; and ``chain``, a network
of any depth for scale tests.

The graphs have the shape of what PyTorch's exporter writes for torchvision's
models in eval mode (Conv + BatchNormalization, Relu, MaxPool, residual Add,
GlobalAveragePool, Flatten, Gemm; MobileNetV2's ReLU6 as ``Clip`` with min/max
fed by ``Constant`` nodes, depthwise convs as ``group=C``), with random weights
drawn from a fixed seed. Weights are He-initialized and the batch norms carry
non-trivial random statistics in ranges that keep activations of order one
(standard deviations between about 0.5 and 7) through the whole depth, so
quantization and tolerance checks on them are meaningful.

The Caffe2-style models have the shape of the ONNX model zoo's conversions
from Caffe2 (``inception_v2``, ``densenet121``): convolutions with a bias
input, and every batch norm exported as ``Mul`` and ``Add`` of ``[C, 1, 1]``
initializers (its folded scale and shift).

``quantize_qdq`` turns such a model into a QDQ model with ONNX Runtime's
static quantizer, the way users produce quantized models.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
INPUT_NAME = "input"
OUTPUT_NAME = "output"

__all__ = [
    "INPUT_NAME",
    "OPSET",
    "OUTPUT_NAME",
    "branching",
    "chain",
    "densenet121",
    "densenet121_caffe2",
    "inception_v2_caffe2",
    "mobilenet_v2",
    "quantize_qdq",
    "random_inputs",
    "resnet18",
    "resnet50",
    "transformer_encoder",
]


class _Builder:
    """Accumulates nodes and initializers of one graph with unique, exporter-like names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}

    def _name(self, op: str) -> str:
        n = self._count.get(op, 0)
        self._count[op] = n + 1
        return f"/{op}_{n}"

    def _init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: Sequence[str], **attrs: Any) -> str:
        name = self._name(op)
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, bias: bool = False) -> str:
        """Conv with He-normal weights (std = sqrt(2 / fan_in)), 'same'-style padding k // 2."""
        fan_in = cin // group * k * k
        w = self.rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(cout, cin // group, k, k)).astype(np.float32)
        base = self._name("conv_param")
        inputs = [x, self._init(f"{base}.weight", w)]
        if bias:
            inputs.append(self._init(f"{base}.bias", self.rng.normal(0.0, 0.05, size=cout).astype(np.float32)))
        p = k // 2
        return self.node(
            "Conv",
            inputs,
            dilations=[1, 1],
            group=group,
            kernel_shape=[k, k],
            pads=[p, p, p, p],
            strides=[stride, stride],
        )

    def bn(self, x: str, c: int, gain: float = 1.0) -> str:
        """BatchNormalization with random running statistics.

        ``mean``/``var`` are drawn near what a He-initialized conv produces on
        O(1) inputs, so the normalized output stays of order one; ``gain``
        scales gamma (a residual branch's last BN uses < 1, as trained ResNets
        tend to, so the residual stream grows slowly).
        """
        base = self._name("bn_param")
        gamma = (gain * self.rng.uniform(0.6, 1.4, size=c)).astype(np.float32)
        beta = self.rng.normal(0.0, 0.2, size=c).astype(np.float32)
        mean = self.rng.normal(0.0, 0.2, size=c).astype(np.float32)
        var = self.rng.uniform(0.6, 1.8, size=c).astype(np.float32)
        return self.node(
            "BatchNormalization",
            [
                x,
                self._init(f"{base}.weight", gamma),
                self._init(f"{base}.bias", beta),
                self._init(f"{base}.running_mean", mean),
                self._init(f"{base}.running_var", var),
            ],
            epsilon=1e-5,
            momentum=0.9,
        )

    def scale_shift(self, x: str, c: int) -> str:
        """A batch norm as Caffe2 exports it: ``Mul`` by its scale, ``Add`` of its shift, both ``[C, 1, 1]``.

        The scale and shift are those of :meth:`bn`'s random statistics
        (``gamma / sqrt(var + eps)`` and ``beta - mean · scale``).
        """
        base = self._name("scale_shift_param")
        gamma = self.rng.uniform(0.6, 1.4, size=c)
        beta = self.rng.normal(0.0, 0.2, size=c)
        mean = self.rng.normal(0.0, 0.2, size=c)
        var = self.rng.uniform(0.6, 1.8, size=c)
        scale = gamma / np.sqrt(var + 1e-5)
        shift = beta - mean * scale
        x = self.node("Mul", [x, self._init(f"{base}.scale", scale.astype(np.float32).reshape(c, 1, 1))])
        return self.node("Add", [x, self._init(f"{base}.shift", shift.astype(np.float32).reshape(c, 1, 1))])

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def relu6(self, x: str) -> str:
        """ReLU6 as torch exports it at opset >= 11: Clip(x, min, max) with Constant inputs."""
        lo = self.node("Constant", [], value=numpy_helper.from_array(np.array(0.0, np.float32)))
        hi = self.node("Constant", [], value=numpy_helper.from_array(np.array(6.0, np.float32)))
        return self.node("Clip", [x, lo, hi])

    def head(self, x: str, c: int, num_classes: int) -> str:
        """GlobalAveragePool -> Flatten -> Gemm(transB=1), named as the graph output."""
        x = self.node("GlobalAveragePool", [x])
        x = self.node("Flatten", [x], axis=1)
        w = self.rng.normal(0.0, np.sqrt(1.0 / c), size=(num_classes, c)).astype(np.float32)
        b = self.rng.normal(0.0, 0.05, size=num_classes).astype(np.float32)
        base = self._name("fc_param")
        name = self._name("Gemm")
        self.nodes.append(
            helper.make_node(
                "Gemm",
                [x, self._init(f"{base}.weight", w), self._init(f"{base}.bias", b)],
                [OUTPUT_NAME],
                name=name,
                alpha=1.0,
                beta=1.0,
                transB=1,
            )
        )
        return OUTPUT_NAME

    def model(self, graph_name: str, resolution: int, num_classes: int) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            graph_name,
            [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, [1, 3, resolution, resolution])],
            [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [1, num_classes])],
            self.inits,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="accel.testing.modelgen"
        )
        model.ir_version = 8  # what opset 17 exporters write; every onnxruntime since 1.13 reads it
        onnx.checker.check_model(model, full_check=True)
        return model


def _stem(b: _Builder, width: int) -> str:
    x = b.conv(INPUT_NAME, 3, width, 7, stride=2)
    x = b.relu(b.bn(x, width))
    return b.node("MaxPool", [x], ceil_mode=0, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])


def _check_resolution(resolution: int) -> None:
    # Five stride-2 stages: below 32 pixels the last stages would see empty feature maps.
    if resolution < 32:
        raise ValueError(f"resolution must be at least 32, got {resolution}")


def resnet18(resolution: int = 224, *, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 (basic blocks 2-2-2-2) with input ``[1, 3, resolution, resolution]``."""
    _check_resolution(resolution)
    b = _Builder(seed)
    x = _stem(b, 64)
    cin = 64
    for stage, (width, blocks) in enumerate([(64, 2), (128, 2), (256, 2), (512, 2)]):
        for i in range(blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            y = b.relu(b.bn(b.conv(x, cin, width, 3, stride=stride), width))
            y = b.bn(b.conv(y, width, width, 3), width, gain=0.5)
            short = x
            if stride != 1 or cin != width:
                short = b.bn(b.conv(x, cin, width, 1, stride=stride), width, gain=0.7)
            x = b.relu(b.node("Add", [y, short]))
            cin = width
    b.head(x, cin, num_classes)
    return b.model("resnet18", resolution, num_classes)


def resnet50(resolution: int = 224, *, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ResNet-50 (bottleneck blocks 3-4-6-3, stride on the 3x3 conv as in torchvision)."""
    _check_resolution(resolution)
    b = _Builder(seed)
    x = _stem(b, 64)
    cin = 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        cout = width * 4
        for i in range(blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            y = b.relu(b.bn(b.conv(x, cin, width, 1), width))
            y = b.relu(b.bn(b.conv(y, width, width, 3, stride=stride), width))
            y = b.bn(b.conv(y, width, cout, 1), cout, gain=0.5)
            short = x
            if stride != 1 or cin != cout:
                short = b.bn(b.conv(x, cin, cout, 1, stride=stride), cout, gain=0.7)
            x = b.relu(b.node("Add", [y, short]))
            cin = cout
    b.head(x, cin, num_classes)
    return b.model("resnet50", resolution, num_classes)


# (expansion t, output channels c, repeats n, first stride s), as in the MobileNetV2 paper.
_MBV2_SETTINGS = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def mobilenet_v2(resolution: int = 224, *, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (width 1.0): inverted residuals with depthwise 3x3 convs and ReLU6."""
    _check_resolution(resolution)
    b = _Builder(seed)
    x = b.relu6(b.bn(b.conv(INPUT_NAME, 3, 32, 3, stride=2), 32))
    cin = 32
    for t, c, n, s in _MBV2_SETTINGS:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = b.relu6(b.bn(b.conv(y, cin, hidden, 1), hidden))
            y = b.relu6(b.bn(b.conv(y, hidden, hidden, 3, stride=stride, group=hidden), hidden))
            # The linear bottleneck has no activation; as in He init for a linear layer, its
            # fan-in gain is 1 rather than 2, which ``gain`` approximates.
            y = b.bn(b.conv(y, hidden, c, 1), c, gain=0.7)
            x = b.node("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = b.relu6(b.bn(b.conv(x, cin, 1280, 1), 1280))
    b.head(x, 1280, num_classes)
    return b.model("mobilenet_v2", resolution, num_classes)


def _encoder_linear(b: _Builder, x: str, din: int, dout: int) -> str:
    """``x @ W + b`` as torch exports ``nn.Linear`` on 3-D data: MatMul with a [din, dout] initializer, then Add."""
    base = b._name("linear_param")
    w = b.rng.normal(0.0, np.sqrt(1.0 / din), size=(din, dout)).astype(np.float32)
    bias = b.rng.normal(0.0, 0.05, size=dout).astype(np.float32)
    y = b.node("MatMul", [x, b._init(f"{base}.weight", w)])
    return b.node("Add", [y, b._init(f"{base}.bias", bias)])


def _scalar(b: _Builder, value: float) -> str:
    return b._init(b._name("scalar"), np.array(value, np.float32))


def _gelu_tanh(b: _Builder, x: str) -> str:
    """``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``, op by op as torch exports it (GPT-2 / BERT's "gelu_new")."""
    half = b.node("Mul", [_scalar(b, 0.5), x])
    cube = b.node("Pow", [x, _scalar(b, 3.0)])
    inner = b.node("Add", [x, b.node("Mul", [_scalar(b, 0.044715), cube])])
    t = b.node("Tanh", [b.node("Mul", [_scalar(b, float(np.sqrt(2.0 / np.pi))), inner])])
    return b.node("Mul", [half, b.node("Add", [_scalar(b, 1.0), t])])


def _layer_norm(b: _Builder, x: str, dim: int) -> str:
    base = b._name("ln_param")
    gamma = b.rng.uniform(0.8, 1.2, size=dim).astype(np.float32)
    beta = b.rng.normal(0.0, 0.05, size=dim).astype(np.float32)
    return b.node(
        "LayerNormalization",
        [x, b._init(f"{base}.weight", gamma), b._init(f"{base}.bias", beta)],
        axis=-1,
        epsilon=1e-5,
    )


def transformer_encoder(
    seq: int = 128, *, dim: int = 256, heads: int = 4, ffn: int = 1024, layers: int = 2, batch: int = 1, seed: int = 0
) -> onnx.ModelProto:
    """A post-norm transformer encoder (BERT-style) with input and output ``[batch, seq, dim]``.

    Each layer: Q, K and V projections (MatMul + Add), heads split with
    Reshape/Transpose, ``softmax(Q K^T / sqrt(d)) V`` with batched MatMuls, the
    output projection, residual Add and LayerNormalization, then the feed-forward
    block with the tanh GELU written out op by op (as exporters write
    ``gelu_new``), residual Add and LayerNormalization.
    """
    if dim % heads != 0:
        raise ValueError(f"dim {dim} is not a multiple of heads {heads}")
    b = _Builder(seed)
    dh = dim // heads
    split = b._init("split_heads_shape", np.array([batch, seq, heads, dh], np.int64))
    merge = b._init("merge_heads_shape", np.array([batch, seq, dim], np.int64))
    x = INPUT_NAME
    for _ in range(layers):
        q, k, v = (
            b.node("Transpose", [b.node("Reshape", [_encoder_linear(b, x, dim, dim), split])], perm=perm)
            for perm in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])
        )
        scores = b.node("Div", [b.node("MatMul", [q, k]), _scalar(b, float(np.sqrt(dh)))])
        ctx = b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])
        ctx = b.node("Reshape", [b.node("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
        x = _layer_norm(b, b.node("Add", [x, _encoder_linear(b, ctx, dim, dim)]), dim)
        h = _gelu_tanh(b, _encoder_linear(b, x, dim, ffn))
        x = _layer_norm(b, b.node("Add", [x, _encoder_linear(b, h, ffn, dim)]), dim)
    last = b.nodes[-1]
    last.output[0] = OUTPUT_NAME
    graph = helper.make_graph(
        b.nodes,
        "transformer_encoder",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, [batch, seq, dim])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [batch, seq, dim])],
        b.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="accel.testing.modelgen"
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _input_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    inits = {t.name for t in model.graph.initializer}
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise ValueError(f"input {vi.name!r} has a symbolic shape; random_inputs needs static shapes")
        shapes[vi.name] = tuple(d.dim_value for d in dims)
    return shapes


def random_inputs(model: onnx.ModelProto, count: int = 1, *, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` feeds of standard-normal float32 data for the model's (static-shaped) inputs."""
    rng = np.random.default_rng(seed)
    shapes = _input_shapes(model)
    return [{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()} for _ in range(count)]


def quantize_qdq(
    model: onnx.ModelProto,
    calibration_inputs: int | Iterable[dict[str, np.ndarray] | np.ndarray] = 4,
    *,
    nodes_to_exclude: Sequence[str] | None = None,
    preprocess: bool = True,
    seed: int = 0,
) -> onnx.ModelProto:
    """Quantize ``model`` statically to QDQ form with ONNX Runtime's quantizer.

    Activations uint8 (asymmetric), weights int8 per channel, MinMax
    calibration over ``calibration_inputs``: an int (that many random inputs,
    drawn with ``seed``), or feeds (``{name: array}``, or bare arrays for a
    single-input model). With ``preprocess`` the model first goes through
    ``quant_pre_process`` (ORT's recommended step: shape inference and the
    basic graph optimizations that fold BatchNormalization into Conv), as a
    user of the quantizer would run it. ``nodes_to_exclude`` (ONNX node names)
    stay in float.
    """
    # onnxruntime is a test-time dependency of accel-core, not a runtime one.
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if isinstance(calibration_inputs, int):
        feeds = random_inputs(model, calibration_inputs, seed=seed)
    else:
        names = list(_input_shapes(model))
        feeds = []
        for item in calibration_inputs:
            if isinstance(item, dict):
                feeds.append({k: np.asarray(v, np.float32) for k, v in item.items()})
            elif len(names) == 1:
                feeds.append({names[0]: np.asarray(item, np.float32)})
            else:
                raise ValueError(f"model has inputs {names}; give calibration feeds as {{name: array}} dicts")
    if not feeds:
        raise ValueError("quantize_qdq needs at least one calibration input")

    class _Reader(CalibrationDataReader):
        def __init__(self, data: list[dict[str, np.ndarray]]):
            self._it: Iterator[dict[str, np.ndarray]] = iter(data)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    with tempfile.TemporaryDirectory(prefix="accel-qdq-") as tmp:
        src = Path(tmp) / "model.onnx"
        onnx.save_model(model, src)
        if preprocess:
            pre = Path(tmp) / "model.pre.onnx"
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
            src = pre
        dst = Path(tmp) / "model.qdq.onnx"
        quantize_static(
            str(src),
            str(dst),
            _Reader(feeds),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            nodes_to_exclude=list(nodes_to_exclude or []),
        )
        quantized = onnx.load_model(dst)
    onnx.checker.check_model(quantized)
    return quantized


def _dense_pre(b: _Builder, x: str, c: int) -> str:
    """DenseNet's pre-activation: BatchNormalization -> Relu."""
    return b.relu(b.bn(x, c))


def densenet121(resolution: int = 224, *, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """DenseNet-121 (dense blocks 6-12-24-16, growth rate 32, bottleneck width 4 x 32, compression 0.5).

    As torchvision exports it: every dense layer concatenates all the feature maps
    of its block so far (one ``Concat`` per layer), then BN -> ReLU -> 1x1 conv ->
    BN -> ReLU -> 3x3 conv; a transition is BN -> ReLU -> 1x1 conv -> 2x2 average
    pool; the head is BN -> ReLU -> global average pool -> classifier.
    """
    _check_resolution(resolution)
    growth, bottleneck = 32, 4 * 32
    b = _Builder(seed)
    x = _stem(b, 64)
    c = 64
    for block, layers in enumerate((6, 12, 24, 16)):
        features = [x]
        for _ in range(layers):
            cat = b.node("Concat", features, axis=1) if len(features) > 1 else features[0]
            y = b.conv(_dense_pre(b, cat, c), c, bottleneck, 1)
            features.append(b.conv(_dense_pre(b, y, bottleneck), bottleneck, growth, 3))
            c += growth
        x = b.node("Concat", features, axis=1)
        if block < 3:
            x = b.conv(_dense_pre(b, x, c), c, c // 2, 1)
            x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
            c //= 2
    b.head(_dense_pre(b, x, c), c, num_classes)
    return b.model("densenet121", resolution, num_classes)


def _conv_unit(b: _Builder, x: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
    """Inception v2's unit as Caffe2 exports it: Conv (with bias) → Mul → Add → Relu."""
    return b.relu(b.scale_shift(b.conv(x, cin, cout, k, stride=stride, bias=True), cout))


def _pool(b: _Builder, x: str, op: str, stride: int = 1) -> str:
    """A 3×3 pooling padded by one (``op``: ``MaxPool`` or ``AveragePool``)."""
    return b.node(op, [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride])


# Inception v2 (BN-Inception) blocks: (1x1, (3x3 reduce, 3x3), (double 3x3 reduce, double 3x3),
# pool, pool projection); a block without a 1x1 branch (0) halves the resolution, its pool
# passing the input through unprojected.
_INCEPTION_V2_BLOCKS = [
    (64, (64, 64), (64, 96), "AveragePool", 32),
    (64, (64, 96), (64, 96), "AveragePool", 64),
    (0, (128, 160), (64, 96), "MaxPool", 0),
    (224, (64, 96), (96, 128), "AveragePool", 128),
    (192, (96, 128), (96, 128), "AveragePool", 128),
    (160, (128, 160), (128, 160), "AveragePool", 96),
    (96, (128, 192), (160, 192), "AveragePool", 96),
    (0, (128, 192), (192, 256), "MaxPool", 0),
    (352, (192, 320), (160, 224), "AveragePool", 128),
    (352, (192, 320), (192, 224), "MaxPool", 128),
]


def inception_v2_caffe2(resolution: int = 224, *, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """Inception v2 (BN-Inception: ten inception blocks, two of them stride 2) in Caffe2's export style.

    Every convolution is Conv (with bias) → Mul → Add → Relu (:meth:`_Builder.scale_shift`);
    a block's branches (1×1; 1×1 → 3×3; 1×1 → 3×3 → 3×3; 3×3 pool → 1×1) are concatenated.
    The stem is 7×7/2 conv, 3×3/2 max pool, 1×1 and 3×3 convs, 3×3/2 max pool; the head
    global average pool → classifier. About 11 M parameters at any resolution.
    """
    _check_resolution(resolution)
    b = _Builder(seed)
    x = _conv_unit(b, INPUT_NAME, 3, 64, 7, stride=2)
    x = _pool(b, x, "MaxPool", stride=2)
    x = _conv_unit(b, x, 64, 64, 1)
    x = _conv_unit(b, x, 64, 192, 3)
    x = _pool(b, x, "MaxPool", stride=2)
    c = 192
    for one, (r3, c3), (rd, cd), pool, proj in _INCEPTION_V2_BLOCKS:
        stride = 2 if one == 0 else 1
        branches = [_conv_unit(b, x, c, one, 1)] if one else []
        branches.append(_conv_unit(b, _conv_unit(b, x, c, r3, 1), r3, c3, 3, stride=stride))
        y = _conv_unit(b, _conv_unit(b, x, c, rd, 1), rd, cd, 3)
        branches.append(_conv_unit(b, y, cd, cd, 3, stride=stride))
        y = _pool(b, x, pool, stride=stride)
        branches.append(_conv_unit(b, y, c, proj, 1) if proj else y)
        x = b.node("Concat", branches, axis=1)
        c = one + c3 + cd + (proj or c)
    b.head(x, c, num_classes)
    return b.model("inception_v2_caffe2", resolution, num_classes)


def densenet121_caffe2(resolution: int = 224, *, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """DenseNet-121 (dense blocks 6-12-24-16, growth rate 32) in Caffe2's export style.

    Every batch norm is Mul → Add (:meth:`_Builder.scale_shift`), convolutions have no bias.
    A dense layer is Mul → Add → Relu → 1×1 conv → Mul → Add → Relu → 3×3 conv, its
    output concatenated to the block's features so far (one two-input ``Concat`` per
    layer, as Caffe's DenseNet writes it); a transition is Mul → Add → Relu → 1×1 conv
    → 2×2 average pool; the head Mul → Add → Relu → global average pool → classifier.
    The batch norms after a concatenation (pre-activations) read no convolution.
    """
    _check_resolution(resolution)
    growth, bottleneck = 32, 4 * 32
    b = _Builder(seed)
    x = b.relu(b.scale_shift(b.conv(INPUT_NAME, 3, 64, 7, stride=2), 64))
    x = _pool(b, x, "MaxPool", stride=2)
    c = 64
    for block, layers in enumerate((6, 12, 24, 16)):
        for _ in range(layers):
            y = b.conv(b.relu(b.scale_shift(x, c)), c, bottleneck, 1)
            y = b.conv(b.relu(b.scale_shift(y, bottleneck)), bottleneck, growth, 3)
            x = b.node("Concat", [x, y], axis=1)
            c += growth
        if block < 3:
            x = b.conv(b.relu(b.scale_shift(x, c)), c, c // 2, 1)
            x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
            c //= 2
    b.head(b.relu(b.scale_shift(x, c)), c, num_classes)
    return b.model("densenet121_caffe2", resolution, num_classes)


def chain(n_nodes: int = 100_000, *, channels: int = 4, resolution: int = 8, seed: int = 0) -> onnx.ModelProto:
    """A chain of about ``n_nodes`` ONNX nodes, for scale tests: residual blocks Conv → Relu → Sigmoid → Add.

    Each block is four nodes, ``x + sigmoid(relu(conv3x3(x)))`` on ``[1, channels,
    resolution, resolution]`` tensors (``n_nodes // 4`` blocks), the depth of the
    graphs that real exports of large transformer models reach. The model is
    checked with ``onnx.checker`` (without its full shape inference, slow at this size).
    """
    if n_nodes < 4:
        raise ValueError(f"a chain has at least one block of 4 nodes, got n_nodes={n_nodes}")
    b = _Builder(seed)
    x = INPUT_NAME
    for _ in range(n_nodes // 4):
        y = b.node("Sigmoid", [b.relu(b.conv(x, channels, channels, 3))])
        x = b.node("Add", [x, y])
    shape = [1, channels, resolution, resolution]
    graph = helper.make_graph(
        b.nodes,
        "chain",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
        b.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="accel.testing.modelgen"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def branching(n_nodes: int = 100_000, *, channels: int = 4, resolution: int = 4, seed: int = 0) -> onnx.ModelProto:
    """About ``n_nodes`` ONNX nodes of residual blocks with side branches, for scale tests of partitioning.

    Each block is ``x + f(x)`` with ``f`` a Relu, a 1x1 MaxPool and, at random, a
    branch that rejoins (``+ abs(relu)``, three in ten blocks), a Tanh (15 in 100)
    and a Sigmoid (one in ten), on ``[1, channels, resolution, resolution]``
    tensors: a backend that takes the relus, pools and adds gets many small
    partitions between the host's ops. The graph is the one
    ``core/benchmarks/bench_partition.py`` partitions (the same random draws); its
    names are short (node ``n<k>`` writes ``v<k>``), as the benchmarks have always had them.
    """
    if n_nodes < 3:
        raise ValueError(f"a branching graph has at least one block of 3 nodes, got n_nodes={n_nodes}")
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []

    def node(op: str, *inputs: str, **attrs: Any) -> str:
        out = f"v{len(nodes) + 1}"
        nodes.append(helper.make_node(op, list(inputs), [out], name=f"n{len(nodes) + 1}", **attrs))
        return out

    x = INPUT_NAME
    while len(nodes) < n_nodes:
        a = node("Relu", x)
        y = node("MaxPool", a, kernel_shape=[1, 1])
        if rng.random() < 0.3:  # a branch that rejoins
            y = node("Add", y, node("Abs", a))
        if rng.random() < 0.15:  # ops a backend of relus, pools and adds leaves to the host
            y = node("Tanh", y)
        if rng.random() < 0.1:
            y = node("Sigmoid", y)
        x = node("Add", y, x)  # residual
    shape = [1, channels, resolution, resolution]
    graph = helper.make_graph(
        nodes,
        "branching",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="accel.testing.modelgen"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
