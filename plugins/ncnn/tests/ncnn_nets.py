"""Networks for the ncnn tests and benchmark besides accel's model generator: an AlexNet (with its
two LRNs), as ONNX, random weights, at a chosen resolution and width."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def alexnet(resolution: int = 224, *, width: int = 64, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """AlexNet as Caffe's reference has it (conv → relu → LRN → max pool twice, three convolutions,
    a pool, three fully connected layers, softmax); ``width`` is the first layer's channels (64 in
    torchvision's, 96 in the paper's), the others scale with it."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def const(name: str, shape: tuple[int, ...], fan_in: int) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name))
        return name

    def conv(x: str, cin: int, cout: int, k: int, stride: int, pad: int, name: str) -> str:
        w = const(f"{name}.w", (cout, cin, k, k), cin * k * k)
        b = const(f"{name}.b", (cout,), 1)
        nodes.append(helper.make_node("Conv", [x, w, b], [name], kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[pad] * 4))  # fmt: skip
        nodes.append(helper.make_node("Relu", [name], [f"{name}.relu"]))
        return f"{name}.relu"

    def pool(x: str, name: str) -> str:
        nodes.append(helper.make_node("MaxPool", [x], [name], kernel_shape=[3, 3], strides=[2, 2]))
        return name

    def lrn(x: str, name: str) -> str:
        nodes.append(helper.make_node("LRN", [x], [name], size=5, alpha=1e-4, beta=0.75, bias=1.0))
        return name

    def fc(x: str, din: int, dout: int, name: str, relu: bool) -> str:
        w = const(f"{name}.w", (dout, din), din)
        b = const(f"{name}.b", (dout,), 1)
        nodes.append(helper.make_node("Gemm", [x, w, b], [name], transB=1))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [f"{name}.relu"]))
        return f"{name}.relu"

    c1, c2, c3 = width, width * 3, width * 6
    x = pool(lrn(conv("input", 3, c1, 11, 4, 2, "conv1"), "lrn1"), "pool1")
    x = pool(lrn(conv(x, c1, c2, 5, 1, 2, "conv2"), "lrn2"), "pool2")
    x = conv(x, c2, c3, 3, 1, 1, "conv3")
    x = conv(x, c3, c2 + c2 // 3, 3, 1, 1, "conv4")
    x = pool(conv(x, c2 + c2 // 3, c2 + c2 // 3, 3, 1, 1, "conv5"), "pool5")
    side = (resolution + 4 - 11) // 4 + 1
    for _ in range(3):
        side = (side - 3) // 2 + 1
    features = (c2 + c2 // 3) * side * side
    nodes.append(helper.make_node("Flatten", [x], ["flat"], axis=1))
    x = fc("flat", features, 64 * width, "fc6", True)
    x = fc(x, 64 * width, 64 * width, "fc7", True)
    x = fc(x, 64 * width, num_classes, "fc8", False)
    nodes.append(helper.make_node("Softmax", [x], ["probabilities"], axis=1))
    graph = helper.make_graph(
        nodes,
        "alexnet",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, resolution, resolution])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, num_classes])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
