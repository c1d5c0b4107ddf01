"""ONNX handlers of elementwise ops (the IR ops of :mod:`accel.ops.elementwise`): activations,
unary and binary arithmetic, Clip, the variadic Max/Min/Sum/Mean, Softmax, comparisons and
logic, Where, Floor/Ceil, Mod."""

from __future__ import annotations

from onnx import NodeProto

from accel.errors import ModelError
from accel.frontend.onnx import _FLOATS, _Attrs, _Importer, _op, _prod, _rename
from accel.ir import Value
from accel.ops.registry import get_op

_UNARY = {
    "Relu": "nn.relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Sqrt": "sqrt",
    "Erf": "erf",
    "Exp": "exp",
    "Abs": "abs",
    "Neg": "negative",
}


@_op(*_UNARY)
def _unary(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    return [cv.emit(_UNARY[node.op_type], [x], out=node.output[0])]


@_op("LeakyRelu")
def _leaky_relu(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    return [cv.emit("nn.leaky_relu", [x], {"alpha": a.float("alpha", 0.01)}, out=node.output[0])]


@_op("Gelu")
def _gelu(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    approx = a.str("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ModelError(f"node {cv.label}: Gelu approximate={approx!r} must be 'none' or 'tanh'")
    return [cv.emit("nn.gelu", [x], {"approximate": approx}, out=node.output[0])]


def _scalar_like(cv: _Importer, value: float, x: Value) -> Value:
    return cv.scalar(value, x.type.dtype)


@_op("Reciprocal")
def _reciprocal(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    return [cv.emit("divide", [_scalar_like(cv, 1, x), x], out=node.output[0])]


@_op("HardSigmoid", "HardSwish")
def _hard_sigmoid(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    if node.op_type == "HardSwish":
        alpha, beta = 1.0 / 6.0, 0.5
    else:
        alpha, beta = a.float("alpha", 0.2), a.float("beta", 0.5)
    t = cv.emit("add", [cv.emit("multiply", [x, _scalar_like(cv, alpha, x)]), _scalar_like(cv, beta, x)])
    if node.op_type == "HardSigmoid":
        return [cv.emit("clip", [t], {"a_min": 0.0, "a_max": 1.0}, out=node.output[0])]
    t = cv.emit("clip", [t], {"a_min": 0.0, "a_max": 1.0})
    return [cv.emit("multiply", [x, t], out=node.output[0])]


@_op("PRelu")
def _prelu(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # max(x, 0) + slope * min(x, 0): exact for either sign of x.
    x, slope = cv.need(node, ins, 0, "X"), cv.need(node, ins, 1, "slope")
    zero = _scalar_like(cv, 0, x)
    pos = cv.emit("maximum", [x, zero])
    neg = cv.emit("multiply", [cv.emit("minimum", [x, zero]), slope])
    return [cv.emit("add", [pos, neg], out=node.output[0])]


@_op("Elu", "Selu", "Celu")
def _elu(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    # relu(x) + alpha * (exp(min(x, 0) / k) - 1): the exp term is 0 for x >= 0.
    x = cv.need(node, ins, 0, "X")
    if x.type.dtype not in _FLOATS:
        raise cv.unsupported(node, f"needs float data, got {x.type.dtype}")
    if node.op_type == "Selu":
        alpha, gamma, k = a.float("alpha", 1.67326319217681884765625), a.float("gamma", 1.05070102214813232421875), 1.0
    elif node.op_type == "Celu":
        alpha = a.float("alpha", 1.0)
        gamma, k = 1.0, alpha
    else:
        alpha, gamma, k = a.float("alpha", 1.0), 1.0, 1.0
    zero = _scalar_like(cv, 0, x)
    neg = cv.emit("minimum", [x, zero])
    if k != 1.0:
        neg = cv.emit("divide", [neg, _scalar_like(cv, k, x)])
    em1 = cv.emit("subtract", [cv.emit("exp", [neg]), _scalar_like(cv, 1, x)])
    y = cv.emit("add", [cv.emit("nn.relu", [x]), cv.emit("multiply", [em1, _scalar_like(cv, alpha, x)])])
    if gamma != 1.0:
        return [cv.emit("multiply", [y, _scalar_like(cv, gamma, x)], out=node.output[0])]
    return [_rename(cv, y, node.output[0])]


@_op("Softsign")
def _softsign(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    den = cv.emit("add", [cv.emit("abs", [x]), _scalar_like(cv, 1, x)])
    return [cv.emit("divide", [x, den], out=node.output[0])]


@_op("Clip")
def _clip(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    out = node.output[0]
    if cv.opset < 11:
        lo = a.float("min") if "min" in a else None
        hi = a.float("max") if "max" in a else None
        lo_v = hi_v = None
    else:
        lo_v = ins[1] if len(ins) > 1 else None
        hi_v = ins[2] if len(ins) > 2 else None
        lo = hi = None
        if lo_v is not None and lo_v.const is not None:
            lo, lo_v = lo_v.const.item(), None
        if hi_v is not None and hi_v.const is not None:
            hi, hi_v = hi_v.const.item(), None
    is_float = x.type.dtype in _FLOATS
    conv = float if is_float else int
    if lo is not None and hi is not None and lo_v is None and hi_v is None:
        return [cv.emit("clip", [x], {"a_min": conv(lo), "a_max": conv(hi)}, out=out)]
    y = x
    # one bound, or run-time bounds: maximum then minimum (ONNX order: min applies first)
    if lo is not None:
        y = cv.emit("maximum", [y, cv.scalar(lo, x.type.dtype)])
    elif lo_v is not None:
        y = cv.emit("maximum", [y, lo_v])
    if hi is not None:
        y = cv.emit("minimum", [y, cv.scalar(hi, x.type.dtype)])
    elif hi_v is not None:
        y = cv.emit("minimum", [y, hi_v])
    return [_rename(cv, y, out)]


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power"}


@_op(*_BINARY)
def _binary(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, y = cv.need(node, ins, 0, "A"), cv.need(node, ins, 1, "B")
    if "broadcast" in a or "axis" in a:
        raise cv.unsupported(node, "the legacy 'broadcast'/'axis' attributes are not supported")
    if node.op_type == "Pow" and y.type.dtype != x.type.dtype:
        # ONNX Pow allows an exponent of another type; compute in the base's type.
        y = cv.emit("cast", [y], {"dtype": x.type.dtype})
    return [cv.emit(_BINARY[node.op_type], [x, y], out=node.output[0])]


@_op("Max", "Min", "Sum", "Mean")
def _variadic(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    vals = [v for v in ins if v is not None]
    if not vals:
        raise ModelError(f"node {cv.label}: {node.op_type} needs at least one input")
    op = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[node.op_type]
    out = node.output[0]
    acc = vals[0]
    last = len(vals) - 1
    for i, v in enumerate(vals[1:], start=1):
        final = i == last and node.op_type != "Mean"
        acc = cv.emit(op, [acc, v], out=out if final else None)
    if node.op_type == "Mean" and len(vals) > 1:
        acc = cv.emit("divide", [acc, cv.scalar(len(vals), acc.type.dtype)], out=out)
    return [acc]


@_op("Softmax")
def _softmax(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "input")
    rank = x.type.rank
    if cv.opset >= 13:
        axis = a.int("axis", -1)
        return [cv.emit("nn.softmax", [x], {"axis": axis}, out=node.output[0])]
    # before opset 13: softmax over the flattened trailing axes [axis:]
    axis = a.int("axis", 1)
    if not -rank <= axis < max(rank, 1):
        raise ModelError(f"node {cv.label}: axis {axis} is out of range for rank {rank}")
    axis %= max(rank, 1)
    if axis == rank - 1:
        return [cv.emit("nn.softmax", [x], {"axis": -1}, out=node.output[0])]
    shape = x.type.shape
    flat = cv.reshape(x, (_prod(shape[:axis]), _prod(shape[axis:])))
    y = cv.emit("nn.softmax", [flat], {"axis": -1})
    return [cv.reshape(y, shape, out=node.output[0])]


@_op("Swish")
def _swish(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x = cv.need(node, ins, 0, "X")
    alpha = a.float("alpha", 1.0)
    t = x if alpha == 1.0 else cv.emit("multiply", [x, _scalar_like(cv, alpha, x)])
    return [cv.emit("multiply", [x, cv.emit("sigmoid", [t])], out=node.output[0])]


# elementwise ops with an IR op each (constant inputs fold through its kernel)
_ELEMENTWISE = {
    "Equal": "equal",
    "Less": "less",
    "LessOrEqual": "less_equal",
    "Greater": "greater",
    "GreaterOrEqual": "greater_equal",
    "Not": "logical_not",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "logical_xor",
    "Where": "where",
    "Floor": "floor",
    "Ceil": "ceil",
}


@_op(*_ELEMENTWISE)
def _elementwise(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    op = _ELEMENTWISE[node.op_type]
    args = [cv.need(node, ins, i, f"operand {i}") for i in range(get_op(op).num_inputs[0])]
    return [cv.emit(op, args, out=node.output[0])]


@_op("Mod")
def _mod_op(cv: _Importer, node: NodeProto, a: _Attrs, ins: list) -> list:
    x, y = cv.need(node, ins, 0, "A"), cv.need(node, ins, 1, "B")
    return [cv.emit("mod", [x, y], {"fmod": bool(a.int("fmod", 0))}, out=node.output[0])]
