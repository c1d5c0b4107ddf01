"""QDQ groups to qnn ops.

A QDQ model (ONNX Runtime's ``quantize_static``, TensorFlow Lite exports)
states its integer arithmetic as float ops between ``qnn.dequantize`` and
``qnn.quantize``: ``Q(conv(DQ(x), DQ(w)) + DQ(b))``. Backends speak in qnn
ops (``qnn.conv2d → nn.bias_add → qnn.requantize``), so each such group is
rewritten into them. A group is matched backwards from its ``qnn.quantize``,
by the ``qdq`` role each op declares (:class:`accel.ops.registry.Qdq`):

- ``LINEAR`` (conv / transposed conv / dense): ``DQ(x)``, ``DQ(const weight)``
  (through ``SELECTS`` ops on the constant, e.g. transposes and reshapes),
  optional bias (``nn.bias_add`` or ``add`` of a constant along the channel
  axis, dequantized int32 or float), optional ``CLAMP`` (``nn.relu`` / ``clip``)
  → ``qnn.conv2d | qnn.conv2d_transpose | qnn.dense → nn.bias_add(int32) →
  [nn.relu] → qnn.requantize`` (the op's ``qnn`` trait names the qnn op);
- ``INTEGER`` (``add`` / ``multiply`` / ``concatenate``) of dequantized
  tensors → its ``qnn`` op (``qnn.add`` / ``qnn.mul`` / ``qnn.concatenate``);
- ``SELECTS`` (max pooling, reshape, transpose, depth_to_space, nearest
  resize) and ``CLAMP`` ops run on the quantized tensor itself, followed by
  ``qnn.requantize`` when the output parameters differ;
- ``AVERAGES`` (``nn.avg_pool2d``, ``nn.global_avg_pool2d``, ``mean``) →
  ``cast(int32) → op → cast back`` (or ``qnn.requantize``);
- ``DQ → Q`` alone → ``qnn.requantize`` (or nothing when the parameters agree).

An activation between the float op and the quantize is folded when the
quantize's saturation already implements it (its bounds quantize to the ends
of the output range), or, after a convolution or dense, kept as ``nn.relu``
on the int32 accumulator. A group is rewritten only when every intermediate
float value has exactly one reader (so nothing else needs it in float) and
all parameters fit the qnn ops; anything else is left as is, and still runs
correctly in float.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accel import quant
from accel.errors import AccelError
from accel.ir import CALL_OP, Graph, Node, QuantParams, TensorType, Value
from accel.ops.common import FLOAT_DTYPES, QUANT_DTYPES
from accel.ops.registry import OpContext, Qdq, get_op, infer_node_types
from accel.passes._rewrite import Rewriter
from accel.passes.dce import remove_dead_nodes

_AVERAGE_EXTRA_BITS = 12
_INT32_MAX = (1 << 31) - 1


def qdq_to_qnn(graph: Graph, *, in_place: bool = False, dce: bool = True) -> Graph:
    """Rewrite QDQ groups into qnn ops (see the module docstring for the groups).

    Requires: a typed graph in topological order. Guarantees: every rewritten
    group computes what the QDQ group computes up to the rounding of the
    fixed-point requantization (±1 on the quantized output); unmatched groups
    are unchanged; the float nodes and dequantizes left without readers are
    removed; output names are kept. With ``in_place`` the pass rewrites
    ``graph`` itself and returns it; otherwise the input graph is not modified.

    ``dce=False`` leaves nodes without readers in place (:func:`~accel.passes.simplify`
    sweeps once, at its end).
    """
    g = graph if in_place else graph.copy()
    if not _quantizes(g):
        if dce:
            remove_dead_nodes(g)  # no group to rewrite: what the sweep would leave
        return g
    rw = Rewriter(g)
    for node in g.nodes:
        group = match_group(node, rw) if _role(node) is Qdq.QUANTIZE else None
        if group is not None and not group.all_constant:
            mark = len(rw.nodes)
            new: Value | None
            try:
                new = group.apply(rw)
            except AccelError:
                # a parameter no qnn op accepts (e.g. a rescale beyond the fixed-point range):
                # keep the float group; the nodes emitted so far are dead and go away.
                del rw.nodes[mark:]
                new = None
            if new is not None:
                rw.replace(node.output, new)
                continue
        rw.keep(node)
    return rw.finish(dce=dce)


def qdq_protected_nodes(graph: Graph) -> set[int]:
    """ids of the dequantize/quantize nodes of constants that :func:`qdq_to_qnn` would consume.

    :func:`~accel.passes.fold_constants` leaves them alone, so that folding
    before ``qdq_to_qnn`` does not turn quantized weights into float ones.
    """
    rw = Rewriter(graph)
    protected: set[int] = set()
    for node in graph.nodes:
        if _role(node) is Qdq.QUANTIZE:
            group = match_group(node, rw)
            if group is not None and not group.all_constant:
                protected.update(id(n) for n in group.protect)
    return protected


# --------------------------------------------------------------------------------------
# matching helpers


def _quantizes(g: Graph) -> bool:
    """Whether a node of ``g`` quantizes (an op's role looked up once, unless its attributes decide it)."""
    roles: dict[str, Qdq | None] = {}  # op -> its role; None when the attributes decide it
    for node in g.nodes:
        op = node.op
        if op in roles:
            role = roles[op]
        else:
            qdq = Qdq.NONE if op == CALL_OP else get_op(op).qdq
            role = roles[op] = qdq if isinstance(qdq, Qdq) else None
        if (role if role is not None else _role(node)) is Qdq.QUANTIZE:
            return True
    return False


def _role(node: Node | None) -> Qdq:
    """The node's :class:`Qdq` role (``NONE`` for a graph input, a constant or a call)."""
    if node is None or node.op == CALL_OP:
        return Qdq.NONE
    return get_op(node.op).qdq_role(node.attrs)


def _qnn_op(node: Node) -> str:
    qnn = get_op(node.op).qnn
    assert qnn is not None  # the LINEAR and INTEGER roles name one (checked at registration)
    return qnn


@dataclass
class _QConst:
    """A quantized constant found behind a dequantize: stored integers and their parameters."""

    data: np.ndarray
    quant: QuantParams
    value: Value | None  # the graph constant itself when ``data`` is exactly it
    protect: list[Node]

    def materialize(self, rw: Rewriter, hint: str) -> Value:
        if self.value is not None:
            return self.value
        return rw.const(self.data, hint, self.quant)


def _run_on(
    op: str, attrs: Mapping[str, Any], data: np.ndarray, q: QuantParams | None
) -> tuple[np.ndarray, QuantParams | None]:
    """Apply a ``SELECTS`` op to a constant integer array (its kernel, its type rule for the quant)."""
    in_t = TensorType.of(data, q)
    full, types = infer_node_types(op, [in_t], attrs)
    ctx = OpContext(op=op, attrs=full, in_types=(in_t,), out_types=(types[0],), consts=(data,))
    return get_op(op).bind(ctx)(data), types[0].quant


def _quantized_const(v: Value, depth: int = 0) -> _QConst | None:
    """The quantized constant behind float ``v``: ``DQ(c)``, ``DQ(Q(float c))``, or a ``SELECTS`` op of one."""
    p = v.producer
    if p is None:
        return None
    role = _role(p)
    if role is Qdq.DEQUANTIZE:
        src = p.inputs[0]
        q = src.type.quant
        if q is None or src.type.dtype not in (*QUANT_DTYPES, "int32"):
            return None
        if src.const is not None:
            return _QConst(src.const, q, src, [p])
        sp = src.producer
        if _role(sp) is Qdq.QUANTIZE and sp is not None and sp.inputs[0].const is not None:
            data = quant.quantize(sp.inputs[0].const, q.scale, q.zero_point, src.type.dtype, q.axis)
            return _QConst(data, q, None, [p, sp])
        return None
    if role is Qdq.SELECTS and len(p.inputs) == 1 and len(p.outputs) == 1 and depth < 8:
        inner = _quantized_const(p.inputs[0], depth + 1)
        if inner is None:
            return None
        try:
            data, q = _run_on(p.op, p.attrs, inner.data, inner.quant)
        except AccelError:
            return None
        if q is None:
            return None
        return _QConst(data, q, None, inner.protect)
    return None


def _dq_source(v: Value) -> tuple[Value, Node] | None:
    """(quantized tensor, dequantize node) when ``v`` is a per-tensor 8-bit dequantize."""
    p = v.producer
    if p is None or _role(p) is not Qdq.DEQUANTIZE:
        return None
    src = p.inputs[0]
    q = src.type.quant
    if q is None or q.axis is not None or src.type.dtype not in QUANT_DTYPES:
        return None
    return src, p


def _act_bounds(act: Node) -> tuple[float, float]:
    """A ``CLAMP`` op's bounds: attributes ``a_min`` / ``a_max``, 0 and +inf where it has none (``nn.relu``)."""
    return float(act.attrs.get("a_min", 0.0)), float(act.attrs.get("a_max", math.inf))


def _quantize_scalar(x: float, q: QuantParams, dtype: str) -> int:
    return int(quant.quantize(np.asarray(x, np.float32), q.scale, q.zero_point, dtype))


@dataclass(frozen=True)
class _ActEffect:
    """How an activation before a quantize relates to the quantize's saturation."""

    low_free: bool  # clamping at the lower bound is already done by the quantize
    high_free: bool
    low_zero: bool  # the lower bound is real 0 (a ReLU)

    @property
    def absorbed(self) -> bool:
        return self.low_free and self.high_free


def _act_effect(act: Node, q: QuantParams, dtype: str) -> _ActEffect:
    lo, hi = _act_bounds(act)
    qmin, qmax = quant.dtype_range(dtype)
    low_free = lo == -math.inf or _quantize_scalar(lo, q, dtype) <= qmin
    high_free = hi == math.inf or _quantize_scalar(hi, q, dtype) >= qmax
    return _ActEffect(low_free, high_free, lo == 0.0)


def _channel_vector(arr: np.ndarray, axis: int, rank: int, channels: int) -> np.ndarray | None:
    """``arr`` as a length-``channels`` vector if it broadcasts only along ``axis`` of a rank-``rank`` tensor."""
    if arr.ndim > rank:
        return None
    shape = (1,) * (rank - arr.ndim) + tuple(arr.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(arr.reshape(-1), (channels,)) if arr.size == 1 else arr.reshape(channels)


# --------------------------------------------------------------------------------------
# groups


@dataclass
class Group:
    """One matched QDQ group, ready to be rewritten at its quantize."""

    kind: str
    quantize: Node
    op: Node
    inputs: list[Value]  # quantized tensors read by the rewritten ops
    attrs: dict[str, Any] = field(default_factory=dict)
    weight: _QConst | None = None
    bias: np.ndarray | None = None  # int32, one per output channel
    relu: bool = False
    bias_node: Node | None = None
    act: Node | None = None
    protect: list[Node] = field(default_factory=list)

    @property
    def all_constant(self) -> bool:
        return all(v.const is not None for v in self.inputs)

    @property
    def out_type(self) -> TensorType:
        return self.quantize.output.type

    def _requantize(self, rw: Rewriter, x: Value) -> Value:
        t = self.out_type
        q = t.quant
        assert q is not None
        if x.type == t:
            return x
        attrs = {"out_scale": float(q.scale), "out_zero_point": int(q.zero_point), "out_dtype": t.dtype}
        return rw.emit("qnn.requantize", [x], attrs).output

    def apply(self, rw: Rewriter) -> Value:
        """Emit the qnn form; return the value replacing the quantize's output.

        The new nodes take the names of the nodes they replace (the float op's
        for the main qnn op, the quantize's for the last node), so the
        rewritten graph reads like the model it came from.
        """
        mark = len(rw.nodes)
        result, main = self._emit(rw)
        if main is not None:
            rw.adopt_names(main, self.op)
        last = result.producer
        if last is not None and any(last is n for n in rw.nodes[mark:]):
            result.name = self.quantize.output.name
            if last is not main:
                last.name = self.quantize.name
        return result

    def _emit(self, rw: Rewriter) -> tuple[Value, Node | None]:
        ins = [rw.value(v) for v in self.inputs]
        t = self.out_type
        q = t.quant
        assert q is not None
        out_attrs = {"out_scale": float(q.scale), "out_zero_point": int(q.zero_point)}
        name = self.op.name
        if self.kind == "matmul":
            assert self.weight is not None
            w = self.weight.materialize(rw, f"{name}.weight")
            main = rw.emit(_qnn_op(self.op), [ins[0], w], self.op.attrs)
            acc = main.output
            if self.bias is not None:
                bq = acc.type.quant
                assert bq is not None
                scale = np.broadcast_to(bq.scale, self.bias.shape) if bq.axis is not None else bq.scale
                b = rw.const(self.bias, f"{name}.bias", QuantParams(scale, 0, 0 if bq.axis is not None else None))
                node = rw.emit("nn.bias_add", [acc, b], {"axis": self.attrs["channel_axis"]})
                if self.bias_node is not None:
                    rw.adopt_names(node, self.bias_node)
                acc = node.output
            if self.relu:
                node = rw.emit("nn.relu", [acc])
                if self.act is not None:
                    rw.adopt_names(node, self.act)
                acc = node.output
            return self._requantize(rw, acc), main
        if self.kind == "integer":
            qop = _qnn_op(self.op)
            # the float op's attributes the qnn op also takes (concatenate's axis), and the output parameters
            takes = get_op(qop).attrs
            attrs = {k: v for k, v in self.op.attrs.items() if k in takes}
            main = rw.emit(qop, ins, {**attrs, **out_attrs})
            return main.output, main
        if self.kind == "requantize":
            return self._requantize(rw, ins[0]), None
        if self.kind == "pass":
            main = rw.emit(self.op.op, ins, self.attrs or self.op.attrs)
            return self._requantize(rw, main.output), main
        if self.kind == "average":
            widen = dict(self.attrs)
            wide = rw.emit(widen.pop("op"), ins, widen, name=f"{name}.widen").output
            main = rw.emit(self.op.op, [wide], self.op.attrs)
            x = main.output
            if self.attrs["op"] == "cast" and ins[0].type.quant == q:
                # same parameters: the rounded integer mean is already the answer
                _, (back,) = infer_node_types("cast", [x.type], {"dtype": t.dtype})
                if back == t:
                    return rw.emit("cast", [x], {"dtype": t.dtype}).output, main
            return self._requantize(rw, x), main
        raise AssertionError(self.kind)


def match_group(qnode: Node, rw: Rewriter) -> Group | None:
    """The convertible QDQ group ending at quantize ``qnode``, or ``None``."""
    t = qnode.output.type
    oq = t.quant
    if oq is None or oq.axis is not None or t.dtype not in QUANT_DTYPES:
        return None
    y = qnode.inputs[0]
    node = y.producer
    if node is None or not rw.sole_user(y, qnode):
        return None
    act: Node | None = None
    if _role(node) is Qdq.CLAMP:
        act = node
        y = act.inputs[0]
        node = y.producer
        if node is None or not rw.sole_user(y, act):
            return None
    effect = _act_effect(act, oq, t.dtype) if act is not None else None
    role = _role(node)
    if role is Qdq.DEQUANTIZE:
        return _match_dq_only(qnode, node, act, effect)
    if role is Qdq.LINEAR or node.op in ("nn.bias_add", "add"):
        group = _match_matmul(qnode, node, act, effect, rw)
        if group is not None or node.op != "add":
            return group
    if effect is not None and not effect.absorbed:
        return None
    if role is Qdq.INTEGER:
        return _match_all_dequantized(qnode, node)
    if role is Qdq.SELECTS:
        return _match_pass(qnode, node)
    if role is Qdq.AVERAGES:
        return _match_average(qnode, node)
    return None


def _match_dq_only(qnode: Node, dq: Node, act: Node | None, effect: _ActEffect | None) -> Group | None:
    """``DQ → [relu | clip] → Q``: a requantize, or the activation on the stored integers."""
    src = _dq_source(dq.output)
    if src is None:
        return None
    x, _ = src
    if act is None or (effect is not None and effect.absorbed):
        return Group("requantize", qnode, dq, [x])
    assert effect is not None
    if "a_min" not in act.attrs:
        # relu on quantized data is max(q, zero_point): exactly relu of the real values
        return Group("pass", qnode, act, [x])
    # Q(clip(r)) = clamp(Q(r), Q(lo), Q(hi)) because Q is monotone; with other output
    # parameters the clamp happens in the input's integers (one extra rounding)
    xq = x.type.quant
    assert xq is not None
    lo, hi = _act_bounds(act)
    qlo, qhi = quant.dtype_range(x.type.dtype)
    a_min = qlo if lo == -math.inf else _quantize_scalar(lo, xq, x.type.dtype)
    a_max = qhi if hi == math.inf else _quantize_scalar(hi, xq, x.type.dtype)
    return Group("pass", qnode, act, [x], attrs={"a_min": a_min, "a_max": a_max})


def _match_matmul(qnode: Node, node: Node, act: Node | None, effect: _ActEffect | None, rw: Rewriter) -> Group | None:
    """``DQ(x), DQ(w) → conv2d | conv2d_transpose | dense → [bias] → [activation] → Q``."""
    bias_node: Node | None = None
    bias_src: Value | None = None
    if node.op in ("nn.bias_add", "add"):
        bias_node = node
        a, b = node.inputs
        if _role(a.producer) is Qdq.LINEAR:
            main, bias_src = a, b
        elif node.op == "add" and _role(b.producer) is Qdq.LINEAR:
            main, bias_src = b, a
        else:
            return None
        if not rw.sole_user(main, bias_node):
            return None
        producer = main.producer
        assert producer is not None
        node = producer
    if _role(node) is not Qdq.LINEAR:
        return None
    out = qnode.output.type
    oq = out.quant
    assert oq is not None
    relu = False
    if effect is not None:
        if effect.low_zero and effect.high_free:
            relu = True
        elif not effect.absorbed:
            return None
    src = _dq_source(node.inputs[0])
    weight = _quantized_const(node.inputs[1])
    if src is None or weight is None or weight.data.dtype.name not in QUANT_DTYPES:
        return None
    x, _dq = src
    qop = _qnn_op(node)
    try:
        _, (acc,) = infer_node_types(qop, [x.type, TensorType.of(weight.data, weight.quant)], node.attrs)
    except AccelError:
        return None
    aq = acc.quant
    assert aq is not None
    channel_axes = get_op(node.op).channel_axes
    assert channel_axes is not None  # LINEAR ops declare them (checked at registration)
    channel_axis = channel_axes(node.attrs, acc.rank)[0]
    channels = acc.shape[channel_axis]
    acc_scale = np.broadcast_to(aq.scale.astype(np.float64), (channels,))
    try:
        quant.quantize_multiplier(acc_scale / float(oq.scale))
    except quant.QuantizationError:
        return None
    protect = list(weight.protect)
    bias = None
    if bias_node is not None:
        assert bias_src is not None
        if bias_node.op == "nn.bias_add":
            if bias_node.attrs["axis"] % acc.rank != channel_axis:
                return None
        elif bias_node.output.type.shape != acc.shape:
            return None  # the add broadcasts the accumulator itself
        # a bias_add bias is a [C] vector along the axis; an add operand broadcasts numpy-style
        rank = 1 if bias_node.op == "nn.bias_add" else acc.rank
        found = _int32_bias(bias_src, 0 if rank == 1 else channel_axis, rank, channels, acc_scale)
        if found is None:
            return None
        bias, bias_protect = found
        protect += bias_protect
    attrs = {"channel_axis": channel_axis}
    return Group(
        "matmul",
        qnode,
        node,
        [x],
        attrs,
        weight=weight,
        bias=bias,
        relu=relu,
        bias_node=bias_node,
        act=act,
        protect=protect,
    )


def _int32_bias(
    v: Value, axis: int, rank: int, channels: int, acc_scale: np.ndarray
) -> tuple[np.ndarray, list[Node]] | None:
    """The bias as int32 in the accumulator's scale, with the nodes of constants it came from."""
    qc = _quantized_const(v)
    if qc is not None:
        q = qc.quant
        ints = _channel_vector(qc.data, axis, rank, channels) if q.axis is None else qc.data.reshape(-1)
        if ints is not None and ints.size == channels and qc.data.dtype == np.int32 and not np.any(q.zero_point):
            scale = np.broadcast_to(q.scale.astype(np.float64), (channels,))
            if np.array_equal(scale, acc_scale):
                return ints.astype(np.int32), qc.protect  # already in the accumulator's scale: exact
        real_full = quant.dequantize(qc.data, q.scale, q.zero_point, q.axis).astype(np.float64)
        real = _channel_vector(real_full, axis, rank, channels)
        protect = qc.protect
    elif v.const is not None and v.type.dtype in FLOAT_DTYPES:
        real = _channel_vector(v.const.astype(np.float64), axis, rank, channels)
        protect = []
    else:
        return None
    if real is None:
        return None
    scaled = np.rint(real / acc_scale)
    if not np.all(np.isfinite(scaled)) or np.any(np.abs(scaled) > _INT32_MAX):
        return None  # the bias does not fit the int32 accumulator: keep the float group
    return scaled.astype(np.int32), protect


def _match_all_dequantized(qnode: Node, node: Node) -> Group | None:
    """An ``INTEGER`` group when every input dequantizes an integer tensor of the output's dtype."""
    sources = [_dq_source(v) for v in node.inputs]
    found = [s for s in sources if s is not None]
    if len(found) != len(sources):
        return None
    ins = [x for x, _ in found]
    if any(v.type.dtype != qnode.output.type.dtype for v in ins):
        return None
    protect = [dq for x, dq in found if x.const is not None]
    return Group("integer", qnode, node, ins, protect=protect)


def _single_dq_input(node: Node) -> tuple[Value, Node] | None:
    if len(node.inputs) != 1:
        return None
    return _dq_source(node.inputs[0])


def _match_pass(qnode: Node, node: Node) -> Group | None:
    """A ``SELECTS`` op on the stored integers; requantized when the parameters differ."""
    src = _single_dq_input(node)
    if src is None:
        return None
    x, dq = src
    try:
        _, (t,) = infer_node_types(node.op, [x.type], node.attrs)
    except AccelError:
        return None
    if t.quant is None or t.dtype not in QUANT_DTYPES:
        return None
    return Group("pass", qnode, node, [x], protect=[dq] if x.const is not None else [])


def _match_average(qnode: Node, node: Node) -> Group | None:
    """Averages of integers: the kernels sum exactly and round the quotient half away from zero.

    With equal input and output parameters the rounded integer mean is the
    result. Otherwise (or when padding counted in the average must be a real 0
    while the zero point is not) the input is first requantized exactly to
    int32 with zero point 0 and a scale ``s_in / 2^k`` at least 2^12 finer
    than the output's, so the mean's own rounding is negligible and the
    result is rounded once, by the final requantize.
    """
    src = _single_dq_input(node)
    if src is None:
        return None
    x, dq = src
    xq = x.type.quant
    oq = qnode.output.type.quant
    assert xq is not None and oq is not None
    ratio = float(xq.scale) / float(oq.scale)
    shift = max(0, math.ceil(math.log2(ratio) - 1e-9))
    pads_count = bool(node.attrs.get("count_include_pad")) and any(node.attrs.get("padding", ()))
    if xq == oq and not (pads_count and int(xq.zero_point)):
        # same parameters: the rounded integer mean is the answer, one rounding
        widen: dict[str, Any] = {"op": "cast", "dtype": "int32"}
    else:
        # Widen to a unit 2^EXTRA finer than the output's, so the average's own
        # rounding is negligible and the final requantize is the one that counts.
        k = min(shift + _AVERAGE_EXTRA_BITS, 22)  # |q - z| < 2^9 scaled by 2^k stays clear of int32 overflow
        if k < shift:
            return None
        widen = {
            "op": "qnn.requantize",
            "out_scale": float(xq.scale) / (1 << k),
            "out_zero_point": 0,
            "out_dtype": "int32",
        }
    try:
        _, (wide,) = infer_node_types(widen["op"], [x.type], {k: v for k, v in widen.items() if k != "op"})
        _, (t,) = infer_node_types(node.op, [wide], node.attrs)
    except AccelError:
        return None
    if t.quant is None:
        return None
    protect = [dq] if x.const is not None else []
    return Group("average", qnode, node, [x], attrs=widen, protect=protect)
