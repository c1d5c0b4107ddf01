"""Sessions: ``nox -s tests`` (the CI gate), ``lint``, ``demo``, ``bench``.

Each distribution is built and installed as a user would get it (a wheel,
never editable), then its tests run against the installed package.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = False

DISTRIBUTIONS = ["./core", "./sdk"]  # plugins/ distributions join this list as they land
#: Backends built in-tree with accel-sdk, as a third party builds them, plus broken
#: plugins the discovery tests need. Built without isolation: their build needs the
#: accel-core and accel-sdk installed just before, which the package index lacks.
TEST_BACKENDS = [
    "tests/backends/testbackend",
    "tests/backends/wrong_abi",
    "tests/backends/broken_import",
    "tests/backends/hook_raises",
]
BUILD_TOOLS = ["scikit-build-core", "pybind11", "hatchling", "cmake", "ninja"]
PYTHON = None  # the interpreter nox runs under


def install_all(session: nox.Session) -> None:
    session.install("./core[test]", "./sdk[test]", *BUILD_TOOLS)
    session.install("--no-build-isolation", *TEST_BACKENDS)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Build and install every distribution and the test backends, then run the whole test suite."""
    install_all(session)
    session.run("accel", "--version")
    session.run("accel", "backends")
    session.run("pytest", *(session.posargs or ["core/tests", "sdk/tests", "tests"]))


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (lint and format check) and mypy on the installed core."""
    session.install("ruff", "mypy", "./core")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", "core/src/accel", "sdk/src/accel_sdk")


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The README's main job: install accel-core and score the embedded digits model."""
    session.install("./core[ort]")
    session.run("accel", "run")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks side by side with ONNX Runtime (ratios from one run)."""
    install_all(session)
    session.run("python", "core/benchmarks/bench_core.py", *session.posargs)
    session.run("python", "core/benchmarks/bench_partition.py")


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """Fuzz the blob reader and the graph-blob reader (libFuzzer, AddressSanitizer + UBSan).

    Builds sdk/fuzz/fuzz_*.cpp with clang++, seeds each from real blobs
    (sdk/fuzz/make_seeds.py) and runs each target for 30 seconds; ``nox -s fuzz -- 600``
    runs each for 600. Any finding fails the session and leaves its input in the tmp folder.
    """
    import shutil
    import subprocess
    from pathlib import Path

    clang = shutil.which("clang++")
    probe = 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }'
    if clang is None or subprocess.run(
        [clang, "-x", "c++", "-fsanitize=fuzzer,address,undefined", "-", "-o", "/dev/null"],
        input=probe, text=True, capture_output=True, check=False,
    ).returncode != 0:  # fmt: skip
        session.skip("fuzz: needs clang++ with libFuzzer (e.g. apt-get install clang), not found on this machine")
    seconds = session.posargs[0] if session.posargs else "30"
    session.install("./core", "./sdk")
    tmp = Path(session.create_tmp())
    seeds = tmp / "seeds"
    session.run("python", "sdk/fuzz/make_seeds.py", str(seeds))
    include = session.run(
        "python", "-c", "import accel, accel_sdk; print(accel_sdk.get_include()); print(accel.get_include())",
        silent=True,
    )  # fmt: skip
    flags = ["-std=c++17", "-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=undefined"]
    flags += [f"-I{line}" for line in str(include).split()]
    for target in ("blob_reader", "graph_blob"):
        exe = tmp / f"fuzz_{target}"
        session.run(clang, *flags, f"sdk/fuzz/fuzz_{target}.cpp", "-o", str(exe), external=True)
        corpus = tmp / f"corpus_{target}"
        corpus.mkdir(exist_ok=True)
        session.run(
            str(exe), f"-max_total_time={seconds}", "-print_final_stats=1", f"-artifact_prefix={tmp}/",
            str(corpus), str(seeds / target), external=True,
        )  # fmt: skip
