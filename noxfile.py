"""Sessions: ``nox -s tests`` (the CI gate), ``arm64``, ``lint``, ``demo``, ``bench``, ``template``, ``wheels``, ``fuzz``.

Each distribution is built and installed as a user would get it (a wheel,
never editable), then its tests run against the installed package.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = False

DISTRIBUTIONS = ["./core", "./sdk"]
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
ROOT = Path(__file__).resolve().parent
#: Where ``nox -s wheels`` writes the wheels a package index would serve.
WHEELHOUSE = ROOT / "wheelhouse"


def plugins() -> list[Path]:
    """The backend distributions of the checkout: every plugins/<name>/ with a pyproject.toml."""
    return sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))


def build_requires(folders: list[Path]) -> list[str]:
    """The [build-system] requirements of ``folders`` other than accel's own distributions.

    Plugins are installed without build isolation (their build needs the accel-core and
    accel-sdk of this checkout, which the package index lacks), so what else they build
    with (oneDNN's devel wheel, say) is installed into the session first.
    """
    import tomllib

    wanted: list[str] = []
    for folder in folders:
        requires = tomllib.loads((folder / "pyproject.toml").read_text())["build-system"]["requires"]
        wanted += [r for r in requires if not r.startswith(("accel-core", "accel-sdk")) and r not in wanted]
    return wanted


def install_all(session: nox.Session) -> None:
    """accel-core and accel-sdk (with test extras), then every plugin and test backend built against them."""
    session.install("./core[test]", "./sdk[test]", *BUILD_TOOLS, *build_requires(plugins()))
    session.install("--no-build-isolation", *TEST_BACKENDS)
    for plugin in plugins():
        session.install("--no-build-isolation", f"{plugin}[test]")


def test_paths() -> list[str]:
    """Test folders of the whole suite: core, sdk, cross-package, then each plugin's own."""
    return ["core/tests", "sdk/tests", "tests", *(str(p.relative_to(ROOT) / "tests") for p in plugins())]


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Build and install every distribution and the test backends, then run the whole test suite."""
    install_all(session)
    session.run("accel", "--version")
    session.run("accel", "backends")
    session.run("pytest", *(session.posargs or test_paths()))


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (lint and format check) and mypy on the installed core."""
    session.install("ruff", "mypy", "./core")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", "core/src/accel", "sdk/src/accel_sdk")


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The README's main job: accel-core with the ethosn and acl plugins (built as wheels, installed as a user
    would), the embedded digits model compiled for ethosn,acl, and its artifact scored on the held-out digits."""
    WHEELHOUSE.mkdir(exist_ok=True)
    links = " ".join([str(WHEELHOUSE), *filter(None, [os.environ.get("PIP_FIND_LINKS")])])
    env = {"PIP_FIND_LINKS": links}
    # core and sdk first: the plugins' isolated builds take accel-sdk from the wheelhouse
    for folders in (["./core", "./sdk"], ["./plugins/ethosn", "./plugins/acl"]):
        session.run("python", "-m", "pip", "wheel", "--no-deps", "-w", str(WHEELHOUSE), *folders, env=env)
    session.run(
        "python", "-m", "pip", "install", "--find-links", str(WHEELHOUSE),
        "accel-core", "accel-ethosn", "accel-acl", "onnxruntime",
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="accel-demo-") as tmp:
        artifact = str(Path(tmp) / "digits.accel")
        session.run("accel", "compile", "--backends", "ethosn,acl", "-o", artifact)
        session.run("accel", "run", artifact)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks side by side with ONNX Runtime (ratios from one run).

    The core's, each plugin's own, then every installed backend in one table
    (core/benchmarks/bench_backends.py), then `accel compile --tune` against the plain and
    single-backend placements (core/benchmarks/bench_tune.py). ``nox -s bench -- --update-docs`` also writes that
    table, for the kind of machine it ran on, into docs/benchmarks.md; other arguments
    (``--repeat N``) go to every script.
    """
    args = [a for a in session.posargs if a != "--update-docs"]
    update = ["--update-docs", str(ROOT / "docs" / "benchmarks.md")] if "--update-docs" in session.posargs else []
    install_all(session)
    session.run("python", "core/benchmarks/bench_core.py", *args)
    session.run("python", "core/benchmarks/bench_partition.py")
    session.run("python", "core/benchmarks/bench_scale.py")
    for script in sorted(ROOT.glob("plugins/*/benchmarks/bench_*.py")):
        session.run("python", str(script.relative_to(ROOT)), *args)
    session.run("python", "core/benchmarks/bench_backends.py", *args, *update)
    session.run("python", "core/benchmarks/bench_tune.py", *args)


