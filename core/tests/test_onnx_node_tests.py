"""ONNX's own node tests, run through accel's frontend and reference executor.

``onnx.backend.test.case.node.collect_testcases`` builds every node test of
the installed onnx in memory (model, inputs, expected outputs). For each case
whose ops the frontend claims, the model is imported (as is, and through the
standard simplification passes) and run with :func:`accel.execute`; outputs
must match ONNX's expected ones like onnx's backend tests check them
(rtol=1e-3, atol=1e-7 for floats, exact for integers and bools, same dtype
and shape). Known failures and the categories of typed refusals are listed,
with their reasons, in ``onnx_node_expectations.py``.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx_node_expectations import EXPECTED_FAILURES, NOT_CLAIMED
from onnx_node_refusals import FROZEN_EXPECTED_FAILURES, REFUSED

import accel
from accel.errors import ModelError, UnsupportedOpError
from accel.frontend import onnx as frontend

MIN_PASS_RATE = 0.95


@lru_cache(maxsize=1)
def _cases() -> dict:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            return {c.name: c for c in collect_testcases(None)}


def _array(x: object) -> object:
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x)
    return x  # sequences, optionals, maps: no frontend claims them


@dataclass
class Outcome:
    kind: str  # "unclaimed-op", "refused", "passed", "failed"
    detail: str = ""
    category: str | None = None
    frozen: tuple[str, ...] = ()


def _unsupported_ops(model: onnx.ModelProto) -> list[str]:
    out = set()
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in frontend.SUPPORTED_OPS:
            out.add(f"{node.domain + ':' if node.domain else ''}{node.op_type}")
    return sorted(out)


def _freeze(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.ModelProto:
    """The model with graph input ``name`` turned into an initializer holding ``value``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name != name]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.append(numpy_helper.from_array(value, name))
    return m


