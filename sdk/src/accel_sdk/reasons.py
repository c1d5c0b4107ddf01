"""The words a backend's support checks refuse with, in one vocabulary.

A check returns ``None`` (supported) or a reason, a one-line string in the form
Arm's Ethos-N support library answers in, the form accel prints in its report
and `accel inspect`: what the node has, then what the backend needs::

    stride size=3, stride size must = 2
    dtype='float16', dtype must be float32
    dimensions=5, dimensions must be <= 4

Each helper writes one shape of that sentence; ``what`` is the backend's own
word for the property (``"batch"``, ``"batch size"``, ``"data format"``), so
a backend keeps the terms of the library it stands for::

    from accel_sdk.reasons import constant_input, dtype_of, must_equal

    def check_conv2d(node):
        return (
            dtype_of(node, ("float32",))
            or must_equal("batch", node.inputs[0].type.shape[0], 1)
            or constant_input(node, 1, "weights", "mynpu packs constant weights once, when it loads")
        )

(``or`` stops at the first reason, so a later check may assume what an
earlier one made sure of.)

Every reason a backend documents needs a test that builds the graph and checks
the text: ``accel_sdk.testing`` has the conformance kit's refusal cases.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from accel.ir import Node, Value

__all__ = [
    "Reason",
    "constant_input",
    "dtype_of",
    "first",
    "listing",
    "must_be",
    "must_be_at_most",
    "must_equal",
]

#: What a check returns: ``None`` when supported, else why not.
Reason = str | None


def listing(choices: Sequence[Any], *, conjunction: str = "or") -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    words = [str(c) for c in choices]
    if len(words) < 2:
        return "".join(words)
    return f"{', '.join(words[:-1])} {conjunction} {words[-1]}"


def must_equal(what: str, got: Any, want: Any) -> Reason:
    """``what=got, what must = want`` unless ``got == want``."""
    return None if got == want else f"{what}={got}, {what} must = {want}"


def must_be(what: str, got: Any, allowed: Sequence[Any], *, quote: bool = False, either: bool = False) -> Reason:
    """``what=got, what must be a, b or c`` unless ``got`` is one of ``allowed`` (``quote``: ``what='got'``;
    ``either``: ``must be either a or b``)."""
    if got in allowed:
        return None
    shown = f"'{got}'" if quote else str(got)
    return f"{what}={shown}, {what} must be {'either ' if either else ''}{listing(allowed)}"


def must_be_at_most(what: str, got: Any, limit: Any) -> Reason:
    """``what=got, what must be <= limit`` unless ``got <= limit``."""
    return None if got <= limit else f"{what}={got}, {what} must be <= {limit}"


def dtype_of(node: Node | Iterable[Value], allowed: Sequence[str], what: str = "dtype") -> Reason:
    """``dtype='int8', dtype must be float32`` for the first input or output (of a node, or of the values
    given) whose dtype is not ``allowed``."""
    values = (*node.inputs, *node.outputs) if isinstance(node, Node) else tuple(node)
    for v in values:
        reason = must_be(what, v.type.dtype, allowed, quote=True)
        if reason is not None:
            return reason
    return None


def constant_input(node: Node, index: int, what: str, why: str) -> Reason:
    """``the weights (input 1) of nn.conv2d are not a constant; <why>`` unless input ``index`` is a constant."""
    if node.inputs[index].const is not None:
        return None
    return f"the {what} (input {index}) of {node.op} are not a constant; {why}"


def first(reasons: Iterable[Reason]) -> Reason:
    """The first reason that is not ``None`` (a generator is read only as far as that)."""
    return next((r for r in reasons if r is not None), None)
