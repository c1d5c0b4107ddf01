"""accel-sdk's conformance kit on the ncnn backend: every row of the support table against accel's
reference (float32 within 1e-5), the blob's validation, concurrent runs, and what the backend
refuses with the reason a user reads in `accel inspect`."""

from __future__ import annotations

from accel_ncnn import NcnnBackend
from accel_ncnn.support import OPS
from accel_sdk.testing import BackendConformance, Case
from ncnn_graphs import batch_norm, conv, dense, op, refusals, weights

from accel.builder import GraphBuilder


def conv_bias_relu_pool() -> Case:
    """The composite with all its ops, then a padded, strided max pool in ceil mode."""
    b = GraphBuilder(x=(1, 3, 12, 11))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(8, 3, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(weights(8))))
    y = b.op("nn.max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)
    # ncnn's max drops NaN where the reference keeps it: no edge values here (README.md, "NaN")
    return Case("conv_bias_relu_pool", b.done(y), edge_values=False)


def depthwise_pools() -> Case:
    """A strided depthwise convolution, an average pool counting its padding and a global average pool."""
    b = GraphBuilder(x=(1, 8, 13, 10))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(8, 1, 3, 3)), groups=8, strides=(2, 2), padding=(1, 1, 1, 1))
    y = b.op("nn.avg_pool2d", y, pool_size=(3, 3), padding=(1, 1, 1, 1), count_include_pad=True)
    return Case("depthwise_pools", b.done(y, b.op("nn.global_avg_pool2d", y)))


def residual() -> Case:
    """A residual block's end: a composite, add and relu, two graph inputs."""
    b = GraphBuilder(x=(1, 5, 7, 7), skip=(1, 5, 7, 7))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(5, 5, 1, 1)))
    return Case("residual", b.done(b.op("nn.relu", b.op("add", y, b.x["skip"]))))


def unary_ops() -> Case:
    """Every unary row of the support table on one input, an output each (a new row is in it at once)."""
    b = GraphBuilder(x=(1, 6, 9, 7))
    # ncnn's sigmoid gives a number for NaN: no edge values here; relu keeps NaN and runs them (case "relu")
    return Case("unary_ops", b.done(*(b.op(op, b.x["x"]) for op, row in OPS.items() if row.unary)), edge_values=False)


def branches_concat() -> Case:
    """Two convolutions of one input (ncnn splits the blob) concatenated along the channels."""
    b = GraphBuilder(x=(1, 4, 9, 9))
    y1 = b.op("nn.conv2d", b.x["x"], b.const(weights(3, 4, 1, 1)))
    y2 = b.op("nn.conv2d", b.x["x"], b.const(weights(5, 4, 3, 3)), padding=(1, 1, 1, 1))
    return Case("branches_concat", b.done(b.op("concatenate", y1, y2, axis=1)))


def conv_flatten_dense() -> Case:
    """A classifier's end: convolution, global average pool, reshape to [1, C], dense, softmax."""
    b = GraphBuilder(x=(1, 3, 8, 8))
    y = b.op("nn.conv2d", b.x["x"], b.const(weights(16, 3, 3, 3)), padding=(1, 1, 1, 1))
    y = b.op("reshape", b.op("nn.global_avg_pool2d", y), newshape=(1, 16))
    y = b.op("nn.bias_add", b.op("nn.dense", y, b.const(weights(10, 16))), b.const(weights(10)), axis=1)
    return Case("conv_flatten_dense", b.done(b.op("nn.softmax", y)))


class TestConformance(BackendConformance):
    backend = NcnnBackend
    # ncnn sums convolutions (winograd, packed GEMM) and averages in another order than the reference
    rtol = 1e-4
    atol = 1e-4

    def cases(self):
        large = conv((1, 16, 16, 16), 32, padding=(1, 1, 1, 1), relu=False)  # enough work for every thread
        # ncnn's winograd 3x3 convolution turns an infinite input into NaN (inf - inf in its transforms)
        cases = [
            conv_bias_relu_pool(),
            depthwise_pools(),
            residual(),
            unary_ops(),
            Case("conv_large", large, edge_values=False),
        ]
        more = [
            Case("dense", dense(2, 64, 10)),
            Case("relu", op("nn.relu")),
            Case("clip", op("clip", a_min=0.0, a_max=6.0), edge_values=False),  # ncnn's clip maps NaN to a bound
            Case("lrn", op("nn.lrn", (1, 7, 5, 5), size=3), edge_values=False),  # ncnn's powf of inf: no NaN
            Case("softmax", op("nn.softmax", (1, 12)), edge_values=False),  # ncnn's softmax of inf: 0, not NaN
            branches_concat(),
            conv_flatten_dense(),
            Case("batch_norm", batch_norm()),
            Case("global_max", op("nn.global_max_pool2d"), edge_values=False),  # ncnn's max drops NaN
        ]
        return [*cases, *more]

    def refusals(self):
        return refusals()
