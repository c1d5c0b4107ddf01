"""Small graphs for the ncnn tests, in the model's NCHW layout (the layout the backend takes).

:data:`EXAMPLES` has graphs for every row of the support table
(``accel_ncnn.support``) but the unary ones, whose graphs :func:`unary_graphs`
builds from the row alone; ``tests/test_ops.py`` runs them all. :func:`refusals`
has a graph for every reason the table gives.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from accel_sdk.testing import Refusal

from accel.builder import GraphBuilder
from accel.ir import Graph, TensorType

RNG = np.random.default_rng(2026)


def weights(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def conv(
    x=(1, 3, 12, 11), out=8, kernel=(3, 3), *, groups=1, bias=True, relu=True, clip=None, dtype="float32", **attrs
) -> Graph:
    """``nn.conv2d → nn.bias_add? → (nn.relu | clip)?`` with constant weights."""
    b = GraphBuilder(x=TensorType(x, dtype))
    w = weights(out, x[1] // groups, *kernel).astype(dtype)
    y = b.op("nn.conv2d", b.x["x"], b.const(w), groups=groups, **attrs)
    if bias:
        y = b.op("nn.bias_add", y, b.const(weights(out).astype(dtype)))
    if clip is not None:
        return b.done(b.op("clip", y, a_min=clip[0], a_max=clip[1]))
    return b.done(b.op("nn.relu", y) if relu else y)


def dense(m=1, k=48, n=10, *, bias=True, relu=False) -> Graph:
    """``nn.dense → nn.bias_add? → nn.relu?`` with constant weights."""
    b = GraphBuilder(x=(m, k))
    y = b.op("nn.dense", b.x["x"], b.const(weights(n, k)))
    y = b.op("nn.bias_add", y, b.const(weights(n)), axis=1) if bias else y
    return b.done(b.op("nn.relu", y) if relu else y)


def op(name: str, x=(1, 5, 9, 8), **attrs) -> Graph:
    b = GraphBuilder(x=x)
    return b.done(b.op(name, b.x["x"], **attrs))


def add(shape=(1, 6, 7, 5)) -> Graph:
    b = GraphBuilder(a=shape, b=shape)
    return b.done(b.op("add", b.x["a"], b.x["b"]))


def concat(shapes=((1, 3, 5, 4), (1, 2, 5, 4)), axis=1) -> Graph:
    """A sigmoid of each input, concatenated (a region that only moves data stays on the host)."""
    b = GraphBuilder(**{f"x{i}": s for i, s in enumerate(shapes)})
    xs = [b.op("sigmoid", b.x[f"x{i}"]) for i in range(len(shapes))]
    return b.done(b.op("concatenate", *xs, axis=axis))


def reshape(x, newshape) -> Graph:
    """A reshape between two sigmoids (a region that only moves data stays on the host)."""
    b = GraphBuilder(x=x)
    return b.done(b.op("sigmoid", b.op("reshape", b.op("sigmoid", b.x["x"]), newshape=newshape)))


def batch_norm(c=6, epsilon=1e-3) -> Graph:
    b = GraphBuilder(x=(1, c, 7, 5))
    var = np.abs(weights(c)) + 0.5
    y = b.op("nn.batch_norm", b.x["x"], *(b.const(a) for a in (weights(c), weights(c), weights(c), var)),
             epsilon=epsilon)  # fmt: skip
    return b.done(y)


def unary_graphs(name: str) -> list[Graph]:
    """A unary op on a 4-D activation and on a 2-D tensor."""
    return [op(name, shape) for shape in ((1, 6, 9, 7), (37, 53))]


#: Graphs for every row of the support table that is not unary: op or composite -> builders.
EXAMPLES: dict[str, list[Callable[[], Graph]]] = {
    "ncnn.conv2d": [
        lambda: conv(padding=(1, 1, 1, 1)),
        lambda: conv(bias=False, relu=False),
        lambda: conv((1, 4, 13, 10), 6, (3, 2), relu=False, strides=(2, 1), dilation=(2, 3), padding=(0, 2, 1, 0)),
        lambda: conv((1, 16, 16, 16), 32, (1, 1)),
        lambda: conv((1, 8, 9, 10), 8, groups=8, padding=(1, 1, 1, 1)),
        lambda: conv((1, 12, 11, 9), 12, (5, 5), groups=12, relu=False, strides=(2, 2), padding=(2, 2, 2, 2)),
        lambda: conv((1, 8, 9, 9), 12, groups=4, padding=(1, 1, 1, 1)),
        lambda: conv((1, 8, 10, 10), 16, clip=(0.0, 6.0), padding=(1, 1, 1, 1)),
        lambda: conv((1, 8, 10, 10), 8, groups=8, clip=(-0.5, 0.25), padding=(1, 1, 1, 1)),
    ],
    "ncnn.dense": [dense, lambda: dense(3, 100, 7, bias=False), lambda: dense(1, 64, 9, relu=True)],
    "add": [add, lambda: add((5, 33)), lambda: add((17,))],
    "clip": [lambda: op("clip", a_min=-0.2, a_max=0.3), lambda: op("clip", (4, 9), a_min=0.0, a_max=6.0)],
    "nn.max_pool2d": [
        lambda: op("nn.max_pool2d", pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1)),
        lambda: op("nn.max_pool2d", pool_size=(2, 2), strides=(2, 2), ceil_mode=True),
        lambda: op("nn.max_pool2d", pool_size=(3, 2), strides=(1, 2), padding=(0, 1, 2, 0)),
        lambda: op("nn.max_pool2d", (1, 4, 13, 13), pool_size=(3, 3), strides=(2, 2), ceil_mode=True),
    ],
    "nn.avg_pool2d": [
        lambda: op("nn.avg_pool2d", pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1)),
        lambda: op("nn.avg_pool2d", pool_size=(3, 3), padding=(1, 1, 1, 1), count_include_pad=True),
        lambda: op("nn.avg_pool2d", pool_size=(2, 3), strides=(2, 2), ceil_mode=True),
    ],
    "nn.global_avg_pool2d": [lambda: op("nn.global_avg_pool2d")],
    "nn.global_max_pool2d": [lambda: op("nn.global_max_pool2d", (1, 7, 6, 5))],
    "nn.lrn": [lambda: op("nn.lrn", (1, 9, 6, 5), size=5, alpha=1e-2, beta=0.75, bias=2.0),
               lambda: op("nn.lrn", (1, 4, 3, 3), size=3)],
    "nn.softmax": [lambda: op("nn.softmax", (1, 10)), lambda: op("nn.softmax", (1, 6, 4, 5), axis=1),
                   lambda: op("nn.softmax", (3, 7), axis=0), lambda: op("nn.softmax", (1, 6, 4, 5), axis=-1)],
    "concatenate": [concat, lambda: concat(((1, 3, 5, 4), (1, 3, 2, 4)), axis=2),
                    lambda: concat(((2, 3), (2, 5), (2, 1)), axis=1)],
    "reshape": [lambda: reshape((1, 8, 2, 3), (1, 48)), lambda: reshape((1, 12), (1, 3, 2, 2)),
                lambda: reshape((1, 6, 4, 4), (1, 6, 16))],
    "nn.batch_norm": [batch_norm],
}  # fmt: skip


def refusals() -> list[Refusal]:
    """A graph for every reason the support table gives, with the reason, as ``accel inspect`` shows it."""
    quantized = GraphBuilder(x=(1, 4))
    out = [
        Refusal("float64 conv", conv(dtype="float64", bias=False, relu=False),
                "ncnn.conv2d does not match: this nn.conv2d has dtype float64, expected float32"),
        Refusal("batch of two", conv((2, 3, 8, 8), bias=False, relu=False), "ncnn.conv2d: batch=2, batch must = 1"),
        Refusal("broadcasting add", _broadcasting_add(),
                "add of shapes [3, 4] and [4]: broadcasting is not supported, shapes must be equal"),
        Refusal("float64 relu", _float64("nn.relu"), "dtype='float64', dtype must be float32"),
        Refusal("rank-5 sigmoid", op("sigmoid", (1, 2, 3, 4, 5)), "rank=5, rank must be 1 to 4 (an ncnn Mat)"),
        Refusal("dilated pool", op("nn.max_pool2d", pool_size=(2, 2), dilation=(2, 1)),
                "dilation=[2, 1], dilation must = [1, 1]"),
        Refusal("pool of two images", op("nn.avg_pool2d", (2, 3, 6, 6), pool_size=(2, 2)), "batch=2, batch must = 1"),
        Refusal("ceil_mode counting padding",
                op("nn.avg_pool2d", pool_size=(2, 2), strides=(2, 2), ceil_mode=True, count_include_pad=True),
                "count_include_pad with ceil_mode is not supported: the last windows would count differently"),
        Refusal("softmax over the batch", op("nn.softmax", (1, 3, 4, 4), axis=0),
                "axis=0 is the batch axis; ncnn's Mat holds one image"),
        Refusal("even LRN window", op("nn.lrn", (1, 6, 4, 4), size=4),
                "size=4: ncnn's window of an even size starts one channel before the reference's"),
        Refusal("LRN of a rank-3 tensor", op("nn.lrn", (6, 4, 4), size=3), "rank=3, rank must = 4"),
        Refusal("quantize", quantized.done(quantized.op("qnn.quantize", quantized.x["x"], scale=0.1, zero_point=3)),
                "quantized graphs are not supported: this backend runs ncnn in float32 only (int8 is built out)"),
    ]  # fmt: skip
    b = GraphBuilder(x=(1, 3, 8, 8), w=(4, 3, 3, 3))
    out.append(Refusal("weights computed at run time", b.done(b.op("nn.conv2d", b.x["x"], b.x["w"])),
                       "ncnn.conv2d: the weights (input 1) of nn.conv2d are not a constant; ncnn reads constant "
                       "weights from its .bin when it loads"))  # fmt: skip
    b = GraphBuilder(x=(1, 4, 6, 6))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(4, 4, 1, 1)))
    y = b.op("nn.bias_add", y, b.const(weights(6)), axis=2)
    out.append(Refusal("bias along the height", b.done(y), "ncnn.conv2d: bias_add axis=2, bias_add axis must = 1"))
    b = GraphBuilder(x=(2, 3, 16))
    y = b.op("nn.dense", b.x["x"], b.const(weights(8, 16)))
    out.append(Refusal("dense of 3-D data", b.done(y), "ncnn.dense: data rank=3, data rank must = 2"))
    b = GraphBuilder(x=(4, 16))
    y = b.op("nn.bias_add", b.op("nn.dense", b.x["x"], b.const(weights(4, 16))), b.const(weights(4)), axis=0)
    out.append(Refusal("dense bias along the rows", b.done(y), "ncnn.dense: bias_add axis=0, bias_add axis must = 1"))
    b = GraphBuilder(x=(1, 3, 4, 4))
    y = b.op("add", b.x["x"], b.const(weights(1, 3, 4, 4)))
    out.append(Refusal("add of a constant", b.done(y),
                       "input 1 of add is a constant; ncnn takes data here only from layers"))  # fmt: skip
    b = GraphBuilder(x=(1, 3, 4, 4), g=(3,))
    consts = [b.const(weights(3)) for _ in range(3)]
    y = b.op("nn.batch_norm", b.x["x"], b.x["g"], *consts)
    out.append(
        Refusal(
            "batch norm of computed scales",
            b.done(y),
            "the gamma (input 1) of nn.batch_norm are not a constant; ncnn reads them from its .bin",
        )
    )
    return out


def _broadcasting_add() -> Graph:
    b = GraphBuilder(x=(3, 4), y=(4,))
    return b.done(b.op("add", b.x["x"], b.x["y"]))


def _float64(name: str) -> Graph:
    b = GraphBuilder(x=TensorType((2, 3), "float64"))
    return b.done(b.op(name, b.x["x"]))
