"""The op registry: one entry per op, with its attributes, type rule and kernel.

An op is defined once, in the module of its family, with :func:`register_op`::

    def _same_type(attrs, x):
        return x

    @register_op("nn.relu", infer=_same_type)
    def relu(ctx, x):
        return np.maximum(x, 0)

- ``attrs`` maps each attribute name to its default (:data:`REQUIRED` when the
  attribute has none). Unknown attributes are refused.
- ``infer(attrs, *input_types)`` returns the output :class:`TensorType` (or a
  list of them) and raises :class:`TypeInferenceError` with a reason when the
  inputs or attributes do not fit.
- the kernel ``kernel(ctx, *arrays)`` is the numpy reference: it returns one
  array or a tuple of arrays, of exactly the inferred types. ``ctx`` is an
  :class:`OpContext` (attributes, input/output types, constant inputs).
- ``prepare(ctx)``, optional, returns a callable ``f(*arrays)`` specialised for
  one node: executors call it once per node, so weights can be packed ahead.
- ``macs(ctx)``, optional, counts multiply-accumulates (cost hints) from the
  attributes and types (not constant values: the partitioner remembers the
  count by op, attributes and types).

Traits: what passes need to know about an op is declared here, on the op,
and passes ask the :class:`OpDef`, never a list of op names of their own:

- ``layout`` (required in spirit: a test checks every op declares it) says
  how the op runs when :mod:`accel.passes.layout` holds its input in another
  axis order (NHWC instead of NCHW, say). One of :class:`Layout`:

  ============  ==============================================================
  FIXED         reads its inputs in their original axis order: the pass
                transposes them back first (``nn.dense``, ``nn.batch_matmul``)
  ELEMENTWISE   element by element over its (broadcast) inputs, so it runs in
                any order; constant operands are permuted to match, an
                ``axis`` attribute (per-axis quantization) is remapped
  AXIS          works along the axis its ``axis`` attribute names: inputs of
                the output's rank share one order, the attribute is remapped,
                lower-rank inputs (per-channel parameters) are read as they are
  LAYOUT        a 4-D op with a ``layout`` attribute (NCHW or NHWC): rebuilt
                in the target layout (pooling, resize, depth_to_space)
  CONV          ``data_layout`` and ``kernel_layout`` attributes: rebuilt in
                the target layout, its weight re-laid out (OHWI for NHWC, the
                op's default kernel layout for NCHW)
  PERMUTE       a permutation itself (``transpose``, ``layout_transform``):
                absorbed into the pass's bookkeeping, never emitted
  ============  ==============================================================

  or the op's own rule, a :data:`LayoutRule` ``rule(attrs, in_type, perm)``:
  given its first input held as ``transpose(original, perm)``, the attributes
  that compute the same result on that held input and the permutation its
  outputs then have, or ``None`` to run in the original order (``nn.pad``
  permutes its widths, ``mean`` its axes).
- ``moves_data=True``: the op only moves or relabels stored values
  (``reshape``, ``transpose``, ``concatenate``...): it does no arithmetic, so
  a region of nothing else is not worth offloading.
- ``work(ctx)``, optional, counts the elementary operations of one node
  (default: one per output element; zero for ``moves_data`` ops; at least
  ``macs``), like ``macs`` from attributes and types. Pooling counts its window.
- ``channel_axes(attrs, rank)``, for linear layers ``(data, weight) → out``
  (convolutions, dense): the channel axis of the output and the weight axis
  holding output channels (``None`` when groups split them). Batch norms fold
  into such layers.
- ``affine``, an :class:`Affine`, for a binary op that, given a constant
  operand ``c``, computes ``data · c`` (``SCALE``: ``multiply``) or
  ``data + c`` (``SHIFT``: ``add``, ``nn.bias_add``). ``c`` is either operand
  under numpy broadcasting, or, for an op with an ``axis`` attribute, the
  second operand, a vector along that axis. Per-channel scales and shifts
  after a layer with ``channel_axes`` fold into its weight and bias.
- ``qdq``, a :class:`Qdq` role, says how :mod:`accel.passes.qdq_to_qnn` treats
  the op between ``qnn.dequantize`` and ``qnn.quantize`` (or a callable of the
  node's attributes returning one, when it depends on them); ``qnn`` names
  the integer op it becomes for the ``LINEAR`` and ``INTEGER`` roles.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from accel.errors import TypeInferenceError, UnsupportedOpError
from accel.tensor_types import CALL_OP, TensorType, freeze_attrs


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


class Layout(enum.Enum):
    """How an op runs when the layout pass holds its input in another axis order (see the module doc)."""

    FIXED = "fixed"
    ELEMENTWISE = "elementwise"
    AXIS = "axis"
    LAYOUT = "layout"
    CONV = "conv"
    PERMUTE = "permute"


#: An op's own layout rule: ``rule(attrs, in_type, perm) -> (attrs, out_perm) | None``.
LayoutRule = Callable[
    [Mapping[str, Any], TensorType, tuple[int, ...]], tuple[Mapping[str, Any], tuple[int, ...]] | None
]


class Qdq(enum.Enum):
    """The role of an op in a QDQ group ``Q(op(DQ(x), ...))`` for :mod:`accel.passes.qdq_to_qnn`."""

    #: none: the group stays in float
    NONE = "none"
    #: the quantize that ends a group (``qnn.quantize``)
    QUANTIZE = "quantize"
    #: the dequantize that starts one (``qnn.dequantize``); never folded at import, so weights stay quantized
    DEQUANTIZE = "dequantize"
    #: every output element is an input element (max pooling, reshape, nearest resize): runs on the stored integers
    SELECTS = "selects"
    #: averages input elements (average pooling, mean): runs on widened integers
    AVERAGES = "averages"
    #: clamps to ``[a_min, a_max]`` (attributes; ``nn.relu`` has neither: 0 and +inf): folded into the quantize's saturation
    CLAMP = "clamp"
    #: a linear layer with a constant weight (see ``channel_axes``): becomes ``qnn`` + int32 bias + requantize
    LINEAR = "linear"
    #: becomes ``qnn``, taking every input quantized, with the output parameters as attributes (``add`` → ``qnn.add``)
    INTEGER = "integer"


class Affine(enum.Enum):
    """What a binary op computes from its data and a constant operand ``c`` (see the module doc)."""

    #: ``data · c``
    SCALE = "scale"
    #: ``data + c``
    SHIFT = "shift"


@dataclass(frozen=True)
class OpContext:
    """What a kernel knows about the node it runs."""

    op: str
    attrs: Mapping[str, Any]
    in_types: tuple[TensorType, ...]
    out_types: tuple[TensorType, ...]
    consts: tuple[np.ndarray | None, ...] = ()
    name: str = ""

    @classmethod
    def of(cls, node: Any) -> OpContext:
        """The context of an IR node (its attributes, types and constant inputs)."""
        return cls(
            node.op,
            node.attrs,
            tuple(v.type for v in node.inputs),
            tuple(v.type for v in node.outputs),
            tuple(v.const for v in node.inputs),
            node.name,
        )

    def const(self, i: int) -> np.ndarray | None:
        return self.consts[i] if i < len(self.consts) else None


@dataclass(frozen=True)
class OpDef:
    name: str
    attrs: Mapping[str, Any]
    infer: Callable[..., Any]
    kernel: Callable[..., Any]
    num_inputs: tuple[int, int | None]
    prepare: Callable[[OpContext], Callable[..., Any]] | None = None
    macs: Callable[[OpContext], int] | None = None
    doc: str = ""
    layout: Layout | LayoutRule | None = None  # None: not declared (run as FIXED; a test refuses it)
    moves_data: bool = False
    work: Callable[[OpContext], int] | None = None
    channel_axes: Callable[[Mapping[str, Any], int], tuple[int, int | None]] | None = None
    qdq: Qdq | Callable[[Mapping[str, Any]], Qdq] = Qdq.NONE
    qnn: str | None = None
    affine: Affine | None = None

    def qdq_role(self, attrs: Mapping[str, Any]) -> Qdq:
        """The op's :class:`Qdq` role for a node with ``attrs``."""
        return self.qdq if isinstance(self.qdq, Qdq) else self.qdq(attrs)

    def bind(self, ctx: OpContext) -> Callable[..., Any]:
        """A callable ``f(*arrays)`` for one node."""
        if self.prepare is not None:
            return self.prepare(ctx)
        kernel = self.kernel
        return lambda *arrays: kernel(ctx, *arrays)