def _compare(got: list, expected: list) -> str | None:
    """None when the outputs match, else why not."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(got, expected, strict=False)):
        e = np.asarray(e)
        if a.dtype != e.dtype:
            return f"output {i}: dtype {a.dtype}, expected {e.dtype}"
        if a.shape != e.shape:
            return f"output {i}: shape {a.shape}, expected {e.shape}"
        try:
            if e.dtype.kind in "fc":
                np.testing.assert_allclose(a, e, rtol=1e-3, atol=1e-7)
            else:
                np.testing.assert_array_equal(a, e)
        except AssertionError as exc:
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            return f"output {i}: " + " | ".join(lines[:4])
    return None


def _category(message: str) -> str | None:
    for name, (pattern, _) in NOT_CLAIMED.items():
        if re.search(pattern, message):
            return name
    return None


@cache
def outcome(name: str) -> Outcome:
    case = _cases()[name]
    model = case.model
    missing = _unsupported_ops(model)
    if missing:
        return Outcome("unclaimed-op", ", ".join(missing))
    inputs, expected = case.data_sets[0]
    feed = {vi.name: _array(x) for vi, x in zip(model.graph.input, inputs, strict=False)}
    expected = [_array(x) for x in expected]
    frozen: list[str] = []
    try:
        while True:
            try:
                graph = frontend.import_model(model)
                break
            except frontend.ConstantOperandRequired as exc:
                value = feed.get(exc.tensor)
                if exc.tensor in frozen or not isinstance(value, np.ndarray):
                    raise
                model = _freeze(model, exc.tensor, value)
                frozen.append(exc.tensor)
    except (UnsupportedOpError, ModelError) as exc:
        return Outcome("refused", str(exc), _category(str(exc)))
    except Exception as exc:  # an IR type rule or a frontend bug: a failure, not a refusal
        return Outcome("failed", f"import: {type(exc).__name__}: {exc}", frozen=tuple(frozen))
    run_feed = {k: v for k, v in feed.items() if k not in frozen}
    problems = []
    for label in ("import", "import+simplify"):
        try:
            g = graph
            if label != "import":
                from accel.passes import simplify

                g = simplify(graph.copy())
            with np.errstate(all="ignore"):
                got = list(accel.execute(g, run_feed).values())
            why = _compare(got, expected)
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
        if why:
            problems.append(f"{label}: {why}")
    if problems:
        return Outcome("failed", "; ".join(problems), frozen=tuple(frozen))
    return Outcome("passed", frozen=tuple(frozen))


NAMES = sorted(_cases())
#: cases all of whose ops the frontend converts (the others only count in the statistics)
OP_CLAIMED = [n for n in NAMES if not _unsupported_ops(_cases()[n].model)]


@pytest.mark.parametrize("name", OP_CLAIMED)
def test_node_case(name: str) -> None:
    o = outcome(name)
    assert o.kind != "unclaimed-op"
    if o.kind == "refused":
        if o.category is None:
            pytest.fail(f"refused at import for a reason no NOT_CLAIMED category lists: {o.detail}")
        pytest.skip(f"not claimed ({o.category}): {NOT_CLAIMED[o.category][1]}")
    if name in EXPECTED_FAILURES:
        if o.kind == "passed":
            pytest.fail(f"unexpectedly passing: remove {name!r} from EXPECTED_FAILURES")
        pytest.xfail(EXPECTED_FAILURES[name])
    assert o.kind == "passed", o.detail


def _stats() -> dict[str, int]:
    counts = {
        "cases": 0,
        "claimed": 0,
        "passed": 0,
        "expected-fail": 0,
        "failed": 0,
        "not-claimed-op": 0,
        "not-claimed-refused": 0,
        "frozen-operands": 0,
    }
    for name in NAMES:
        o = outcome(name)
        counts["cases"] += 1
        if o.kind == "unclaimed-op":
            counts["not-claimed-op"] += 1
            continue
        if o.kind == "refused":
            counts["not-claimed-refused"] += 1
            continue
        counts["claimed"] += 1
        counts["frozen-operands"] += bool(o.frozen)
        if o.kind == "passed":
            counts["passed"] += 1
        elif name in EXPECTED_FAILURES:
            counts["expected-fail"] += 1
        else:
            counts["failed"] += 1
    return counts


def test_pass_rate() -> None:
    s = _stats()
    print("\nONNX node tests: " + ", ".join(f"{k}={v}" for k, v in s.items()))
    assert s["claimed"] > 500, f"the frontend claims only {s['claimed']} node tests"
    rate = s["passed"] / s["claimed"]
    assert rate >= MIN_PASS_RATE, f"pass rate {rate:.1%} over {s['claimed']} claimed cases, below {MIN_PASS_RATE:.0%}"


def test_expectations_are_current() -> None:
    """Every expected failure names a real case; every refusal category is used."""
    stale = sorted(set(EXPECTED_FAILURES) - set(NAMES))
    assert not stale, f"EXPECTED_FAILURES names cases that do not exist: {stale}"
    used = {outcome(n).category for n in NAMES if outcome(n).kind == "refused"}
    unused = sorted(set(NOT_CLAIMED) - used)
    assert not unused, f"NOT_CLAIMED categories no case needs any more: {unused}"


# =====================================================================================
# Refusals pinned by name; fold-only and computed-shape cases run with frozen inputs.
#
# A case refused as "fold-only" or "computed-shape-operand" is refused only because
# its inputs are run-time values; with every input frozen as an initializer the
# whole graph is evaluated at import by the frontend's constant evaluation (Mod,
# Range, Where, comparisons ...), and that result must be ONNX's. Every refused
# case is pinned by name and category in onnx_node_refusals.py.
# =====================================================================================

FROZEN_CATEGORIES = ("fold-only", "computed-shape-operand")


@cache
def frozen_outcome(name: str) -> Outcome:
    """The case with every graph input turned into an initializer holding its data, imported and run."""
    case = _cases()[name]
    model = case.model
    inputs, expected = case.data_sets[0]
    names = [vi.name for vi in model.graph.input]
    for input_name, x in zip(names, inputs, strict=False):
        value = _array(x)
        if not isinstance(value, np.ndarray):
            return Outcome("refused", f"input {input_name!r} is not a tensor")
        model = _freeze(model, input_name, value)
    expected = [_array(x) for x in expected]
    try:
        graph = frontend.import_model(model)
    except (UnsupportedOpError, ModelError) as exc:
        return Outcome("refused", str(exc), _category(str(exc)), frozen=tuple(names))
    except Exception as exc:
        return Outcome("failed", f"import: {type(exc).__name__}: {exc}", frozen=tuple(names))
    if graph.inputs:
        return Outcome("failed", f"inputs left after freezing: {[v.name for v in graph.inputs]}")
    problems = []
    for label in ("import", "import+simplify"):
        try:
            from accel.passes import simplify

            g = graph if label == "import" else simplify(graph.copy())
            with np.errstate(all="ignore"):
                got = list(accel.execute(g, {}).values())
            why = _compare(got, expected)
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
        if why:
            problems.append(f"{label}: {why}")
    if problems:
        return Outcome("failed", "; ".join(problems), frozen=tuple(names))
    return Outcome("passed", frozen=tuple(names))


FROZEN_CASES = sorted(n for c in FROZEN_CATEGORIES for n in REFUSED.get(c, ()))


@pytest.mark.parametrize("name", FROZEN_CASES)
def test_frozen_node_case(name: str) -> None:
    o = frozen_outcome(name)
    if name in FROZEN_EXPECTED_FAILURES:
        if o.kind == "passed":
            pytest.fail(f"unexpectedly passing with frozen inputs: remove {name!r} from FROZEN_EXPECTED_FAILURES")
        pytest.xfail(FROZEN_EXPECTED_FAILURES[name])
    assert o.kind == "passed", f"{o.kind} with frozen inputs: {o.detail}"


def test_refusals_are_pinned() -> None:
    """The cases refused at import are exactly those pinned, category by category."""
    refused: dict[str, set[str]] = {}
    for name in OP_CLAIMED:
        o = outcome(name)
        if o.kind == "refused":
            refused.setdefault(o.category or "(no category)", set()).add(name)
    problems = []
    for category in sorted(set(refused) | set(REFUSED)):
        now, pinned = refused.get(category, set()), set(REFUSED.get(category, ()))
        if now - pinned:
            problems.append(f"{category}: newly refused {sorted(now - pinned)}")
        if pinned - now:
            problems.append(f"{category}: no longer refused, take off onnx_node_refusals.py: {sorted(pinned - now)}")
    assert not problems, "; ".join(problems)


def test_frozen_cases_cover_their_categories() -> None:
    s = {"fold-only": 0, "computed-shape-operand": 0}
    passed = dict(s)
    for name in FROZEN_CASES:
        category = next(c for c in FROZEN_CATEGORIES if name in REFUSED[c])
        s[category] += 1
        passed[category] += frozen_outcome(name).kind == "passed"
    print("\nfrozen-input node tests: " + ", ".join(f"{c} {passed[c]}/{s[c]}" for c in FROZEN_CATEGORIES))
    assert all(s.values()), s
