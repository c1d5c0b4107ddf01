"""The pattern language of backend support tables, and its matcher.

A backend describes the fused subgraphs (composites) it runs as patterns over
the IR, in the style of TVM's dataflow patterns. A pattern is matched at a
*root* node, the node whose output is the composite's output, and describes the
root's inputs backwards::

    >>> import numpy as np
    >>> from accel.builder import GraphBuilder
    >>> from accel.pattern import is_constant, is_op, wildcard
    >>> conv = is_op("nn.conv2d")(wildcard(), is_constant()).named("conv")
    >>> bias = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
    >>> act = bias.optional(lambda x: is_op("nn.relu")(x))
    >>> act
    nn.conv2d(*, const)@conv -> nn.bias_add?(.., const) -> nn.relu?(..)
    >>> b = GraphBuilder(x=(1, 3, 8, 8))
    >>> y = b.op("nn.conv2d", b.x["x"], b.const(np.ones((4, 3, 3, 3), np.float32)), strides=(2, 2))
    >>> g = b.done(b.op("nn.relu", b.op("nn.bias_add", y, b.const(np.zeros(4, np.float32)))))
    >>> m = act.match(g.nodes[-1], g)
    >>> [n.op for n in m.nodes], [v.name for v in m.inputs], len(m.constants)
    (['nn.conv2d', 'nn.bias_add', 'nn.relu'], ['x'], 2)
    >>> m.node("conv").attrs["strides"]
    (2, 2)
    >>> act.match(g.nodes[0], g).root.op       # the same pattern, rooted at the conv alone
    'nn.conv2d'

The combinators:

- ``wildcard()`` matches any value (graph input, constant or node output); it
  does not take the value's producer into the composite.
- ``is_constant()`` matches a value holding constant data.
- ``is_op("nn.conv2d")`` matches a value produced by an ``nn.conv2d`` node with
  any inputs; ``is_op("a", "b")`` (or ``is_op(("a", "b"))``) accepts either op.
  Calling it with input patterns, ``is_op("nn.conv2d")(wildcard(), is_constant())``,
  also requires exactly that many inputs, each matching its pattern.
- ``p | q`` matches ``p`` if it can, else ``q``.
- ``p.optional(f)`` (TVM style) matches ``f(p)`` if it can, else ``p``: a chain
  that may grow by one op, e.g. ``conv.optional(lambda x: is_op("nn.relu")(x))``
  is relu(conv) or conv.
- ``op.optional()`` (no argument, on an op pattern called with inputs) means
  the op itself may be absent: it matches the op, or else the op's *first input
  pattern* directly. ``is_op("nn.conv2d")(is_op("nn.pad")(wildcard()).optional(), w)``
  is conv(pad(x)) or conv(x).
- ``.has_dtype("uint8", ...)``, ``.has_shape((1, None, None, 8))`` (None = any
  size), ``.has_rank(4)`` constrain the matched value (for an op: its first
  output); ``.has_attr({"groups": 1})`` the matched node's attributes (compared
  after freezing, so lists equal tuples); ``.where(pred)`` any predicate, called
  with the matched Node when the pattern matched an op, else with the Value.
- ``.named("conv")`` labels what a pattern matched, for ``Match.node("conv")``.
- One pattern object used twice must match the same value each time:
  ``x = wildcard(); is_op("add")(x, x)`` matches ``add(a, a)`` but not ``add(a, b)``.

Alternatives (``|`` and both forms of ``optional``) backtrack: when a longer
form matches but the composite would be invalid, the shorter forms are tried.
A match is valid when no node is matched twice and every matched node other
than the root has its outputs read only by matched nodes (and none of them is a
graph output), so a composite never hides a value someone else needs.

Patterns are immutable and reusable; :class:`PatternMatcher` indexes a table of
them by the ops that can root each one.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from accel.errors import AccelError, GraphError
from accel.ir import CALL_OP, Graph, Node, Value, dtype_name, freeze_attr

__all__ = [
    "LABELS_ATTR",
    "CompositeMatch",
    "Match",
    "MatchFailure",
    "OpPattern",
    "Pattern",
    "PatternMatcher",
    "composite_labels",
    "composite_match",
    "is_constant",
    "is_op",
    "wildcard",
]

K = TypeVar("K")


# -- results ------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """A valid match of a pattern at ``root``: the composite it describes.

    ``nodes`` are the matched op nodes, producers before consumers (the order
    a graph built in program order has them in), the root last. ``inputs`` are
    the distinct non-constant values the composite reads from outside, and
    ``constants`` the distinct constant values it reads, both in first-use
    order. ``bindings`` maps each label given with :meth:`Pattern.named` to
    what that pattern matched.
    """

    root: Node
    nodes: list[Node]
    inputs: list[Value]
    constants: list[Value]
    bindings: dict[str, Node | Value] = field(default_factory=dict)

    @property
    def outputs(self) -> list[Value]:
        """The composite's outputs: the root's outputs."""
        return list(self.root.outputs)

    def node(self, label: str) -> Node:
        """The node the pattern labelled ``label`` matched."""
        got = self._get(label)
        if not isinstance(got, Node):
            raise TypeError(f"label {label!r} matched the value %{got.name}, not an op node (use Match.value)")
        return got

    def value(self, label: str) -> Value:
        """The value the pattern labelled ``label`` matched (for an op: its first output)."""
        got = self._get(label)
        return got.outputs[0] if isinstance(got, Node) else got

    def _get(self, label: str) -> Node | Value:
        try:
            return self.bindings[label]
        except KeyError:
            known = ", ".join(sorted(self.bindings)) or "none"
            raise KeyError(f"no pattern labelled {label!r} in this match (labels: {known})") from None


@dataclass(frozen=True)
class MatchFailure:
    """Why a pattern does not match at ``root``; false in a boolean context.

    ``progress`` says how far the attempt the reason comes from got (nodes
    matched, plus fractions for a right op failing a condition and for a whole
    structure refused by the validity rules): of several patterns failing at
    one node, the one with the most progress explains it best.
    """

    root: Node
    reason: str
    progress: float = 0.0

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.reason


# -- predicates -------------------------------------------------------------------


def _value_of(subject: Node | Value) -> Value | None:
    if isinstance(subject, Node):
        return subject.outputs[0] if subject.outputs else None
    return subject


def _what(subject: Node | Value) -> str:
    if isinstance(subject, Node):
        return f"{subject.op} {subject.name!r}"
    return f"%{subject.name}"


class _Check:
    """A condition on what a pattern matched: ``ok`` tests it, ``why`` says how it failed."""

    __slots__ = ()

    def ok(self, subject: Node | Value) -> bool:
        raise NotImplementedError

    def why(self, subject: Node | Value) -> str:
        raise NotImplementedError


class _TypeCheck(_Check):
    """A condition on one property of the matched value's type (its dtype, shape or rank)."""

    __slots__ = ("field", "get", "accept", "expected")

    def __init__(self, field: str, get: Callable[[Value], Any], accept: Callable[[Any], bool], expected: str) -> None:
        self.field, self.get, self.accept, self.expected = field, get, accept, expected

    def ok(self, subject: Node | Value) -> bool:
        v = _value_of(subject)
        return v is not None and bool(self.accept(self.get(v)))

    def why(self, subject: Node | Value) -> str:
        v = _value_of(subject)
        got = self.get(v) if v is not None else "no output"
        return f"{_what(subject)} has {self.field} {got}, expected {self.expected}"

    def __str__(self) -> str:
        return f"{self.field}={self.expected.replace(' or ', '|')}"