REGISTRY: dict[str, OpDef] = {}

#: the attributes the layout pass rewrites, per behaviour
_LAYOUT_ATTRS = {Layout.AXIS: ("axis",), Layout.LAYOUT: ("layout",), Layout.CONV: ("data_layout", "kernel_layout")}


def register_op(
    name: str,
    *,
    infer: Callable[..., Any],
    attrs: Mapping[str, Any] | None = None,
    num_inputs: int | tuple[int, int | None] = 1,
    prepare: Callable[[OpContext], Callable[..., Any]] | None = None,
    macs: Callable[[OpContext], int] | None = None,
    layout: Layout | LayoutRule | None = None,
    moves_data: bool = False,
    work: Callable[[OpContext], int] | None = None,
    channel_axes: Callable[[Mapping[str, Any], int], tuple[int, int | None]] | None = None,
    qdq: Qdq | Callable[[Mapping[str, Any]], Qdq] = Qdq.NONE,
    qnn: str | None = None,
    affine: Affine | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering ``kernel`` as the reference of op ``name``.

    ``num_inputs`` is an exact count or ``(min, max)`` with ``max=None`` for
    variadic. The traits (``layout`` ... ``qnn``) are described in the module
    doc; ``layout`` must be given for every op. Traits that do not fit the op
    are refused here (an ``AXIS`` op without an ``axis`` attribute, a
    ``LINEAR`` role without ``qnn`` and ``channel_axes``, an ``affine`` op
    without exactly two inputs).
    """
    if isinstance(layout, Layout):
        needs = _LAYOUT_ATTRS.get(layout, ())
        if not set(needs) <= set(attrs or {}):
            raise RuntimeError(f"op {name!r}: Layout.{layout.name} ops have the attribute(s) {', '.join(needs)}")
    elif layout is not None and not callable(layout):
        raise RuntimeError(f"op {name!r}: layout must be a Layout or a rule, got {layout!r}")
    if (qdq in (Qdq.LINEAR, Qdq.INTEGER)) != (qnn is not None):
        raise RuntimeError(f"op {name!r}: the LINEAR and INTEGER qdq roles, and only they, name a qnn op")
    if qdq is Qdq.LINEAR and channel_axes is None:
        raise RuntimeError(f"op {name!r}: a LINEAR op declares its channel_axes")
    if isinstance(num_inputs, int):
        n_in: tuple[int, int | None] = (num_inputs, num_inputs)
    else:
        lo, hi = num_inputs
        n_in = (lo, hi)
    if affine is not None and (not isinstance(affine, Affine) or n_in != (2, 2)):
        raise RuntimeError(f"op {name!r}: affine must be an Affine, on an op of two inputs (data and c)")

    def deco(kernel: Callable[..., Any]) -> Callable[..., Any]:
        if name in REGISTRY:
            raise RuntimeError(f"op {name!r} registered twice")
        REGISTRY[name] = OpDef(
            name=name,
            attrs=dict(attrs or {}),
            infer=infer,
            kernel=kernel,
            num_inputs=n_in,
            prepare=prepare,
            macs=macs,
            doc=(kernel.__doc__ or "").strip(),
            layout=layout,
            moves_data=moves_data,
            work=work,
            channel_axes=channel_axes,
            qdq=qdq,
            qnn=qnn,
            affine=affine,
        )
        return kernel

    return deco


def get_op(name: str) -> OpDef:
    """The definition of ``name``; :class:`UnsupportedOpError` lists close names."""
    found = REGISTRY.get(name) if _LOADED else None
    if found is not None:  # (the common case, asked once per node by several passes)
        return found
    _ensure_loaded()
    try:
        return REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, REGISTRY, n=3)
        hint = (
            f"; did you mean {', '.join(close)}?"
            if close
            else f"; {len(REGISTRY)} ops are available (accel.ops.available())"
        )
        raise UnsupportedOpError(f"op {name!r} is not in the registry{hint}") from None


def available() -> list[str]:
    _ensure_loaded()
    return sorted(REGISTRY)


def complete_attrs(opdef: OpDef, attrs: Mapping[str, Any] | None, node: str = "") -> Mapping[str, Any]:
    """Fill defaults, refuse unknown or missing attributes; return a frozen mapping."""
    if isinstance(attrs, MappingProxyType) and attrs.keys() == opdef.attrs.keys():
        return attrs  # frozen and complete already (a node's own attributes)
    if not attrs:
        known = _DEFAULT_ATTRS.get(id(opdef))
        if known is not None and known[0] is opdef:
            return known[1]  # the op's defaults, frozen once (an immutable mapping, shared)
    given = bool(attrs)
    attrs = dict(attrs or {})
    if not attrs.keys() <= opdef.attrs.keys():
        unknown = sorted(set(attrs) - set(opdef.attrs))
        raise TypeInferenceError(
            f"{_where(opdef, node)}: unknown attribute(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(opdef.attrs)) or 'none'}"
        )
    for key, default in opdef.attrs.items():
        if key not in attrs:
            if default is REQUIRED:
                raise TypeInferenceError(f"{_where(opdef, node)}: missing required attribute {key!r}")
            attrs[key] = default
    full = freeze_attrs(attrs)
    if not given:
        _DEFAULT_ATTRS[id(opdef)] = (opdef, full)
    return full


#: ``id(opdef)`` → (that OpDef, its attributes all at their defaults, frozen): most nodes of
#: elementwise ops have no attributes, so this mapping is made once per op, not once per node.
_DEFAULT_ATTRS: dict[int, tuple[OpDef, Mapping[str, Any]]] = {}


def _where(opdef: OpDef, node: str) -> str:
    return f"node {node!r} ({opdef.name})" if node else opdef.name


def infer_node_types(
    op: str,
    in_types: Sequence[TensorType],
    attrs: Mapping[str, Any] | None,
    *,
    body: Any = None,
    node: str = "",
) -> tuple[Mapping[str, Any], list[TensorType]]:
    """Complete the attributes of a node and infer its output types."""
    if op == CALL_OP:
        if body is None:
            raise TypeInferenceError(f"node {node!r}: a call needs a nested graph")
        got = list(in_types)
        want = [v.type for v in body.inputs]
        if got != want:
            raise TypeInferenceError(
                f"node {node!r}: call arguments {', '.join(map(str, got))} do not match "
                f"the nested graph's inputs {', '.join(map(str, want))}"
            )
        return freeze_attrs(attrs), [v.type for v in body.outputs]
    opdef = get_op(op)
    lo, hi = opdef.num_inputs
    n = len(in_types)
    if n < lo or (hi is not None and n > hi):
        expected = str(lo) if lo == hi else f"{lo} to {hi if hi is not None else 'any number of'}"
        raise TypeInferenceError(f"node {node!r} ({op}): takes {expected} inputs, got {n}")
    # remembered by the attributes as given: a hit needs neither completing nor freezing them
    given = _signature(op, in_types, attrs if attrs is not None else _NO_ATTRS)
    key: tuple[Any, ...] | None = given
    try:
        found = _INFERRED.get(given)
    except TypeError:  # given as lists, say: remembered by the frozen attributes instead
        key = found = None
    if found is not None:
        return found[0], list(found[1])
    full = complete_attrs(opdef, attrs, node)
    if key is None:
        frozen = _signature(op, in_types, full)
        key = frozen
        try:
            found = _INFERRED.get(frozen)
        except TypeError:  # an attribute value that cannot be hashed: not remembered
            key = found = None
        if found is not None:
            return full, list(found[1])
    try:
        out = opdef.infer(full, *in_types)
    except TypeInferenceError as exc:
        msg = str(exc)
        prefix = f"node {node!r} ({op})" if node else op
        raise TypeInferenceError(msg if msg.startswith(prefix) else f"{prefix}: {msg}") from None
    types = [out] if isinstance(out, TensorType) else list(out)
    if key is not None:
        if len(_INFERRED) >= _INFERRED_LIMIT:
            _INFERRED.clear()
        _INFERRED[key] = (full, tuple(types))
    return full, types


def _signature(op: str, in_types: Sequence[TensorType], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    """A key of what a node's type rule sees: op, input types, attributes (hashing it raises
    TypeError when an attribute value cannot be hashed, a list say).

    The values' types are part of the key: ``True == 1 == 1.0``, yet a rule may refuse a bool.
    """
    parts = [op, *in_types]
    for k, v in attrs.items():
        parts.append((k, _kind(v), v))
    return tuple(parts)


def _kind(v: Any) -> Any:
    """The type of an attribute value, and of each item of a tuple, nested ones included."""
    t = type(v)
    if t is not tuple:
        return t
    kinds = tuple(map(type, v))  # (a tuple of numbers, as most are: one call)
    if tuple in kinds:
        return tuple(_kind(x) if type(x) is tuple else type(x) for x in v)
    return kinds


#: (op, input types, attributes as given) -> (attributes completed and frozen, output types), as
#: the op's rule inferred them. A type rule is a function of exactly these (its errors are not
#: kept), and a network repeats a few layer shapes many times: a transformer export of 100k
#: nodes has some hundred distinct keys. The frozen attributes are shared by those nodes.
_INFERRED: dict[tuple[Any, ...], tuple[Mapping[str, Any], tuple[TensorType, ...]]] = {}
_NO_ATTRS: Mapping[str, Any] = MappingProxyType({})
_INFERRED_LIMIT = 1 << 14


_LOADED = False


def _ensure_loaded() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        import accel.ops  # noqa: F401  (registers every op family)
