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
# Refusals pinned by name; computed-shape cases run with frozen inputs.
#
# A case refused as "computed-shape-operand" is refused only because its inputs are
# run-time values; with every input frozen as an initializer the whole graph is
# evaluated at import by the frontend's constant evaluation, and that result must be
# ONNX's. (Comparisons, logic, Where, Mod, Floor/Ceil, ReduceProd and Gather are IR
# ops that run on run-time data, and Range/NonZero on run-time inputs raise
# ConstantOperandRequired, so test_node_case binds and runs them: their cases are no
# longer refusals.) Every refused case is pinned by name and category in
# onnx_node_refusals.py.
# =====================================================================================

FROZEN_CATEGORIES = ("computed-shape-operand",)


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
    s = dict.fromkeys(FROZEN_CATEGORIES, 0)
    passed = dict(s)
    for name in FROZEN_CASES:
        category = next(c for c in FROZEN_CATEGORIES if name in REFUSED[c])
        s[category] += 1
        passed[category] += frozen_outcome(name).kind == "passed"
    print("\nfrozen-input node tests: " + ", ".join(f"{c} {passed[c]}/{s[c]}" for c in FROZEN_CATEGORIES))
    assert all(s.values()), s


# ---------------------------------------------------------------------------------
# share of what onnxruntime passes, every input given at run time
# ---------------------------------------------------------------------------------
#
# The cases above bind shape operands as initializers before import. Here every
# case whose ops the frontend claims runs as a user would run it: all inputs
# given at run time, through accel.execute on the ONNX model, which specializes
# the graph on the values of operands the static IR needs (see docs/onnx.md).
# The same cases run on onnxruntime; the goal is to pass >= 95% of what it passes.

MIN_SHARE_OF_ORT = 0.95


def _ort_result(name: str) -> str | None:
    """None when onnxruntime reproduces the case's expected outputs, else why not."""
    import onnxruntime as ort

    case = _cases()[name]
    inputs, expected = case.data_sets[0]
    feed = {vi.name: _array(x) for vi, x in zip(case.model.graph.input, inputs, strict=False)}
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    try:
        sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        got = [np.asarray(a) for a in sess.run(None, feed)]
    except Exception as exc:  # onnxruntime refuses or fails the case
        return f"{type(exc).__name__}"
    return _compare(got, [_array(x) for x in expected])


def _run_time_result(name: str) -> tuple[str | None, tuple[str, ...]]:
    """accel on the case with every input given at run time: (why it failed or None, inputs specialized on)."""
    from accel.frontend.specialize import SpecializedModel

    case = _cases()[name]
    inputs, expected = case.data_sets[0]
    feed = {vi.name: _array(x) for vi, x in zip(case.model.graph.input, inputs, strict=False)}
    runner = None
    try:
        runner = SpecializedModel(case.model)
        with np.errstate(all="ignore"):
            got = list(runner.run(feed).values())
        why = _compare(got, [_array(x) for x in expected])
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
    return why, tuple(runner.bound_inputs) if runner is not None else ()


@lru_cache(maxsize=1)
def _share() -> dict[str, object]:
    ort_pass, accel_pass, specialized, misses = [], [], [], {}
    data_bound: dict[str, list[str]] = {}
    for name in OP_CLAIMED:
        if _ort_result(name) is not None:
            continue
        ort_pass.append(name)
        why, bound = _run_time_result(name)
        if why is None:
            accel_pass.append(name)
            if bound:
                specialized.append(name)
                big = [b for b in bound if _input_size(name, b) > SHAPE_OPERAND_MAX]
                # NonZero's output shape depends on its data: specializing on it is the only static way
                if big and all(n.op_type != "NonZero" for n in _cases()[name].model.graph.node):
                    data_bound[name] = big
        else:
            misses[name] = why
    return {
        "ort": ort_pass,
        "accel": accel_pass,
        "specialized": specialized,
        "misses": misses,
        "data_bound": data_bound,
    }


#: more elements than an operand that fixes a shape has (axes, sizes, scales, pads, roi): data
SHAPE_OPERAND_MAX = 16


def _input_size(name: str, input_name: str) -> int:
    case = _cases()[name]
    inputs, _ = case.data_sets[0]
    sizes = {vi.name: int(np.asarray(_array(x)).size) for vi, x in zip(case.model.graph.input, inputs, strict=False)}
    return sizes[input_name]


def test_share_of_onnxruntime_passes(node_test_summary: list[str]) -> None:
    s = _share()
    n_claimed, n_ort, n_accel = len(OP_CLAIMED), len(s["ort"]), len(s["accel"])  # type: ignore[arg-type]
    share = n_accel / n_ort
    line = (
        f"ONNX node tests whose ops accel claims, every input given at run time: {n_claimed} cases; "
        f"onnxruntime passes {n_ort} ({n_ort / n_claimed:.1%}), accel passes {n_accel} of those = {share:.1%} "
        f"of onnxruntime's (goal {MIN_SHARE_OF_ORT:.0%}); {len(s['specialized'])} ran specialized on run-time values"  # type: ignore[arg-type]
    )
    node_test_summary.append(line)
    print("\n" + line)
    misses = s["misses"]
    assert isinstance(misses, dict)
    assert share >= MIN_SHARE_OF_ORT, f"{line}; misses: " + "; ".join(f"{k}: {v[:120]}" for k, v in misses.items())
    # specializing is how operands that fix a shape run; data must run on IR ops, not be specialized on
    assert not s["data_bound"], f"cases specialized on data: {s['data_bound']}"


def test_run_time_misses_are_refusals_not_wrong_results() -> None:
    """Every case onnxruntime passes and accel does not is a typed refusal or a listed expected failure."""
    wrong = {
        k: v
        for k, v in _share()["misses"].items()  # type: ignore[union-attr]
        if not v.startswith(("UnsupportedOpError", "ModelError")) and k not in EXPECTED_FAILURES
    }
    assert not wrong, wrong


def test_docs_quote_the_measured_shares() -> None:
    """docs/onnx.md's node-test figures are the ones this suite measures (for the versions it names)."""
    from pathlib import Path

    import onnxruntime as ort

    page = (Path(__file__).resolve().parents[2] / "docs" / "onnx.md").read_text(encoding="utf-8")
    versions = re.search(r"Measured \(onnx ([\d.]+), onnxruntime ([\d.]+)\)", page)
    assert versions, "docs/onnx.md no longer states the measured versions"
    if (onnx.__version__, ".".join(ort.__version__.split(".")[:2])) != versions.groups():
        pytest.skip(f"figures measured with onnx {versions[1]} / onnxruntime {versions[2]}")
    s, share = _stats(), _share()
    text = " ".join(page.split())
    static = f"Static view: {s['claimed']} are claimed, {s['passed']} pass"
    assert static in text, f"docs/onnx.md should say: {static!r}"
    n_ort, n_accel = len(share["ort"]), len(share["accel"])  # type: ignore[arg-type]
    run_time = (
        f"onnxruntime passes {n_ort} of the {len(OP_CLAIMED)}; accel passes {n_accel} of those, "
        f"**{n_accel / n_ort:.1%}** ({len(share['specialized'])} of them"  # type: ignore[arg-type]
    )
    assert run_time in text, f"docs/onnx.md should say: {run_time!r}"
