"""Shared pytest hooks of core/tests: figures some tests report at the end of the run."""

from __future__ import annotations

import pytest

_SUMMARY: pytest.StashKey[list[str]] = pytest.StashKey()


@pytest.fixture(scope="session")
def node_test_summary(request: pytest.FixtureRequest) -> list[str]:
    """Lines printed in pytest's terminal summary (e.g. the ONNX node-test share next to onnxruntime's)."""
    return request.config.stash.setdefault(_SUMMARY, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(_SUMMARY, [])
    if lines:
        terminalreporter.section("accel figures")
        for line in lines:
            terminalreporter.write_line(line)