def _dtype_check(dtypes: tuple[str, ...]) -> _TypeCheck:
    return _TypeCheck("dtype", lambda v: v.type.dtype, lambda d: d in dtypes, " or ".join(dtypes))


def _shape_check(shape: tuple[int | None, ...]) -> _TypeCheck:
    def fits(got: list[int]) -> bool:
        return len(got) == len(shape) and all(w is None or w == g for w, g in zip(shape, got))

    spec = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
    return _TypeCheck("shape", lambda v: list(v.type.shape), fits, spec)


def _rank_check(rank: int) -> _TypeCheck:
    return _TypeCheck("rank", lambda v: v.type.rank, lambda r: r == rank, str(rank))


class _AttrCheck(_Check):
    __slots__ = ("attrs",)

    def __init__(self, attrs: tuple[tuple[str, Any], ...]):
        self.attrs = attrs

    def ok(self, subject: Node | Value) -> bool:
        if not isinstance(subject, Node):
            return False
        have = subject.attrs
        return all(key in have and have[key] == want for key, want in self.attrs)

    def why(self, subject: Node | Value) -> str:
        if not isinstance(subject, Node):
            return f"{_what(subject)} is not an op output, so it has no attributes"
        for key, want in self.attrs:
            if key not in subject.attrs:
                return f"{_what(subject)} has no attribute {key!r} (expected {key}={want!r})"
            if subject.attrs[key] != want:
                return f"{_what(subject)} has {key}={subject.attrs[key]!r}, expected {want!r}"
        return f"{_what(subject)} has the expected attributes"  # not reached when ok() is false

    def __str__(self) -> str:
        return ", ".join(f"{key}={want!r}" for key, want in self.attrs)


class _WhereCheck(_Check):
    __slots__ = ("predicate",)

    def __init__(self, predicate: Callable[[Any], Any]):
        self.predicate = predicate

    def ok(self, subject: Node | Value) -> bool:
        return bool(self.predicate(subject))

    def why(self, subject: Node | Value) -> str:
        return f"{_what(subject)} fails the condition {self._name()}"

    def _name(self) -> str:
        return getattr(self.predicate, "__qualname__", None) or repr(self.predicate)

    def __str__(self) -> str:
        return f"where {self._name()}"


# -- matching state ---------------------------------------------------------------


