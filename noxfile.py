"""Sessions: ``nox -s tests`` (the CI gate), ``lint``, ``demo``, ``bench``.

Each distribution is built and installed as a user would get it (a wheel,
never editable), then its tests run against the installed package.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = False

DISTRIBUTIONS = ["./core"]  # plugins/ and sdk/ distributions join this list as they land
PYTHON = None  # the interpreter nox runs under


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Build and install every distribution, then run the whole test suite."""
    session.install("./core[test]")
    session.run("accel", "--version")
    session.run("pytest", *(session.posargs or ["core/tests", "tests"]))


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (lint and format check) and mypy on the installed core."""
    session.install("ruff", "mypy", "./core")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", "core/src/accel")


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The README's main job: install accel-core and score the embedded digits model."""
    session.install("./core[ort]")
    session.run("accel", "run")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks side by side with ONNX Runtime (ratios from one run)."""
    session.install("./core[test]")
    session.run("python", "core/benchmarks/bench_core.py", *session.posargs)