@nox.session(python=PYTHON)
def template(session: nox.Session) -> None:
    """Render a backend with `accel-sdk new` in a temporary folder, build and install it next to the core, run its tests."""
    session.install("./core", "./sdk", "pytest", *BUILD_TOOLS)
    with tempfile.TemporaryDirectory(prefix="accel-template-") as tmp:
        backend = Path(tmp) / "accel-mynpu"
        session.run("accel-sdk", "new", "mynpu", "--output", str(backend))
        session.install(*build_requires([backend]))  # oneDNN's wheels, which the rendered runtime links
        session.install("--no-build-isolation", str(backend))
        session.run("accel", "backends")
        session.run("pytest", "-p", "no:cacheprovider", str(backend / "tests"), *session.posargs)


def _plugin_folders() -> list[Path]:
    """Every plugin distribution of the checkout: plugins/*/ and the test backend."""
    return [*plugins(), ROOT / "tests" / "backends" / "testbackend"]


@nox.session(python=PYTHON)
def wheels(session: nox.Session) -> None:
    """Build ./wheelhouse: accel-core, accel-sdk and plugin wheels, then install them from it as a user would.

    `nox -s wheels` builds every plugin (plugins/*, tests/backends/testbackend);
    `nox -s wheels -- plugins/acl` only the ones named. Afterwards, in any environment:

        pip install --find-links wheelhouse accel-core accel-testbackend

    Each plugin is built in pip's isolated build environment, whose accel-core and
    accel-sdk come from the wheelhouse (--find-links reaches build isolation too):
    the same build a user's `pip install` would run. Needs a C++17 compiler. One line per
    distribution says what is being built, then the wheel and the seconds it took (a plugin
    takes most of a minute on two cores).
    """
    import time

    folders = [Path(p).resolve() for p in session.posargs] or _plugin_folders()
    WHEELHOUSE.mkdir(exist_ok=True)
    for old in WHEELHOUSE.glob("accel_*.whl"):
        old.unlink()
    # other find-links of this machine's pip configuration stay in effect
    links = " ".join([str(WHEELHOUSE), *filter(None, [os.environ.get("PIP_FIND_LINKS")])])
    env = {"PIP_FIND_LINKS": links}
    # one distribution at a time, each named with its time: a plugin's C++ build takes minutes,
    # and pip shows nothing meanwhile (its output appears only when a build fails)
    sources = [ROOT / "core", ROOT / "sdk", *folders]
    t_all = time.perf_counter()
    for i, source in enumerate(sources, 1):
        where = source.relative_to(ROOT) if source.is_relative_to(ROOT) else source
        session.log(f"[{i}/{len(sources)}] building {where} ...")
        before = set(WHEELHOUSE.glob("accel_*.whl"))
        t = time.perf_counter()
        session.run(
            "python", "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(WHEELHOUSE), str(source), env=env, silent=True
        )
        wheel = ", ".join(w.name for w in sorted(set(WHEELHOUSE.glob("accel_*.whl")) - before)) or "(no new wheel)"
        session.log(f"[{i}/{len(sources)}] {wheel} in {time.perf_counter() - t:.0f} s")
    built = sorted({w.name.split("-")[0].replace("_", "-") for w in WHEELHOUSE.glob("accel_*.whl")})
    session.log(f"{WHEELHOUSE}: {', '.join(built)} ({time.perf_counter() - t_all:.0f} s)")
    # the user's command, in this session's empty environment
    session.run("python", "-m", "pip", "install", "--find-links", str(WHEELHOUSE), *built)
    session.run("accel", "backends")


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


