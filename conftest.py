"""Test-suite rules shared by core/tests, sdk/tests and tests/.

In CI (``CI`` set to true, as CI services do) a test or a whole module that
``pytest.importorskip`` would skip because a dependency is missing fails
instead: CI installs every test dependency, so a missing one is a broken setup
that must not pass as a green run with modules silently left out. Locally the
skip stays, so a partial install can still run what it can.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

#: The text pytest.importorskip puts in the skip it raises.
IMPORT_SKIP = "could not import"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _fail_import_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if report.skipped and IMPORT_SKIP in str(report.longrepr):
        why = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"a test dependency is missing in CI (CI={os.environ.get('CI')}): {why}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome: Any = yield
    if in_ci():
        _fail_import_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome: Any = yield
    if in_ci():
        _fail_import_skip(outcome.get_result())
