"""Data layout conversion (NCHW ⇄ NHWC) with transposes that cancel.

Every value of the original graph is tracked as a *representation*: a value
of the new graph together with a permutation ``p`` such that
``new = transpose(original, p)``. What each op does with a permuted input is
its ``layout`` trait (:class:`accel.ops.registry.Layout`, declared with the
op): layout-sensitive ops are rebuilt in the target layout and produce
permuted representations; elementwise and axis-parameterised ops (whose axis
is remapped) carry the permutation through; explicit ``transpose`` /
``layout_transform`` nodes become bookkeeping; ops with their own rule say
how their attributes follow the permutation. A real
transpose is only emitted where a consumer needs another permutation than
the one its input has (an op that is not layout-agnostic, a graph output), so
inverse transposes never meet and a whole network converts with one
transpose per graph input and per 4-D graph output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from types import MappingProxyType
from typing import Any

import numpy as np

from accel.errors import GraphError
from accel.ir import CALL_OP, Graph, Node, QuantParams, TensorType, Value, readers_by_value
from accel.ops.registry import Layout, LayoutRule, get_op, infer_node_types
from accel.passes._rewrite import Rewriter, identity_perm, is_identity, permute_quant, permuted_type, transposed_const

LAYOUTS = ("NCHW", "NHWC")
#: the kernel layout of a convolution held in NHWC (for NCHW: the op's default kernel layout)
_NHWC_KERNEL = "OHWI"

Perm = tuple[int, ...]


@cache
@cache
def layout_perm(src: str, dst: str) -> Perm:
    """The ``axes`` of the transpose taking a tensor laid out as ``src`` to ``dst``."""
    return tuple(src.index(c) for c in dst)


def convert_layout(graph: Graph, layout: str = "NHWC") -> Graph:
    """Rewrite layout-sensitive ops to ``layout`` (``"NHWC"`` or ``"NCHW"``).

    Each op is treated as its ``layout`` trait says: convolutions
    (``Layout.CONV``) get ``data_layout=layout`` and the matching kernel layout
    (``OHWI`` for NHWC; the op's default, ``OIHW`` or ``IOHW``, for NCHW), with
    constant weights re-laid out as constants; ``Layout.LAYOUT`` ops (pools,
    ``nn.depth_to_space``, ``image.resize2d``) get ``layout``; ``Layout.AXIS``
    ops and per-axis quantization get their axes remapped; ops with their own
    rule (``nn.pad``, ``mean``, ``reshape``, ``nn.instance_norm``) rewrite
    their attributes. Transposes are inserted only at the boundaries (graph
    inputs and outputs, ``Layout.FIXED`` ops) and existing ones are merged
    into the tracking, so adjacent inverse transposes cancel.

    Requires: a typed graph in topological order. Guarantees: bit-identical results,
    the same inputs and outputs (names, shapes), nodes left without readers
    removed. The input graph is not modified.
    """
    if layout not in LAYOUTS:
        raise GraphError(f"layout {layout!r} is not supported; use one of {', '.join(LAYOUTS)}")
    g = graph.copy()
    return _LayoutConverter(g, layout).run()


def layout_view(graph: Graph, layout: str) -> tuple[Graph, dict[Value, tuple[str, Perm]]]:
    """``graph`` converted to ``layout``, with where each new value comes from.

    For the partitioner: returns the converted graph and, for every value of
    it that stands for a value of ``graph`` (``new = transpose(original, p)``),
    ``{new: (original name, p)}`` (constants the view reads as they are are
    not listed: they stand for themselves). Node names are those of ``graph``
    (transposes the conversion adds have new names). Constant weights are
    re-laid out as transposed *views* (no copy): call
    :func:`contiguous_constants` on what is kept.
    """
    if layout not in LAYOUTS:
        raise GraphError(f"layout {layout!r} is not supported; use one of {', '.join(LAYOUTS)}")
    # No copy: the view is built of new nodes only (each op converted, or copied by
    # ``default``) over the graph's own inputs and constants, which nothing changes.
    g = Graph(graph.inputs, graph.outputs, graph.nodes, name=graph.name)
    g.adopt_names(set(), *graph.name_sets())  # (the graph's own sets, neither walked nor copied)
    # the graph's inputs stand for themselves (the view reads them as they are), ...
    origin: dict[Value, tuple[str, Perm]] = {v: (v.name, identity_perm(v.type.rank)) for v in g.inputs}
    conv = _LayoutConverter(g, layout, lazy_constants=True)
    view = conv.run()  # (the converter rewrites g into the view)
    # ... and each value the conversion made stands for a value of the graph (whose name the
    # view leaves alone: it renames only values of its own), permuted
    origin.update(conv.origin)
    return view, origin


def contiguous_constants(graph: Graph) -> None:
    """Give every constant of ``graph`` (nested graphs included) C-contiguous data, in place."""
    pending = [graph]
    while pending:  # (each node's inputs looked at directly: this runs once per partition)
        g = pending.pop()
        for node in g.nodes:
            for v in node.inputs:
                c = v.const
                if c is not None and not c.flags.c_contiguous:
                    _make_contiguous(v)
            if node.body is not None:
                pending.append(node.body)
        for v in g.outputs:
            if v.const is not None and not v.const.flags.c_contiguous:
                _make_contiguous(v)


def _make_contiguous(v: Value) -> None:
    data = np.ascontiguousarray(v.const)
    data.setflags(write=False)
    v.const = data


class _LayoutConverter:
    def __init__(self, graph: Graph, layout: str, *, lazy_constants: bool = False):
        self.g = graph
        self.layout = layout
        self.rw = Rewriter(graph)
        self.rep: dict[Value, tuple[Value, Perm]] = {}
        self.cache: dict[tuple[Value, Perm], Value] = {}
        self.lazy_constants = lazy_constants
        #: new value -> (original value's name, p) with new = transpose(original, p)
        self.origin: dict[Value, tuple[str, Perm]] = {}
        # (id(a conv's attributes), op) -> converted; the ids are those of the graph's nodes, alive meanwhile
        self.conv_attrs: dict[tuple[int, str], Mapping[str, Any]] = {}
        self.nodes = list(graph.nodes)  # (the graph's own, as they were before the sweep)
        self.readers: dict[Value, list[Node]] | None = None  # made when first asked
        self.wants: dict[tuple[Value, int], Perm | None] = {}  # wanted()'s answers
        self.outputs = set(graph.outputs)

    # -- representations -------------------------------------------------------------------
    def get(self, v: Value) -> tuple[Value, Perm]:
        found = self.rep.get(v)
        if found is None:
            return v, identity_perm(v.type.rank)
        return found

    def as_perm(self, v: Value, p: Perm) -> Value:
        """A value holding ``transpose(v, p)`` (``v`` an original value)."""
        found = self.rep.get(v)
        nv, cur = (v, identity_perm(v.type.rank)) if found is None else found
        if cur == p:
            return nv
        key = (v, p)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        axes = tuple(cur.index(i) for i in p)
        if nv.const is not None and self.lazy_constants:
            view = np.transpose(nv.const, axes)
            out = Value(self.g.fresh_name(nv.name), permuted_type(nv.type, axes), None, view)
        elif nv.const is not None:
            out = transposed_const(self.g, nv, axes)
        else:
            out = self.rw.emit("transpose", [nv], {"axes": axes}).output
        self.cache[key] = out
        self.origin[out] = (v.name, p)
        return out

    def plain(self, v: Value) -> Value:
        return self.as_perm(v, identity_perm(v.type.rank))

    def set_rep(self, old: Value, new: Value, p: Perm) -> None:
        if new.type is not old.type or not is_identity(p):  # not trivially the shape it must have
            want = tuple(old.type.shape[i] for i in p)
            if new.type.shape != want:
                raise GraphError(
                    f"layout conversion of %{old.name}: got shape {list(new.type.shape)}, expected {list(want)}"
                )
        self.rep[old] = (new, p)
        self.origin[new] = (old.name, p)

    def _made_rep(self, old: Value, new: Value, p: Perm) -> None:
        """:meth:`set_rep` for an output of a node :meth:`make` built with ``perm=p``: in a
        partition view its type is ``old``'s permuted by ``p`` by construction, so not checked."""
        if self.lazy_constants:
            self.rep[old] = (new, p)
            self.origin[new] = (old.name, p)
        else:
            self.set_rep(old, new, p)

    def make(
        self, old: Node, inputs: Sequence[Value], attrs: Mapping[str, Any] | None = None, *, perm: Perm | None = None
    ) -> Node:
        """``old`` rebuilt on new inputs under its own names (types inferred).

        ``perm``: every output is ``old``'s permuted by it, which a partition view
        (``lazy_constants``) takes as given instead of inferring the types again.
        """
        if perm is not None and self.lazy_constants:
            full = old.attrs if attrs is None else attrs  # (frozen by the node, if they are not yet)
            types = [permuted_type(o.type, perm) for o in old.outputs]
        else:
            full, types = infer_node_types(
                old.op, [v.type for v in inputs], old.attrs if attrs is None else attrs, body=old.body, node=old.name
            )
        node = Node(
            old.op, inputs, full, types, name=old.name, output_names=[v.name for v in old.outputs], body=old.body
        )
        self.rw.nodes.append(node)
        return node

    # -- the sweep -----------------------------------------------------------------------
    def run(self) -> Graph:
        behaviours: dict[str, Any] = {CALL_OP: None}  # op -> its layout behaviour, looked up once per op
        for node in self.g.nodes:
            op = node.op
            behaviour = behaviours[op] if op in behaviours else behaviours.setdefault(op, get_op(op).layout)
            handled = False
            if behaviour is Layout.PERMUTE:
                handled = self.transpose(node)
            elif behaviour is Layout.CONV:
                handled = self.conv(node)
            elif behaviour is Layout.LAYOUT:
                handled = self.spatial(node)
            elif behaviour is Layout.ELEMENTWISE:
                handled = self.elementwise(node)
            elif behaviour is Layout.AXIS:
                handled = self.axis_op(node)
            elif callable(behaviour):
                handled = self.own_rule(node, behaviour)
            if not handled:
                self.default(node)
        for v in self.g.outputs:
            self.rw.replace(v, self.plain(v))
        # a partition view is only read: its node order is already topological and
        # dead nodes in it are harmless; and its nodes read only values of the view (or the
        # graph's inputs and constants), never an original value replaced above
        lazy = self.lazy_constants
        return self.rw.finish(dce=not lazy, sort=not lazy, resolve=not lazy)

    def default(self, node: Node) -> None:
        """Any op: inputs in their original order."""
        inputs = [self.plain(v) for v in node.inputs]
        if self.lazy_constants:
            # a partition view holds no node of the graph it views (see layout_view): a copy,
            # reading the same values in the same order, so typed as the original
            new = node.copy_reading(inputs)
            self.rw.nodes.append(new)
        elif all(a is b for a, b in zip(inputs, node.inputs, strict=True)):
            self.rw.nodes.append(node)
            return
        else:
            new = self.make(node, inputs)
        for o, n in zip(node.outputs, new.outputs, strict=True):
            self.set_rep(o, n, identity_perm(o.type.rank))

    # -- handlers (return False to fall back to ``default``) -----------------------------
    def transpose(self, node: Node) -> bool:
        x = node.inputs[0]
        nx, p = self.get(x)
        rank = x.type.rank
        if node.op == "layout_transform":
            axes = layout_perm(node.attrs["src_layout"], node.attrs["dst_layout"])
        elif node.attrs["axes"] is None:
            axes = tuple(range(rank - 1, -1, -1))
        else:
            axes = tuple(a % rank for a in node.attrs["axes"])
        # out = x.T(axes) and nx = x.T(p), so nx = out.T(q) with axes[q[i]] = p[i]
        self.set_rep(node.output, nx, tuple(axes.index(i) for i in p))
        return True

    def conv(self, node: Node) -> bool:
        src = node.attrs["data_layout"]
        kernel_src = node.attrs["kernel_layout"]
        kernel_dst = _NHWC_KERNEL if self.layout == "NHWC" else get_op(node.op).attrs["kernel_layout"]
        p = layout_perm(src, self.layout)
        data = self.as_perm(node.inputs[0], p)
        weight = self.as_perm(node.inputs[1], layout_perm(kernel_src, kernel_dst))
        # convolutions of one shape share their (frozen) attributes: so do their conversions
        key = (id(node.attrs), node.op)
        attrs = self.conv_attrs.get(key)
        if attrs is None:
            attrs = _replaced(node.attrs, data_layout=self.layout, kernel_layout=kernel_dst)
            self.conv_attrs[key] = attrs
        new = self.make(node, [data, weight], attrs, perm=p)
        self._made_rep(node.output, new.output, p)
        return True

    def spatial(self, node: Node) -> bool:
        p = layout_perm(node.attrs["layout"], self.layout)
        new = self.make(node, [self.as_perm(node.inputs[0], p)], _replaced(node.attrs, layout=self.layout), perm=p)
        self._made_rep(node.output, new.output, p)
        return True

    def _common_perm(self, values: Sequence[Value], rank: int) -> Perm | None:
        """The permutation to run an op in: that of the first permuted non-constant input."""
        for v in values:
            if v.const is None:
                _, p = self.get(v)
                if v.type.rank == rank and not is_identity(p):
                    return p
        return None

    def elementwise(self, node: Node) -> bool:
        """Inputs broadcast together, element by element: any permutation of the output passes through.

        The permutation is that of the first permuted non-constant input (every
        non-constant input must have the output's rank). Most nodes of a network
        take this path, so it reads the representations directly. An op of one
        non-constant input held as it is (a graph input) takes the permutation its
        readers all want (:meth:`wanted`): the input is transposed before it rather
        than its result after, so the op runs in the layout of the convolution that
        reads it (a QDQ model's input quantize in NHWC, in the region of its first
        convolution).
        """
        outputs = node.outputs
        if len(outputs) != 1:
            raise GraphError(f"node {node.name!r} ({node.op}) has {len(outputs)} outputs")
        out = outputs[0]
        rank = len(out.type.shape)
        identity = identity_perm(rank)
        rep = self.rep
        p: Perm | None = None
        variable = 0
        for v in node.inputs:
            if v.const is None:
                variable += 1
                if len(v.type.shape) != rank:
                    return False
                if p is None:
                    found = rep.get(v)
                    if found is not None and found[1] != identity:
                        p = found[1]
        if p is None and variable == 1 and rank > 1:
            p = self.wanted(out)
        if p is None:
            return False
        attrs = node.attrs
        if attrs.get("axis") is not None:  # per-axis (de)quantization
            attrs = _replaced(attrs, axis=p.index(attrs["axis"] % rank))
        inputs = []
        for v in node.inputs:
            if v.const is None:
                found = rep.get(v)
                inputs.append(found[0] if found is not None and found[1] == p else self.as_perm(v, p))
            elif v.type.size == 1:
                inputs.append(v)  # a single value broadcasts the same in any order
            else:
                inputs.append(self._permuted_operand(v, rank, p))
        new = self.make(node, inputs, attrs, perm=p)
        self._made_rep(out, new.outputs[0], p)
        return True

    def wanted(self, v: Value, depth: int = 0) -> Perm | None:
        """The one permutation every reader of ``v`` wants it in, when they agree on one that is not
        the identity: a convolution's or a spatial op's data input, or an elementwise op of one
        non-constant input whose own readers agree (a few such ops deep); None otherwise (a graph
        output, any other reader)."""
        key = (v, depth)
        if key not in self.wants:
            self.wants[key] = self._wanted(v, depth)
        return self.wants[key]

    def _wanted(self, v: Value, depth: int) -> Perm | None:
        if v in self.outputs:
            return None
        if self.readers is None:
            self.readers = readers_by_value((n, n.inputs) for n in self.nodes)
        want: Perm | None = None
        for r in self.readers.get(v, ()):
            behaviour = None if r.op == CALL_OP else get_op(r.op).layout
            p: Perm | None = None
            if behaviour is Layout.CONV and r.inputs[0] is v and r.inputs[1] is not v:
                p = layout_perm(r.attrs["data_layout"], self.layout)
            elif behaviour is Layout.LAYOUT and r.inputs[0] is v:
                p = layout_perm(r.attrs["layout"], self.layout)
            elif (
                behaviour is Layout.ELEMENTWISE
                and depth < _WANTED_DEPTH
                and len(r.outputs) == 1
                and sum(1 for x in r.inputs if x.const is None) == 1
                and r.output.type.rank == v.type.rank
            ):
                p = self.wanted(r.output, depth + 1)
            if p is None or is_identity(p) or (want is not None and p != want):
                return None
            want = p
        return want

    def _permuted_operand(self, v: Value, rank: int, p: Perm) -> Value:
        """A constant operand broadcast to ``rank`` dims (leading 1s), then permuted by ``p``."""
        assert v.const is not None
        pad = rank - v.type.rank
        data = v.const.reshape((1,) * pad + v.const.shape)
        q = v.type.quant
        if q is not None and q.axis is not None:
            q = QuantParams(q.scale, q.zero_point, q.axis % v.type.rank + pad)
        data = np.ascontiguousarray(np.transpose(data, p))
        return self.g.new_const(data, v.name, permute_quant(q, p))

    def axis_op(self, node: Node) -> bool:
        """Inputs of the output's rank in one permutation, the ``axis`` attribute remapped."""
        rank = node.outputs[0].type.rank
        p = self._common_perm(node.inputs, rank)
        if p is None:
            return False
        inputs = [self.as_perm(v, p) if v.type.rank == rank else self.plain(v) for v in node.inputs]
        new = self.make(node, inputs, _replaced(node.attrs, axis=p.index(node.attrs["axis"] % rank)), perm=p)
        for o, n in zip(node.outputs, new.outputs, strict=True):
            self._made_rep(o, n, p)
        return True

    def own_rule(self, node: Node, rule: LayoutRule) -> bool:
        """The op's own rule: its first input as held, the attributes and output permutation it gives."""
        x = node.inputs[0]
        nx, p = self.get(x)
        if is_identity(p):
            return False
        found = rule(node.attrs, x.type, p)
        if found is None:
            return False
        attrs, out_p = found
        new = self.make(node, [nx, *(self.plain(v) for v in node.inputs[1:])], attrs)
        # the rule's promise, checked: each output is the original's, permuted by out_p
        for o, n in zip(node.outputs, new.outputs, strict=True):
            want = TensorType(tuple(o.type.shape[i] for i in out_p), o.type.dtype, permute_quant(o.type.quant, out_p))
            if n.type != want:
                self.rw.nodes.pop()
                return False
        for o, n in zip(node.outputs, new.outputs, strict=True):
            self.set_rep(o, n, out_p)
        return True


#: How many elementwise ops deep :meth:`_LayoutConverter.wanted` looks for the reader that wants a layout.
_WANTED_DEPTH = 4


def _replaced(attrs: Mapping[str, Any], **changes: str | int) -> Mapping[str, Any]:
    """A node's (frozen) attributes with some replaced by a string or an integer: frozen as they are."""
    return MappingProxyType({**attrs, **changes})