class _State:
    """One match attempt: what is bound so far, with an undo trail for backtracking.

    Invariant kept by every ``_m``: a call that returns False leaves the state as
    it found it. Failure reasons are only formatted when ``explain`` is set; the
    one kept got furthest: most nodes matched, then a node of the right op that
    fails a condition over a wrong op, then a whole structural match refused by
    the validity rules over any partial one; on a tie the first.
    """

    __slots__ = (
        "graph",
        "exclude",
        "explain",
        "shared",
        "matched",
        "finished",
        "bound",
        "labels",
        "trail",
        "reason",
        "rank",
        "expect_at",
        "expected",
    )

    def __init__(self, graph: Graph, exclude: Container[Node] | None, explain: bool, shared: frozenset[int]):
        self.graph = graph
        self.shared = shared  # ids of the patterns that may be reached twice in one match: they bind
        self.exclude = exclude
        self.explain = explain
        self.matched: dict[Node, Node] = {}
        self.finished: dict[Node, Node] = {}  # matched nodes whose inputs are matched too: a topological order
        self.bound: dict[int, tuple[Value, Node | Value]] = {}
        self.labels: dict[str, Node | Value] = {}
        self.trail: list[tuple[dict[Any, Any], Any]] = []
        self.reason = ""
        self.rank = -1.0
        self.expect_at: Value | None = None  # the value the kept reason wants another op at
        self.expected: list[str] = []

    def put(self, table: dict[Any, Any], key: Any, item: Any) -> None:
        table[key] = item
        self.trail.append((table, key))

    def undo(self, mark: int) -> None:
        trail = self.trail
        while len(trail) > mark:
            table, key = trail.pop()
            del table[key]

    def note(self, reason: str, bonus: float = 0.0) -> None:
        rank = len(self.matched) + bonus
        if rank > self.rank:
            self.rank, self.reason, self.expect_at = rank, reason, None

    def note_op(self, v: Value, ops: Sequence[str]) -> None:
        """``v`` is not produced by one of ``ops``; alternatives failing at the same point add their ops."""
        rank = float(len(self.matched))
        if rank == self.rank and self.expect_at is v:
            self.expected.extend(op for op in ops if op not in self.expected)
        elif rank > self.rank:
            self.rank, self.expect_at, self.expected = rank, v, list(ops)
        else:
            return
        node = v.producer
        source = f"produced by {_what(node)}" if node is not None else "not an op output"
        self.reason = f"%{v.name} is {source}, expected {' or '.join(self.expected)}"


Done = Callable[[], bool]
Then = Callable[[Any], bool]


def _match_inputs(patterns: tuple[Pattern, ...], values: Sequence[Value], i: int, st: _State, done: Done) -> bool:
    if i == len(patterns):
        return done()
    return patterns[i]._m(values[i], st, lambda _subject: _match_inputs(patterns, values, i + 1, st, done))


# -- patterns ---------------------------------------------------------------------


