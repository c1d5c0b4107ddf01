"""accel-sdk's conformance kit on the acl backend: every composite and op against accel's reference
(float32 within 1e-5, quantized bit-exact), and what the backend refuses with the reason a user
reads in `accel inspect`."""

from __future__ import annotations

import acl_cases as cases
from accel_acl import AclBackend
from accel_sdk.testing import BackendConformance, Case
from acl_refusals import refusals


class TestConformance(BackendConformance):
    backend = AclBackend
    # oneDNN sums convolutions and averages in another order than the reference
    rtol = 1e-5
    atol = 1e-5
    threads = 4

    def cases(self):
        return [
            Case("conv_bias_relu", cases.conv_fp32()),
            Case(
                "conv_pad_stride_relu6",
                cases.conv_fp32(strides=(2, 2), padding=(0, 1, 1, 0), act="relu6", pad=(1, 0, 2, 1)),
            ),
            Case("conv_dilated_bounded", cases.conv_fp32(dilation=(2, 1), bias=False, act="bounded")),
            Case("depthwise3x3_s1", cases.conv_fp32((1, 8, 9, 10), 8, groups=8, act="relu6")),
            Case(
                "depthwise5x5_s2",
                cases.conv_fp32((1, 8, 11, 9), 8, (5, 5), strides=(2, 2), padding=(2, 2, 2, 2), groups=8),
            ),
            Case("network_fp32", cases.network_fp32()),
            # any batch (TVM's ACL integration took batch 1 only)
            Case("conv_batch3", cases.conv_fp32((3, 8, 12, 11))),
            Case("depthwise_batch2", cases.conv_fp32((2, 8, 9, 10), 8, strides=(2, 2), groups=8, act="relu6")),
            Case("pools_batch3", cases.batch_pools(3)),
            Case("qnn_conv_batch2", cases.qnn_conv((2, 8, 10, 9), relu=True)),
            Case("qnn_depthwise_batch2_int8", cases.qnn_conv((2, 8, 9, 10), 8, dtype="int8", groups=8)),
            Case("qnn_pools_batch2", cases.batch_pools(2, "uint8")),
            Case("channel_affine", cases.channel_affine()),
            Case("channel_affine_batch2", cases.channel_affine(2)),
            Case("max_pools", cases.max_pools()),
            Case("l2_pool", cases.l2_pool()),
            Case("qnn_conv_uint8_per_channel", cases.qnn_conv(relu=True, pad=(1, 0, 0, 1))),
            Case("qnn_conv_int8_per_tensor", cases.qnn_conv(dtype="int8", per_channel=False, strides=(2, 2))),
            Case("qnn_depthwise_uint8", cases.qnn_conv((1, 8, 9, 10), 8, groups=8, bias=False)),
            Case("qnn_dense_uint8", cases.qnn_dense("uint8")),
            Case("qnn_dense_int8_per_tensor", cases.qnn_dense("int8", per_channel=False, bias=False)),
            Case("qnn_network_uint8", cases.qnn_network("uint8")),
            Case("qnn_ops_uint8", cases.qnn_network("uint8", conv=False)),
            Case("qnn_ops_int8", cases.qnn_network("int8", conv=False)),
            Case("quantized_head_uint8", cases.quantized_head("uint8")),
            Case("quantized_head_int8_wide", cases.quantized_head("int8", scale=0.9)),
            Case("quantize_conv_uint8", cases.quantize_conv("uint8")),
            Case("quantize_conv_int8", cases.quantize_conv("int8")),
            Case("softmax_rows", cases.softmax_fp32()),
            Case("softmax_4d", cases.softmax_fp32((2, 8, 3, 5))),
            Case("conv_softmax", cases.conv_softmax()),
        ]

    def refusals(self):
        return refusals()
