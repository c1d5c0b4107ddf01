"""What acl refuses, each with the reason the partition report gives (the conformance kit checks them)."""

from __future__ import annotations

from typing import Any

import acl_cases as cases
import numpy as np
from accel_sdk.testing import Refusal

from accel.builder import GraphBuilder
from accel.ir import QuantParams, TensorType


def _pool(op: str, dtype: str, **attrs) -> GraphBuilder:
    b = GraphBuilder(x=cases.qtype((1, 4, 12, 12), dtype, 0.1, 3) if dtype != "float32" else (1, 4, 12, 12))
    return b.done(b.op(op, b.x["x"], pool_size=(2, 2), **attrs))


#: Why acl refuses a tensor of more than 6 dimensions.
TOO_MANY_DIMS = "rank=7, rank must be <= 6: Arm Compute Library's tensors have at most 6 dimensions"
SHAPE7 = (2, 1, 2, 1, 3, 4, 5)


def _rank7(what: str, op: str, x: Any = SHAPE7, **attrs: Any) -> Refusal:
    """``op`` of one rank-7 input ``x`` (a shape, or a quantized type), refused for its rank."""
    b = GraphBuilder(x=x)
    return Refusal(f"{what} of a rank-7 tensor", b.done(b.op(op, b.x["x"], **attrs)), TOO_MANY_DIMS)


