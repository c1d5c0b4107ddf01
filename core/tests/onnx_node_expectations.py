"""What the ONNX node-test suite (test_onnx_node_tests.py) expects of accel.

Three lists, each entry with its reason, kept honest by the suite itself:

- ``EXPECTED_FAILURES``: cases whose ops the frontend claims and that it
  imports, but whose result is known to be wrong or that an IR op rejects.
  A listed case that passes fails the suite as "unexpectedly passing".
- ``NOT_CLAIMED``: categories of typed refusals (UnsupportedOpError or
  ModelError raised by the frontend at import) that take a case out of what
  accel claims. A claimed-op case refused with a message that matches none of
  them fails the suite, and a category that matches no case fails it too.
- Cases that use an op the frontend does not convert at all (not in
  ``accel.frontend.onnx.SUPPORTED_OPS``) are "not claimed: op" without a list:
  the frontend's op table is the list.

Operands that fix a shape or a parameter (a Reshape's shape, a Resize's
sizes, Q/DQ scales ...) are graph inputs in many node tests; the IR is static,
so the frontend raises ``ConstantOperandRequired`` for them and the harness
binds those inputs to the case's data as initializers, then imports again.
Such cases count as claimed.
"""

from __future__ import annotations

EXPECTED_FAILURES: dict[str, str] = {
    "test_attention_4d_causal_fp16": (
        "float16 rounding: 2 of 192 outputs differ from the reference by 2 float16 ulps (relative 1.04e-3, "
        "just over rtol=1e-3); the reference and accel both compute in float16, in a different order"
    ),
    "test_attention_4d_causal_fp16_expanded": (
        "float16 rounding, as test_attention_4d_causal_fp16: the same 2 of 192 outputs 2 float16 ulps off"
    ),
}

#: category -> (regular expression searched in the refusal message, reason)
NOT_CLAIMED: dict[str, tuple[str, str]] = {
    "dtype": (
        r"has dtype (bfloat16|float8\w*|float4\w*|float6\w*|u?int4|u?int2|string|complex\w*)\b",
        "the IR has no such dtype (bfloat16, float8/6/4, 2- and 4-bit integers, strings, complex)",
    ),
    "old-opset": (
        r"uses opset \d+ of the default ONNX domain; accel supports opsets",
        "opsets older than 7 (the legacy 'broadcast' attribute era) are refused; convert the model",
    ),
    "computed-shape-operand": (
        r"is computed at run time; accel needs it constant",
        "an operand fixing a shape (here Pad's pads) is computed from run-time inputs inside the model; "
        "the IR is static and the harness only binds graph inputs",
    ),
    "window-rank": (
        r"\d-D (windows|transposed convolution) are not supported|\d-D transposed convolution is not supported",
        "3-D convolutions and LpPool: the IR has 2-D window ops only (1-D runs as 2-D; 3-D max and average "
        "pooling are separable and run as two 2-D pools)",
    ),
    "training": (
        r"training-mode Dropout|training mode \(running statistics",
        "training-mode Dropout (random) and BatchNormalization (running statistics) are inference-only here",
    ),
    "maxpool-indices": (r"the Indices output is not supported", "MaxPool's Indices output has no IR op"),
    "blocked-quant": (r"blocked quantization", "blocked (rank > 1 scale) quantization is not in QuantParams"),
    "quant-16bit": (
        r"quantizing to u?int16 is not supported|dequantizing u?int16 data is not supported",
        "qnn.quantize targets uint8/int8 only",
    ),
    "non-tensor-input": (r"accel supports tensor inputs only", "sequence and optional inputs"),
}