#: Plugins ``nox -s arm64`` cross-builds for aarch64 and tests on the emulated machine; ACCEL_ARM64_PLUGINS
#: (folders, separated by spaces) names others, e.g. "tests/backends/testbackend".
ARM64_PLUGINS = ["plugins/acl"]
#: Makes, on x86-64, what acl's tests on the Arm machine compare with: artifacts compiled here and
#: their predictions (the folder they read from ACCEL_ARM64_HEADLINE).
ARM64_HEADLINE = ROOT / "plugins" / "acl" / "tests" / "arm64_headline.py"


@nox.session(python=PYTHON)
def arm64(session: nox.Session) -> None:
    """plugins/acl cross-built for aarch64 and tested on an emulated aarch64 machine (qemu-user, docs/arm64.md).

    `nox -s arm64` cross-builds the plugin on this x86-64 machine (its kernels from Arm Compute
    Library), installs the wheel on the emulated machine (Debian's arm64 python3.11 under
    qemu-aarch64, this checkout's accel-core and accel-sdk) and runs the plugin's tests there.
    `nox -s arm64 -- COMMAND ...` runs COMMAND there instead, in this folder:

        nox -s arm64 -- accel run model.accel -i x=x.npy -o out.npz

    ACCEL_ARM64_PLUGINS="tests/backends/testbackend" tests other plugins. The machine, the wheels
    and the CMake build trees are kept in .arm64/ and rebuilt only when what they come from
    changes. One line per step with its time. Needs, as root (else the session fails saying so):

        dpkg --add-architecture arm64 && apt-get update && apt-get install g++-aarch64-linux-gnu qemu-user libarm-compute-dev:arm64
    """
    import time

    t = time.perf_counter()
    session.install("./core", "./sdk", *BUILD_TOOLS)
    session.log(f"arm64 session: {time.perf_counter() - t:.1f} s (accel-core, accel-sdk and the build tools, x86-64)")
    session.run("accel-sdk", "arm64", "check")  # the one line saying what to install, before anything is built
    plugins = os.environ.get("ACCEL_ARM64_PLUGINS", "").split() or ARM64_PLUGINS
    if session.posargs:
        session.run("accel-sdk", "arm64", "run", *(f"--plugin={p}" for p in plugins), "--", *session.posargs)
        return
    env = {}
    if ROOT / "plugins" / "acl" in [(ROOT / p).resolve() for p in plugins] and ARM64_HEADLINE.exists():
        env["ACCEL_ARM64_HEADLINE"] = str(_arm64_headline(session))
    session.run("accel-sdk", "arm64", "test", *plugins, env=env)


def _arm64_headline(session: nox.Session) -> Path:
    """ARM64_HEADLINE's folder, made with the x86-64 acl and ethosn plugins; kept in .arm64/headline and made
    again only when the core, the sdk or those plugins change."""
    import hashlib
    import shutil
    import time

    sources = [ROOT / "core", ROOT / "sdk", ROOT / "plugins" / "acl", ROOT / "plugins" / "ethosn"]
    digest = hashlib.sha256()
    for top in sources:
        for path in sorted(top.rglob("*")):
            rel = path.relative_to(ROOT)
            if path.is_file() and not any(p.startswith(".") or p in ("__pycache__", "build") for p in rel.parts):
                digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    folder = ROOT / ".arm64" / "headline" / digest.hexdigest()[:16]
    if folder.is_dir():
        session.log(f"arm64 x86 headline: cached ({folder.relative_to(ROOT)})")
        return folder
    t = time.perf_counter()
    x86 = [ROOT / "plugins" / "ethosn", ROOT / "plugins" / "acl"]
    session.install(*build_requires(x86))
    session.install("--no-build-isolation", str(x86[0]), f"{x86[1]}[test]")  # the script uses acl's test helpers
    shutil.rmtree(folder.parent, ignore_errors=True)  # older sources' folders go
    made = folder.with_name(f"{folder.name}.tmp")
    session.run("python", str(ARM64_HEADLINE), str(made))
    made.rename(folder)
    session.log(
        f"arm64 x86 headline: {time.perf_counter() - t:.1f} s (acl and ethosn built for x86-64; {folder.relative_to(ROOT)})"
    )
    return folder
