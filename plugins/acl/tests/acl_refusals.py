"""What acl refuses, each with the reason the partition report gives (the conformance kit checks them)."""

from __future__ import annotations

import acl_cases as cases
from accel_sdk.testing import Refusal

from accel.builder import GraphBuilder


def _pool(op: str, dtype: str, **attrs) -> GraphBuilder:
    b = GraphBuilder(x=cases.qtype((1, 4, 12, 12), dtype, 0.1, 3) if dtype != "float32" else (1, 4, 12, 12))
    return b.done(b.op(op, b.x["x"], pool_size=(2, 2), **attrs))


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
        Refusal(
            "batch 2",
            cases.conv_fp32((2, 8, 12, 12), 8, bias=False, act=None),
            "acl.conv2d: batch=2, batch must = 1",
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
            "add of shapes [1, 4, 8, 8] and [1, 4, 1, 1]: broadcasting is not supported, shapes must be equal",
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
    return out