def refusals() -> list[Refusal]:
    out = [
        Refusal(
            "uint8 max pool with dilation (3, 2)",
            _pool("nn.max_pool2d", "uint8", dilation=(3, 2)),
            "dilation=[3, 2], dilation must = [1, 1]",
        ),
        Refusal(
            "float32 avg pool with dilation (3, 2)",
            _pool("nn.avg_pool2d", "float32", dilation=(3, 2)),
            "dilation=[3, 2], dilation must = [1, 1]",
        ),
        Refusal(
            "depthwise 7x7",
            cases.conv_fp32((1, 8, 12, 12), 8, (7, 7), padding=(3, 3, 3, 3), groups=8, bias=False, act=None),
            "acl.conv2d: depthwise kernel size=[7, 7], kernel size must be [3, 3] or [5, 5]",
        ),
        Refusal(
            "groups=2",
            cases.conv_fp32((1, 8, 12, 12), 8, groups=2, bias=False, act=None),
            "acl.conv2d: groups=2, groups must = 1 or the channel count 8 with as many outputs (depthwise); "
            "other grouped convolutions are not supported",
        ),
    ]
    b = GraphBuilder(x=(1, 4, 8, 8), w=(4, 4, 3, 3))
    y = b.op("nn.conv2d", b.x["x"], b.x["w"], padding=(1, 1, 1, 1))
    out.append(
        Refusal(
            "conv with non-constant weights",
            b.done(y),
            "acl.conv2d: the weights (input 1) of nn.conv2d are not a constant; acl packs constant weights only",
        )
    )
    b = GraphBuilder(x=(1, 4, 8, 8), y=(1, 4, 1, 1))
    out.append(
        Refusal(
            "broadcasting add",
            b.done(b.op("add", b.x["x"], b.x["y"])),
            "add of shapes [1, 4, 8, 8] and [1, 4, 1, 1]: broadcasting is not supported, shapes must be equal "
            "(or, for add and multiply, one a per-channel constant)",
        )
    )
    # depthwise strides: both axes are checked, not one pair twice
    for strides in ((1, 3), (3, 3), (2, 1)):
        out.append(
            Refusal(
                f"depthwise strides {strides}",
                cases.conv_fp32((1, 8, 12, 12), 8, strides=strides, groups=8, bias=False, act=None),
                f"acl.conv2d: depthwise strides=[{strides[0]}, {strides[1]}], strides must be [1, 1] or [2, 2]",
            )
        )
    b = GraphBuilder(x=(1, 8, 8, 8))
    y = b.op("nn.conv2d", b.x["x"], b.const(cases.weights(8, 8, 3, 3)), padding=(1, 1, 1, 1))
    out.append(
        Refusal(
            "bias added along the height",
            b.done(b.op("nn.bias_add", y, b.const(cases.weights(8)), axis=2)),
            "acl.conv2d: bias_add axis=1, axis must = 3 (channels)",
        )
    )
    b = GraphBuilder(x=(1, 3, 4))
    out.append(
        Refusal(
            "dense of 3-D data",
            b.done(b.op("nn.dense", b.x["x"], b.const(cases.weights(5, 4)))),
            "acl.dense: dense data rank=3, rank must = 2",
        )
    )
    b = GraphBuilder(x=(1, 4, 8, 8))
    out.append(
        Refusal(
            "float16 relu",
            b.done(b.op("nn.relu", b.op("cast", b.x["x"], dtype="float16"))),
            "dtype='float16', dtype must be float32",
        )
    )
    # a per-channel scale must be a constant, and only add and multiply broadcast
    b = GraphBuilder(x=(1, 4, 8, 8), s=(1, 4, 1, 1))
    y = b.op("nn.conv2d", b.x["x"], b.const(cases.weights(4, 4, 1, 1)))
    out.append(
        Refusal(
            "multiply by a per-channel input",
            b.done(b.op("multiply", y, b.x["s"])),
            "multiply of shapes [1, 8, 8, 4] and [1, 1, 1, 4]: broadcasting is not supported, shapes must be "
            "equal (or, for add and multiply, one a per-channel constant)",
        )
    )
    b = GraphBuilder(x=(1, 4, 8, 8))
    y = b.op("nn.conv2d", b.x["x"], b.const(cases.weights(4, 4, 1, 1)))
    out.append(
        Refusal(
            "maximum with a per-channel constant",
            b.done(b.op("maximum", y, b.const(cases.weights(4, 1, 1)))),
            "maximum of shapes [1, 8, 8, 4] and [1, 1, 1, 4]: broadcasting is not supported, shapes must be "
            "equal (or, for add and multiply, one a per-channel constant)",
        )
    )
    b = GraphBuilder(x=(1, 4, 9, 9))
    pool = b.op("nn.avg_pool2d", b.x["x"], pool_size=(2, 2), strides=(2, 2), ceil_mode=True, count_include_pad=True)
    out.append(
        Refusal(
            "average pool in ceil mode counting the padding",
            b.done(pool),
            "ceil_mode with count_include_pad is not supported: the windows past the edge count differently",
        )
    )
    b = GraphBuilder(x=cases.qtype((1, 4, 8, 8), "uint8", 0.1, 3), y=cases.qtype((1, 4, 1, 1), "uint8", 0.2, 3))
    out.append(
        Refusal(
            "broadcasting qnn.add",
            b.done(b.op("qnn.add", b.x["x"], b.x["y"], out_scale=0.3, out_zero_point=2)),
            "qnn.add of shapes [1, 4, 8, 8] and [1, 4, 1, 1]: broadcasting is not supported, shapes must be equal",
        )
    )
    b = GraphBuilder(x=(1, 4, 8, 8))
    out.append(
        Refusal(
            "clip(-1, 1)",
            b.done(b.op("clip", b.x["x"], a_min=-1.0, a_max=1.0)),
            "clip(-1.0, 1.0): only clip(0, a) with a > 0 (bounded ReLU) is supported",
        )
    )
    # what Arm Compute Library's functions refuse (validate() on an Arm machine), refused on every machine
    b = GraphBuilder(x=(2, 2, 3, 4, 5), y=(2, 2, 3, 4, 5))
    out.append(
        Refusal(
            "concatenate of rank-5 tensors on axis 0",
            b.done(b.op("concatenate", b.op("nn.relu", b.x["x"]), b.op("nn.relu", b.x["y"]), axis=0)),
            "concatenate axis=0 of rank-5 tensors, axis must be >= 1: Arm Compute Library joins along its 4 "
            "innermost dimensions only (NEConcatenateLayer: Axis not supported)",
        )
    )
    b = GraphBuilder(x=SHAPE7, y=SHAPE7)
    out.append(
        Refusal(
            "add of rank-7 tensors",
            b.done(b.op("add", b.x["x"], b.x["y"])),
            TOO_MANY_DIMS,
        )
    )
    out.append(_rank7("relu", "nn.relu"))
    out.append(_rank7("clip(0, 6)", "clip", a_min=0.0, a_max=6.0))
    b = GraphBuilder(x=SHAPE7, y=SHAPE7)
    out.append(
        Refusal(
            "concatenate of rank-7 tensors on the last axis",
            b.done(b.op("concatenate", b.op("nn.relu", b.x["x"]), b.op("nn.relu", b.x["y"]), axis=6)),
            TOO_MANY_DIMS,
        )
    )
    b = GraphBuilder(x=(2, 3, 4, 5, 6, 7))
    out.append(
        Refusal(
            "reshape to rank 7",
            b.done(b.op("reshape", b.x["x"], newshape=(2, 3, 4, 5, 6, 7, 1))),
            TOO_MANY_DIMS,
        )
    )
    b = GraphBuilder(x=(3, 10))
    out.append(
        Refusal(
            "softmax along the first of two axes",
            b.done(b.op("nn.softmax", b.x["x"], axis=0)),
            "softmax axis=0, axis must = 1 (the last)",
        )
    )
    b = GraphBuilder(x=(1, 4, 6, 5))
    out.append(
        Refusal(
            "softmax along the height (NHWC axis 1)",
            b.done(b.op("nn.softmax", b.op("nn.conv2d", b.x["x"], b.const(cases.weights(4, 4, 1, 1))), axis=2)),
            "softmax axis=1, axis must = 3 (the last)",
        )
    )
    b = GraphBuilder(x=(2, 3, 4, 5, 6))
    out.append(
        Refusal(
            "softmax of a rank-5 tensor",
            b.done(b.op("nn.softmax", b.x["x"], axis=-1)),
            "rank=5, rank must be <= 4: NESoftmaxLayer takes at most 4 dimensions",
        )
    )
    b = GraphBuilder(x=(3, 10))
    out.append(
        Refusal(
            "float16 softmax",
            b.done(b.op("nn.softmax", b.op("cast", b.x["x"], dtype="float16"), axis=-1)),
            "dtype='float16', dtype must be float32",
        )
    )
    per_axis = QuantParams(np.float32([0.1, 0.2, 0.3]), np.int32([0, 1, 2]), 1)
    b = GraphBuilder(x=TensorType((2, 3), "uint8", per_axis))
    out.append(
        Refusal(
            "dequantize per axis",
            b.done(b.op("qnn.dequantize", b.x["x"])),
            "data must be quantized per tensor",
        )
    )
    b = GraphBuilder(x=(2, 3))
    out.append(
        Refusal(
            "quantize per axis",
            b.done(b.op("qnn.quantize", b.x["x"], scale=[0.1, 0.2, 0.3], zero_point=[0, 1, 2], axis=1)),
            "output must be quantized per tensor",
        )
    )
    b = GraphBuilder(x=(2, 3))
    out.append(
        Refusal(
            "quantize to int32",
            b.done(b.op("qnn.quantize", b.x["x"], scale=0.01, zero_point=0, out_dtype="int32")),
            "output dtype='int32', dtype must be uint8 or int8",
        )
    )
    b = GraphBuilder(x=(2, 3))
    out.append(
        Refusal(
            "quantize of float16",
            b.done(b.op("qnn.quantize", b.op("cast", b.x["x"], dtype="float16"), scale=0.01, zero_point=0)),
            "dtype='float16', dtype must be float32",
        )
    )
    out.append(_rank7("quantize", "qnn.quantize", scale=0.01, zero_point=0))
    out.append(_rank7("dequantize", "qnn.dequantize", cases.qtype(SHAPE7, "uint8", 0.01, 3)))
    b = GraphBuilder(x=cases.qtype((2, 3), "int32", 0.01, 0))
    out.append(
        Refusal(
            "dequantize of int32",
            b.done(b.op("qnn.dequantize", b.x["x"])),
            "data dtype='int32', dtype must be uint8 or int8",
        )
    )
    return out