class Pattern:
    """A pattern over the IR: immutable, reusable, compared by identity.

    Build patterns with :func:`is_op`, :func:`wildcard` and :func:`is_constant`
    and the methods below; each method returns a new pattern.
    """

    __slots__ = ("_checks", "_label", "_shared")
    _checks: tuple[_Check, ...]
    _label: str | None
    _shared: frozenset[int] | None  # cache of _shared_ids()

    def __init__(self) -> None:
        object.__setattr__(self, "_checks", ())
        object.__setattr__(self, "_label", None)
        object.__setattr__(self, "_shared", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("patterns are immutable; build a new one with the combinators")

    def _copy(self, **changes: Any) -> Pattern:
        new = object.__new__(type(self))
        for cls in type(self).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                object.__setattr__(new, slot, changes.get(slot, getattr(self, slot)))
        object.__setattr__(new, "_shared", None)
        return new

    # -- combinators ----------------------------------------------------------------
    def __or__(self, other: Pattern) -> Pattern:
        """``self`` if it matches, else ``other``."""
        if not isinstance(other, Pattern):
            return NotImplemented
        return _AltPattern(self, other, "or")

    def optional(self, extend: Callable[[Pattern], Pattern] | None = None) -> Pattern:
        """A pattern that may be longer or shorter (greedy: the longer form is tried first).

        With ``extend``: ``extend(self)`` if it matches, else ``self``
        (``conv.optional(lambda x: is_op("nn.relu")(x))`` is relu(conv) or conv).
        Without: ``self`` must be an op pattern called with inputs, and the op
        may be absent: the result matches the op, or else its first input
        pattern directly (``is_op("nn.pad")(wildcard()).optional()`` is pad(x) or x).
        """
        if extend is None:
            raise TypeError(
                f"optional() without a function needs an op pattern called with inputs, not {self!r}; "
                "use pattern.optional(lambda x: ...) to grow a pattern"
            )
        if not callable(extend):
            raise TypeError(f"optional() takes a function pattern -> pattern, got {type(extend).__name__}")
        longer = extend(self)
        if not isinstance(longer, Pattern):
            raise TypeError(f"the function given to optional() returned {type(longer).__name__}, not a Pattern")
        return _AltPattern(longer, self, "grow")

    def has_attr(self, attrs: Mapping[str, Any] | None = None, /, **more: Any) -> Pattern:
        """Require the matched node to have these attribute values (a dict, keywords or both)."""
        items = {**(attrs or {}), **more}
        if not items:
            raise ValueError("has_attr() needs at least one attribute")
        frozen = []
        for key, want in items.items():
            try:
                frozen.append((str(key), freeze_attr(want)))
            except AccelError as exc:
                raise TypeError(f"has_attr({key}=...): {exc}") from None
        return self._with_check(_AttrCheck(tuple(frozen)))

    def has_dtype(self, *dtypes: Any) -> Pattern:
        """Require the matched value (an op's first output) to have one of ``dtypes``."""
        if not dtypes:
            raise ValueError("has_dtype() needs at least one dtype")
        try:
            names = tuple(dict.fromkeys(dtype_name(d) for d in dtypes))
        except AccelError as exc:
            raise ValueError(f"has_dtype(): {exc}") from None
        return self._with_check(_dtype_check(names))

    def has_shape(self, shape: Sequence[int | None]) -> Pattern:
        """Require the matched value to have this shape; ``None`` accepts any size in that dimension."""
        try:
            dims = tuple(None if d is None else int(d) for d in shape)
        except (TypeError, ValueError):
            raise TypeError(f"has_shape() takes a sequence of ints or None, got {shape!r}") from None
        return self._with_check(_shape_check(dims))

    def has_rank(self, rank: int) -> Pattern:
        """Require the matched value to have ``rank`` dimensions."""
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise TypeError(f"has_rank() takes a non-negative int, got {rank!r}")
        return self._with_check(_rank_check(rank))

    def where(self, predicate: Callable[[Any], Any]) -> Pattern:
        """Require ``predicate(subject)`` to be true: subject is the matched Node for an op, else the Value."""
        if not callable(predicate):
            raise TypeError(f"where() takes a callable, got {type(predicate).__name__}")
        return self._with_check(_WhereCheck(predicate))

    def named(self, label: str) -> Pattern:
        """Label this pattern; a match then gives what it matched as ``m.node(label)`` / ``m.value(label)``."""
        if not isinstance(label, str) or not label:
            raise TypeError(f"a pattern label is a non-empty string, got {label!r}")
        return self._copy(_label=label)

    def _with_check(self, check: _Check) -> Pattern:
        return self._copy(_checks=(*self._checks, check))

    # -- matching -----------------------------------------------------------------
    def match(self, node: Node, graph: Graph, *, exclude: Container[Node] | None = None) -> Match | None:
        """The valid match rooted at ``node``, or None.

        ``exclude`` holds nodes that may not be part of the match (for example,
        nodes already taken by another composite).
        """
        if node.outputs and not self._could(node.outputs[0], _LOOK_AHEAD):
            return None  # (the ops around the node rule a match out: no search)
        result = _run(self, node, graph, exclude, explain=False)
        return result if isinstance(result, Match) else None

    def try_match(self, node: Node, graph: Graph, *, exclude: Container[Node] | None = None) -> Match | MatchFailure:
        """Like :meth:`match`, but a failure says why (the attempt that got furthest)."""
        return _run(self, node, graph, exclude, explain=True)

    def match_reason(self, node: Node, graph: Graph, *, exclude: Container[Node] | None = None) -> str | None:
        """None when the pattern matches at ``node``, else the reason it does not."""
        result = _run(self, node, graph, exclude, explain=True)
        return None if isinstance(result, Match) else result.reason

    def root_ops(self) -> frozenset[str] | None:
        """The ops a node must have for this pattern to match at it; None when any node could do."""
        raise NotImplementedError

    def ops(self) -> frozenset[str]:
        """Every op name the pattern mentions."""
        found: set[str] = set()
        for p in self._walk():
            if isinstance(p, OpPattern):
                found.update(p._ops)
        return frozenset(found)

    def _walk(self) -> Iterator[Pattern]:
        seen: set[int] = set()
        stack: list[Pattern] = [self]
        while stack:
            p = stack.pop()
            if id(p) not in seen:
                seen.add(id(p))
                yield p
                stack.extend(p._children())

    def _children(self) -> tuple[Pattern, ...]:
        return ()

    def _shared_ids(self) -> frozenset[int]:
        """Ids of the sub-patterns one match can reach twice (an op reading them at two inputs, say).

        Only those need to remember what they matched; computed once, as each
        alternative takes one branch and each op all of its inputs.
        """
        shared = self._shared
        if shared is None:
            counts: dict[int, dict[int, int]] = {}  # pattern id -> {sub-pattern id: times reached, at most 2}

            def reach(p: Pattern) -> dict[int, int]:
                got = counts.get(id(p))
                if got is None:
                    got = {}
                    parts = [reach(c) for c in p._children()]
                    if isinstance(p, _AltPattern):
                        for part in parts:
                            for key, n in part.items():
                                got[key] = max(got.get(key, 0), n)
                    else:
                        for part in parts:
                            for key, n in part.items():
                                got[key] = min(2, got.get(key, 0) + n)
                    got[id(p)] = 1
                    counts[id(p)] = got
                return got

            shared = frozenset(key for key, n in reach(self).items() if n > 1)
            object.__setattr__(self, "_shared", shared)
        return shared

    def _could(self, v: Value, depth: int) -> bool:
        """Whether ``v`` has the shape this pattern asks for, looked at ``depth`` producers deep:
        false only when no match can exist (checks, shared bindings and exclusions are left to the
        match), so that a node of a root op whose inputs come from other ops is passed over cheaply."""
        return True

    def _m(self, v: Value, st: _State, then: Then) -> bool:
        """Match ``v``, then run ``then(subject)``; True when both succeed (see :class:`_State`)."""
        hit = st.bound.get(id(self)) if st.shared else None
        if hit is not None:
            if hit[0] is v:
                return then(hit[1])
            if st.explain:
                st.note(f"one pattern is used twice but would match both %{hit[0].name} and %{v.name}", bonus=0.25)
            return False
        return self._structural(v, st, then)

    def _structural(self, v: Value, st: _State, then: Then) -> bool:
        raise NotImplementedError

    def _accept(self, v: Value, subject: Node | Value, st: _State) -> bool:
        """Check this pattern's predicates on ``subject`` and record the binding (and label)."""
        for check in self._checks:
            if not check.ok(subject):
                if st.explain:
                    st.note(check.why(subject), bonus=0.25)
                return False
        if st.shared and id(self) in st.shared:
            st.put(st.bound, id(self), (v, subject))
        if self._label is not None:
            prev = st.labels.get(self._label)
            if prev is not None and prev is not subject:
                raise ValueError(
                    f"label {self._label!r} is given to two parts of one pattern, "
                    f"which match {_what(prev)} and {_what(subject)}"
                )
            if prev is None:
                st.put(st.labels, self._label, subject)
        return True

    # -- printing -----------------------------------------------------------------
    def __repr__(self) -> str:
        return self._fmt(None)

    def _fmt(self, hole: Pattern | None) -> str:
        """Text of the pattern, writing ``..`` for ``hole`` (the pattern a chain grows from)."""
        if self is hole:
            return ".."
        return self._body(hole) + self._suffix()

    def _body(self, hole: Pattern | None, optional: bool = False) -> str:
        raise NotImplementedError

    def _suffix(self) -> str:
        text = "".join(f"[{check}]" for check in self._checks)
        return text + (f"@{self._label}" if self._label is not None else "")


class _WildcardPattern(Pattern):
    __slots__ = ()

    def root_ops(self) -> frozenset[str] | None:
        return None

    def _structural(self, v: Value, st: _State, then: Then) -> bool:
        mark = len(st.trail)
        if not self._accept(v, v, st):
            return False
        if then(v):
            return True
        st.undo(mark)
        return False

    def _body(self, hole: Pattern | None, optional: bool = False) -> str:
        return "*"


class _ConstantPattern(Pattern):
    __slots__ = ()

    def root_ops(self) -> frozenset[str] | None:
        return frozenset()  # a constant is never a node's output

    def _could(self, v: Value, depth: int) -> bool:
        return v.const is not None

    def _structural(self, v: Value, st: _State, then: Then) -> bool:
        if v.const is None:
            if st.explain:
                st.note(f"%{v.name} is not a constant")
            return False
        return _WildcardPattern._structural(self, v, st, then)  # type: ignore[arg-type]

    def _body(self, hole: Pattern | None, optional: bool = False) -> str:
        return "const"


class OpPattern(Pattern):
    """An op (or one of several ops), with any inputs until called with input patterns."""

    __slots__ = ("_names", "_ops", "_inputs")
    _names: tuple[str, ...]
    _ops: frozenset[str]
    _inputs: tuple[Pattern, ...] | None

    def __init__(self, names: tuple[str, ...], inputs: tuple[Pattern, ...] | None = None):
        super().__init__()
        object.__setattr__(self, "_names", names)
        object.__setattr__(self, "_ops", frozenset(names))
        object.__setattr__(self, "_inputs", inputs)

    def __call__(self, *inputs: Pattern) -> Pattern:
        """This op with exactly these input patterns."""
        if self._inputs is not None:
            raise TypeError(f"{self!r} already has its input patterns; call is_op(...) once with all of them")
        for i, p in enumerate(inputs):
            if not isinstance(p, Pattern):
                raise TypeError(f"input {i} of {self!r} must be a Pattern (wildcard(), is_op(...)), got {p!r}")
        return self._copy(_inputs=tuple(inputs))

    def optional(self, extend: Callable[[Pattern], Pattern] | None = None) -> Pattern:
        """``extend(self)`` or ``self`` with a function; without one, this op or else its first input pattern."""
        if extend is not None:
            return super().optional(extend)
        if not self._inputs:
            raise TypeError(
                f"optional() on {self!r}: give the op its input patterns first, "
                "e.g. is_op('nn.pad')(wildcard()).optional(); when the op is absent its first input matches instead"
            )
        return _AltPattern(self, self._inputs[0], "skip")

    def root_ops(self) -> frozenset[str] | None:
        return self._ops

    def _could(self, v: Value, depth: int) -> bool:
        node = v.producer
        if node is None or node.op not in self._ops:
            return False
        inputs = self._inputs
        if inputs is None or depth <= 1:
            return True
        if len(inputs) != len(node.inputs):
            return False
        return all(p._could(x, depth - 1) for p, x in zip(inputs, node.inputs, strict=True))

    def _children(self) -> tuple[Pattern, ...]:
        return self._inputs or ()

    def _structural(self, v: Value, st: _State, then: Then) -> bool:
        node = v.producer
        if node is None or node.op not in self._ops:
            if st.explain:
                st.note_op(v, self._names)
            return False
        inputs = self._inputs
        if inputs is not None and len(inputs) != len(node.inputs):
            if st.explain:
                st.note(f"{_what(node)} has {len(node.inputs)} inputs, the pattern expects {len(inputs)}", bonus=0.25)
            return False
        if node in st.matched:
            if st.explain:
                st.note(f"{_what(node)} would be matched twice", bonus=0.25)
            return False
        if st.exclude is not None and node in st.exclude:
            if st.explain:
                st.note(f"{_what(node)} is already taken", bonus=0.25)
            return False
        mark = len(st.trail)
        if not self._accept(v, node, st):
            return False
        st.put(st.matched, node, node)

        def finish() -> bool:
            st.put(st.finished, node, node)
            return then(node)

        ok = _match_inputs(inputs, node.inputs, 0, st, finish) if inputs else finish()
        if not ok:
            st.undo(mark)
        return ok

    def _body(self, hole: Pattern | None, optional: bool = False) -> str:
        name = self._names[0] if len(self._names) == 1 else "(" + "|".join(self._names) + ")"
        if optional:
            name += "?"
        inputs = self._inputs
        if inputs is None:
            return name
        # a chain reads left to right: "first input -> this op(.., other inputs)"
        head = inputs[0] if inputs else None
        chains = isinstance(head, _AltPattern) or (isinstance(head, OpPattern) and bool(head._inputs))
        if head is not None and head is not hole and chains:
            rest = ", ".join(p._fmt(hole) for p in inputs[1:])
            return f"{head._fmt(hole)} -> {name}(..{', ' + rest if rest else ''})"
        return f"{name}({', '.join(p._fmt(hole) for p in inputs)})"


class _AltPattern(Pattern):
    """``first`` if it matches, else ``second``. ``kind`` only shapes the text:
    ``or`` (``a | b``), ``grow`` (``second.optional(f)`` with ``first = f(second)``),
    ``skip`` (``first.optional()`` with ``second`` its first input)."""

    __slots__ = ("_first", "_second", "_kind")
    _first: Pattern
    _second: Pattern
    _kind: str

    def __init__(self, first: Pattern, second: Pattern, kind: str):
        super().__init__()
        object.__setattr__(self, "_first", first)
        object.__setattr__(self, "_second", second)
        object.__setattr__(self, "_kind", kind)

    def root_ops(self) -> frozenset[str] | None:
        a, b = self._first.root_ops(), self._second.root_ops()
        return None if a is None or b is None else a | b

    def _could(self, v: Value, depth: int) -> bool:
        return self._first._could(v, depth) or self._second._could(v, depth)

    def _children(self) -> tuple[Pattern, ...]:
        return (self._first, self._second)

    def _structural(self, v: Value, st: _State, then: Then) -> bool:
        def accept_then(subject: Node | Value) -> bool:
            mark = len(st.trail)
            if not self._accept(v, subject, st):
                return False
            if then(subject):
                return True
            st.undo(mark)
            return False

        return self._first._m(v, st, accept_then) or self._second._m(v, st, accept_then)

    def _body(self, hole: Pattern | None, optional: bool = False) -> str:
        first, second = self._first, self._second
        if self._kind == "skip" and isinstance(first, OpPattern):
            return first._body(hole, optional=True) + first._suffix()
        if self._kind == "grow" and any(p is second for p in first._walk()):
            if isinstance(first, OpPattern):
                longer = first._body(second, optional=True) + first._suffix()
            else:
                text = first._fmt(second)
                bare_or = isinstance(first, _AltPattern) and first._kind == "or" and not first._suffix()
                longer = f"{text}?" if bare_or else f"({text})?"
            return f"{second._fmt(hole)} -> {longer}"
        return f"({first._fmt(hole)} | {second._fmt(hole)})"


# -- constructors -----------------------------------------------------------------


def wildcard() -> Pattern:
    """A pattern matching any value; a new one each call (one object used twice binds one value)."""
    return _WildcardPattern()


def is_constant() -> Pattern:
    """A pattern matching a value with constant data."""
    return _ConstantPattern()


def is_op(*ops: str | Sequence[str]) -> OpPattern:
    """A pattern matching the output of a node whose op is one of ``ops``, with any inputs.

    Call the result with input patterns to constrain the inputs:
    ``is_op("nn.conv2d")(wildcard(), is_constant())``.
    """
    names: list[str] = []
    for item in ops:
        group = [item] if isinstance(item, str) else list(item)
        for name in group:
            if not isinstance(name, str) or not name:
                raise TypeError(f"is_op() takes op names (non-empty strings), got {name!r}")
            names.append(name)
    if not names:
        raise TypeError("is_op() needs at least one op name")
    return OpPattern(tuple(dict.fromkeys(names)))


# -- running a match ----------------------------------------------------------------

#: How many producers deep :meth:`Pattern.match` looks before it searches (Pattern._could).
_LOOK_AHEAD = 3


def _run(
    pattern: Pattern, root: Node, graph: Graph, exclude: Container[Node] | None, explain: bool
) -> Match | MatchFailure:
    st = _State(graph, exclude, explain, pattern._shared_ids())
    found: list[Match] = []

    def finish(subject: Node | Value) -> bool:
        if subject is not root:
            if explain:
                st.note(f"the pattern matches %{root.outputs[0].name} without taking {_what(root)} itself")
            return False
        reason = _escape(st, root)
        if reason is not None:
            if explain:
                st.note(reason, bonus=0.5)
            return False
        found.append(_build(st, root))
        return True

    if not root.outputs:
        return MatchFailure(root, f"{_what(root)} has no outputs")
    if pattern._m(root.outputs[0], st, finish):
        return found[0]
    if not explain:
        return MatchFailure(root, "")  # nobody reads it: Pattern.match returns None
    return MatchFailure(root, st.reason or f"{_what(root)} does not match {pattern!r}", max(st.rank, 0.0))


def _escape(st: _State, root: Node) -> str | None:
    """Why the matched nodes cannot form one composite (a value escapes), or None."""
    graph, matched = st.graph, st.matched
    for node in matched.values():
        if node is root:
            continue
        for out in node.outputs:
            if graph.is_output(out):
                return f"{node.op} output %{out.name} is a graph output, so it cannot be inside the pattern"
            for user in graph.readers(out):
                if user not in matched:
                    return f"{node.op} output %{out.name} is used outside the pattern (by {_what(user)})"
    return None


def _build(st: _State, root: Node) -> Match:
    matched = st.matched
    order = list(st.finished.values())  # each node after its inputs' producers, the root last
    inputs: dict[Value, None] = {}  # (dicts: sets in first-read order)
    constants: dict[Value, None] = {}
    for node in order:
        for v in node.inputs:
            if v.producer is not None and v.producer in matched:
                continue
            (constants if v.const is not None else inputs)[v] = None
    return Match(root, order, list(inputs), list(constants), dict(st.labels))


# -- composites -------------------------------------------------------------------

#: Attribute of a composite ``call`` node holding its pattern labels (see :func:`composite_labels`).
LABELS_ATTR = "labels"


@dataclass(frozen=True)
class CompositeMatch(Match):
    """The match of a composite ``call`` node, over its body, as a serializer reads it.

    ``root``, ``nodes`` and ``bindings`` are the body's nodes; ``inputs`` are the
    body's inputs (parameters standing for the call's arguments) and
    ``constants`` the constants its nodes read. :meth:`outer` gives the value
    outside the composite that a body input or output stands for.
    """

    call: Node = field(kw_only=True)

    def outer(self, v: Value) -> Value:
        """The call's argument for a body input, the call's output for a body output, else ``v``."""
        body = self.call.body
        assert body is not None
        for param, arg in zip(body.inputs, self.call.inputs):
            if param is v:
                return arg
        for out, res in zip(body.outputs, self.call.outputs):
            if out is v:
                return res
        return v


def composite_labels(match: Match) -> tuple[tuple[Any, ...], ...]:
    """``match``'s labels as a node attribute that survives copying and JSON.

    A label of an op is ``(label, node name)``; a label of a value is
    ``(label, node name, i)``: the value the named node reads at input ``i``
    (names of inputs change when a composite is outlined, its readers' do not).
    """
    out: list[tuple[Any, ...]] = []
    for label, got in match.bindings.items():
        if isinstance(got, Node):
            out.append((label, got.name))
            continue
        reader = next(((n.name, i) for n in match.nodes for i, v in enumerate(n.inputs) if v is got), None)
        if reader is None:
            raise ValueError(f"label {label!r} matched %{got.name}, which no node of the match reads")
        out.append((label, *reader))
    return tuple(out)


def composite_match(call: Node) -> CompositeMatch:
    """The :class:`Match` (labels → body nodes and values) of a composite ``call`` node.

    Works on a partition body as the serializer receives it and on one read
    back from an artifact: the labels are kept in the call's ``labels``
    attribute (:func:`composite_labels`). A bad call node is a GraphError.
    """
    body = call.body
    if call.op != CALL_OP or body is None or "composite" not in call.attrs:
        raise GraphError(f"node {call.name!r} ({call.op}) is not a composite call")
    if not body.nodes:
        raise GraphError(f"composite call {call.name!r} has an empty body")
    labels = call.attrs.get(LABELS_ATTR, ())
    if not isinstance(labels, tuple):
        raise GraphError(
            f"composite call {call.name!r}: attribute {LABELS_ATTR!r} is {labels!r}, not a tuple of entries"
        )
    by_name = {n.name: n for n in body.nodes}
    bindings: dict[str, Node | Value] = {}
    for item in labels:
        ok = isinstance(item, tuple) and len(item) in (2, 3) and all(isinstance(x, str) for x in item[:2])
        node = by_name.get(item[1]) if ok else None
        if node is None:
            raise GraphError(f"composite call {call.name!r}: label entry {item!r} names no node of its body")
        if len(item) == 2:
            bindings[item[0]] = node
            continue
        i = item[2]
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(node.inputs):
            raise GraphError(f"composite call {call.name!r}: label entry {item!r}: {node.name!r} has no input {i!r}")
        bindings[item[0]] = node.inputs[i]
    constants: dict[Value, None] = {}  # (a set in first-read order)
    for node in body.nodes:
        for v in node.inputs:
            if v.const is not None:
                constants[v] = None
    return CompositeMatch(body.nodes[-1], list(body.nodes), list(body.inputs), list(constants), bindings, call=call)


# -- tables -----------------------------------------------------------------------


class PatternMatcher(Generic[K]):
    """A priority-ordered table of patterns, indexed by the ops that can root each one.

    ``entries`` are ``(key, pattern)`` pairs, or objects with a ``pattern``
    attribute (such as :class:`accel.backend.PatternEntry`), which are then
    their own key. A pattern that could be rooted at any node (a bare
    wildcard) or at none (a constant), or that names an op the registry does
    not know, is refused with a ValueError.
    """

    def __init__(self, entries: Iterable[tuple[K, Pattern] | Any]):
        from accel.ops import available

        known = set(available()) | {CALL_OP}
        self.entries: tuple[tuple[K, Pattern], ...] = tuple(_entry(item) for item in entries)
        index: dict[str, list[tuple[K, Pattern]]] = {}
        for key, pattern in self.entries:
            roots = pattern.root_ops()
            if roots is None:
                raise ValueError(
                    f"pattern {key!r} ({pattern!r}) could match at any node: its root must be an op, "
                    "e.g. is_op('nn.relu')(wildcard()), not a wildcard"
                )
            if not roots:
                raise ValueError(f"pattern {key!r} ({pattern!r}) can never match: no op can be its root")
            unknown = sorted(pattern.ops() - known)
            if unknown:
                raise ValueError(
                    f"pattern {key!r} names unknown op(s) {', '.join(unknown)} (see accel.ops.available())"
                )
            for op in sorted(roots):
                index.setdefault(op, []).append((key, pattern))
        self._index = {op: tuple(rows) for op, rows in index.items()}

    @property
    def ops(self) -> frozenset[str]:
        """Every op that can root some pattern of the table."""
        return frozenset(self._index)

    def candidates(self, node: Node) -> tuple[tuple[K, Pattern], ...]:
        """The entries whose pattern can be rooted at ``node`` (by its op), in priority order."""
        return self._index.get(node.op, ())

    def match(self, node: Node, graph: Graph, *, exclude: Container[Node] | None = None) -> list[tuple[K, Match]]:
        """Every entry that matches at ``node``, in priority order."""
        found = []
        for key, pattern in self._index.get(node.op, ()):
            m = pattern.match(node, graph, exclude=exclude)
            if m is not None:
                found.append((key, m))
        return found

    def first(self, node: Node, graph: Graph, *, exclude: Container[Node] | None = None) -> tuple[K, Match] | None:
        """The highest-priority entry that matches at ``node``, or None."""
        for key, pattern in self._index.get(node.op, ()):
            m = pattern.match(node, graph, exclude=exclude)
            if m is not None:
                return key, m
        return None

    def try_all(
        self, node: Node, graph: Graph, *, exclude: Container[Node] | None = None
    ) -> list[tuple[K, Match | MatchFailure]]:
        """Each candidate entry at ``node`` with its match or the reason it failed, in priority order."""
        return [(key, pattern.try_match(node, graph, exclude=exclude)) for key, pattern in self.candidates(node)]

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"PatternMatcher({len(self.entries)} patterns rooted at {len(self._index)} ops)"


def _entry(item: Any) -> tuple[Any, Pattern]:
    pattern = getattr(item, "pattern", None)
    if isinstance(pattern, Pattern):
        return item, pattern
    try:
        key, pattern = item
    except (TypeError, ValueError):
        raise TypeError(f"a pattern table entry is a (key, pattern) pair or has a .pattern, got {item!r}") from None
    if not isinstance(pattern, Pattern):
        raise TypeError(f"entry {key!r}: {pattern!r} is not a Pattern")
    return key, pattern
