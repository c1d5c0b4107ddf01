"""An emulated 64-bit Arm Linux machine for an accel checkout, and aarch64 plugin wheels cross-built on x86-64.

No Arm board is needed. On an x86-64 Debian or Ubuntu machine with the cross compiler and
qemu-user (:func:`check_tools` says what to install), :func:`prepare` lays out, in the
checkout's ``.arm64/`` folder (kept between runs, rebuilt piece by piece when what it was made
from changes):

- ``sysroot/``: Debian 12's python3.11 for arm64 and the few shared libraries it needs, unpacked
  from the packages (nothing is installed system-wide), with its headers for building extensions;
- ``site/``: aarch64 wheels of accel-core's and accel-sdk's dependencies and the test tools
  (``pip install --target ... --platform manylinux..._aarch64``);
- ``checkout/``: this checkout's accel-core and accel-sdk; ``plugins/``: cross-built plugin wheels;
- ``bin/``: ``python``, ``pytest``, ``accel``, ``accel-sdk``: small x86-64 scripts that start the
  arm64 python under ``qemu-aarch64``. ``sys.executable`` is the ``python`` script, so a program
  that starts ``sys.executable`` in a subprocess gets the emulated machine again.

:func:`run` runs a command on that machine in the current folder (qemu-user shares the file system);
:func:`cross_build` builds a plugin's aarch64 wheel with the cross compiler, scikit-build-core and
the toolchain file ``cmake/aarch64-linux-gnu.cmake``; :func:`install` puts it on the machine.
The command line is ``accel-sdk arm64 ...`` (docs/arm64.md).

Every failure raises an :class:`Arm64Error` whose message is one line: what to install, or which
step failed and where its log is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from accel.errors import AccelError

__all__ = [
    "INSTALL_COMMAND",
    "Arm64Error",
    "Machine",
    "StepError",
    "ToolsMissingError",
    "check_tools",
    "command_for",
    "cross_build",
    "find_checkout",
    "install",
    "platform_tags",
    "plugin_test_command",
    "prepare",
    "requirements",
    "run",
]

#: What gives an x86-64 Debian machine everything this module needs (as root).
INSTALL_COMMAND = (
    "dpkg --add-architecture arm64 && apt-get update && "
    "apt-get install g++-aarch64-linux-gnu qemu-user libarm-compute-dev:arm64"
)
TRIPLET = "aarch64-linux-gnu"
#: Debian 12's Python: the emulated interpreter and the one cross-built extensions are for.
PYTHON_VERSION = "3.11"
#: The interpreter, its standard library and headers, and the shared libraries its standard
#: modules load (zlib, expat, ssl, ctypes, bz2, lzma, uuid, sqlite3). libc6 and libstdc++6 for
#: arm64 are the system's (the cross toolchain and Arm Compute Library bring them).
DEBS = (
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "libpython3.11-dev",
    "python3.11-dev",
    "zlib1g",
    "libexpat1",
    "libssl3",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libuuid1",
    "libsqlite3-0",
)
#: What the emulated machine runs besides accel-core's and accel-sdk's own dependencies. (Not ONNX
#: Runtime: its releases from 1.28 on stop with a segmentation fault while importing under qemu-user
#: 7.2, Debian 12's, as they detect the CPU from the host's /proc and /sys; 1.27 runs.)
TEST_REQUIREMENTS = ("pytest>=8",)
#: Debian's package lists (``apt-get update``) and the arm64 C library (libc6:arm64).
APT_LISTS = Path("/var/lib/apt/lists")
MULTIARCH_LIBDIR = Path("/usr/lib") / TRIPLET
CACHE_NAME = ".arm64"
#: The ELF machine number of aarch64 (EM_AARCH64).
ELF_AARCH64 = 183
TOOLCHAIN_FILE = Path(__file__).resolve().parent / "cmake" / f"{TRIPLET}.cmake"
#: Folders of a plugin that do not go into its wheel, left out of the wheel's cache key.
_NOT_BUILT = frozenset({"tests", "benchmarks", "fuzz", "build", "dist", "wheelhouse", "__pycache__"})


class Arm64Error(AccelError):
    """The emulated aarch64 machine or an aarch64 build could not be set up."""


class ToolsMissingError(Arm64Error):
    """The cross compiler, qemu-aarch64 or Debian's arm64 packages are missing on this machine."""


class StepError(Arm64Error):
    """A step (download, unpack, build, install) failed; the message names the step and its log."""


def check_tools() -> None:
    """Raise :class:`ToolsMissingError` unless this machine can cross-build and emulate aarch64.

    Needs ``aarch64-linux-gnu-g++``, ``qemu-aarch64``, dpkg's arm64 architecture with apt's arm64
    package lists (``apt-get download`` fetches the arm64 python), and the arm64 C library.
    """
    missing = []
    if shutil.which(f"{TRIPLET}-g++") is None:
        missing.append(f"{TRIPLET}-g++")
    if shutil.which("qemu-aarch64") is None:
        missing.append("qemu-aarch64")
    if not _dpkg_has_arm64():
        missing.append("the arm64 architecture in dpkg")
    elif not any(APT_LISTS.glob("*_binary-arm64_Packages*")):
        missing.append("apt's arm64 package lists")
    if not (MULTIARCH_LIBDIR / "libc.so.6").exists():
        missing.append("the arm64 C library")
    if missing:
        raise ToolsMissingError(f"{', '.join(missing)} not found; as root: {INSTALL_COMMAND}")


def _dpkg_has_arm64() -> bool:
    dpkg = shutil.which("dpkg")
    if dpkg is None:
        return False
    try:
        out = subprocess.run([dpkg, "--print-foreign-architectures"], capture_output=True, text=True, check=False)
    except OSError:
        return False
    return "arm64" in out.stdout.split()


def find_checkout(start: Path | None = None) -> Path:
    """The accel checkout holding ``start`` (default: the current folder): the folder with core/ and sdk/."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "core" / "pyproject.toml").is_file() and (folder / "sdk" / "pyproject.toml").is_file():
            return folder
    raise Arm64Error(
        f"{here} is not inside an accel checkout (a folder with core/ and sdk/); run there or pass --checkout"
    )


@dataclass(frozen=True)
class Machine:
    """The emulated aarch64 machine of one checkout: folders in ``<checkout>/.arm64``."""

    checkout: Path
    #: What :func:`prepare` rebuilt this time ("python", "site", "checkout"); empty when all was cached.
    rebuilt: tuple[str, ...] = ()

    @property
    def cache(self) -> Path:
        return self.checkout / CACHE_NAME

    @property
    def sysroot(self) -> Path:
        return self.cache / "sysroot"

    @property
    def site(self) -> Path:
        return self.cache / "site"

    @property
    def dists(self) -> Path:
        """This checkout's accel-core and accel-sdk."""
        return self.cache / "checkout"

    @property
    def plugins(self) -> Path:
        return self.cache / "plugins"

    @property
    def bin(self) -> Path:
        return self.cache / "bin"

    @property
    def logs(self) -> Path:
        return self.cache / "logs"

    @property
    def python(self) -> Path:
        """The x86-64 script that runs the arm64 python under qemu (the machine's ``sys.executable``)."""
        return self.bin / "python"

    @property
    def python_root(self) -> Path:
        """The arm64 python's prefix: bin/, lib/python3.11, include/python3.11."""
        return self.sysroot / "usr"

    @property
    def python_path(self) -> list[Path]:
        """The machine's site-packages folders, first wins: plugins, this checkout's distributions, the rest."""
        return [self.plugins, self.dists, self.site]

    @property
    def ext_suffix(self) -> str:
        """The arm64 python's extension module suffix (``.cpython-311-aarch64-linux-gnu.so``)."""
        return str(
            _read_info(self.sysroot).get("ext_suffix", f".cpython-{PYTHON_VERSION.replace('.', '')}-{TRIPLET}.so")
        )

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) for a command on the machine: its bin/ first on
        PATH, no Python settings of the host."""
        env = dict(os.environ if base is None else base)
        for name in ("PYTHONHOME", "PYTHONPATH", "PYTHONEXECUTABLE", "VIRTUAL_ENV"):
            env.pop(name, None)
        env["PATH"] = os.pathsep.join([str(self.bin), *filter(None, [env.get("PATH")])])
        return env


# -- preparing the machine -------------------------------------------------------------------


def prepare(checkout: Path | None = None, *, python_only: bool = False) -> Machine:
    """The emulated machine of ``checkout`` (default: the one holding the current folder), made or
    brought up to date in its ``.arm64`` folder.

    Each part is rebuilt only when what it is made from changed: the python when the package list
    does, the site when the requirements of core/sdk/pyproject.toml do, this checkout's
    accel-core/accel-sdk when their files do. ``python_only``: the arm64 python and its headers
    only (what cross-building needs).
    """
    check_tools()
    m = Machine(find_checkout(checkout) if checkout is None else Path(checkout).resolve())
    rebuilt = []
    with _locked(m):
        if _ensure_python(m):
            rebuilt.append("python")
        if not python_only:
            if _ensure_site(m):
                rebuilt.append("site")
            if _ensure_dists(m):
                rebuilt.append("checkout")
            _write_scripts(m)
    return Machine(m.checkout, tuple(rebuilt))


@contextlib.contextmanager
def _locked(m: Machine) -> Iterator[None]:
    """One process at a time changes a checkout's .arm64 folder."""
    import fcntl

    m.cache.mkdir(parents=True, exist_ok=True)
    with (m.cache / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _files_hash(paths: Sequence[Path], skip: frozenset[str] = frozenset({"__pycache__"})) -> str:
    """A hash of the names and contents of the files under ``paths`` (folders whose name is in
    ``skip`` or starts with a dot left out)."""
    h = hashlib.sha256()
    for top in paths:
        files = [top] if top.is_file() else sorted(_walk(top, skip))
        for f in files:
            h.update(str(f.relative_to(top.parent)).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def _walk(folder: Path, skip: frozenset[str]) -> Iterator[Path]:
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if entry.name in skip or entry.name.startswith(".") or entry.name.endswith(".egg-info"):
            continue
        if entry.is_dir():
            yield from _walk(entry, skip)
        elif entry.is_file():
            yield entry


def _stamp(folder: Path) -> str | None:
    try:
        return (folder / ".key").read_text().strip()
    except OSError:
        return None


def _replace(tmp: Path, folder: Path, key: str) -> None:
    """Move the finished ``tmp`` into place as ``folder``, stamped with ``key``."""
    (tmp / ".key").write_text(key + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)


def _fresh(folder: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def _read_info(sysroot: Path) -> dict[str, object]:
    try:
        return dict(json.loads((sysroot / "info.json").read_text()))
    except (OSError, ValueError):
        return {}


def _ensure_python(m: Machine) -> bool:
    """The arm64 python3.11 in sysroot/: downloaded and unpacked unless the same package list already was."""
    key = _key("python", DEBS, 1)
    python = m.sysroot / "usr" / "bin" / f"python{PYTHON_VERSION}"
    if _stamp(m.sysroot) == key and python.exists():
        return False
    log = _fresh_log(m, "prepare-python")
    debs = _fresh(m.cache / "debs")
    _step(
        ["apt-get", "download", *(f"{d}:arm64" for d in DEBS)],
        "prepare", "apt-get download of the arm64 python3.11 packages", log, cwd=debs,
    )  # fmt: skip
    tmp = _fresh(m.cache / "sysroot.tmp")
    for deb in sorted(debs.glob("*.deb")):
        _step(["dpkg-deb", "-x", str(deb), str(tmp)], "prepare", f"unpacking {deb.name}", log)
    usr = tmp / "usr"
    # Debian's include/python3.11/pyconfig.h picks <TRIPLET/python3.11/pyconfig.h> by the compiler's
    # architecture, a folder the cross compiler does not search: the sysroot's headers get the
    # arm64 one itself, so include/python3.11 is a complete include folder.
    arch_config = usr / "include" / TRIPLET / f"python{PYTHON_VERSION}" / "pyconfig.h"
    shutil.copyfile(arch_config, usr / "include" / f"python{PYTHON_VERSION}" / "pyconfig.h")
    config = usr / "bin" / f"{TRIPLET}-python{PYTHON_VERSION}-config"
    suffix = _step(
        ["sh", str(config), "--extension-suffix"],
        "prepare",
        "reading the arm64 python's extension suffix",
        log,
        capture=True,
    ).strip()
    probe = _step(
        [*_qemu_python(tmp), "-c", "import platform, sys; print(platform.python_version(), platform.libc_ver()[1])"],
        "prepare", "starting the arm64 python3.11 under qemu-aarch64", log, env=m.env(), capture=True,
    ).split()  # fmt: skip
    if len(probe) != 2:
        raise StepError(f"prepare: the arm64 python3.11 printed {' '.join(probe)!r}, not its version; log: {log}")
    (tmp / "info.json").write_text(json.dumps({"python": probe[0], "glibc": probe[1], "ext_suffix": suffix}))
    _replace(tmp, m.sysroot, key)
    shutil.rmtree(debs, ignore_errors=True)
    return True


def _qemu_python(sysroot: Path, argv0: str | None = None) -> list[str]:
    """The command that starts the arm64 python of ``sysroot`` (PYTHONHOME comes from the caller's environment
    when it is set; without it the interpreter finds its prefix from its own path)."""
    libs = f"{sysroot}/lib/{TRIPLET}:{sysroot}/usr/lib/{TRIPLET}"
    argv0_opt = ["-0", argv0] if argv0 else []
    return [
        "qemu-aarch64",
        *argv0_opt,
        "-E",
        f"LD_LIBRARY_PATH={libs}",
        str(sysroot / "usr" / "bin" / f"python{PYTHON_VERSION}"),
    ]


def requirements(checkout: Path) -> list[str]:
    """What the machine's site holds: accel-core's and accel-sdk's dependencies (from their pyproject.toml)
    and the test tools."""
    import tomllib

    wanted: list[str] = []
    for dist in ("core", "sdk"):
        project = tomllib.loads((checkout / dist / "pyproject.toml").read_text())["project"]
        reqs = project.get("dependencies", [])
        wanted += [r for r in reqs if not r.startswith(("accel-core", "accel-sdk")) and r not in wanted]
    return wanted + [r for r in TEST_REQUIREMENTS if r not in wanted]


def platform_tags(glibc: str) -> list[str]:
    """The wheel platforms the machine runs: manylinux2014 and every manylinux_2_X up to its glibc, and
    plain linux (this checkout's cross-built wheels). pip matches these names exactly."""
    major, minor = (int(x) for x in glibc.split(".")[:2])
    tags = ["manylinux2014_aarch64", *(f"manylinux_{major}_{m}_aarch64" for m in range(17, minor + 1))]
    return [*tags, "linux_aarch64"]


def _pip_target(m: Machine, target: Path) -> list[str]:
    """``pip install`` options that install aarch64 wheels for the machine's python into ``target``."""
    glibc = str(_read_info(m.sysroot).get("glibc", "2.17"))
    platforms = [opt for tag in platform_tags(glibc) for opt in ("--platform", tag)]
    return [
        sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--target", str(target),
        "--only-binary", ":all:", "--implementation", "cp", "--python-version", PYTHON_VERSION, *platforms,
    ]  # fmt: skip


def _ensure_site(m: Machine) -> bool:
    """site/: aarch64 wheels of the requirements, unless the same list is already installed."""
    reqs = requirements(m.checkout)
    key = _key("site", reqs, _read_info(m.sysroot).get("glibc"), PYTHON_VERSION)
    if _stamp(m.site) == key:
        return False
    log = _fresh_log(m, "prepare-site")
    tmp = _fresh(m.cache / "site.tmp")
    _step(
        [*_pip_target(m, tmp), *reqs],
        "prepare", f"pip install of the aarch64 wheels ({', '.join(reqs)})", log,
    )  # fmt: skip
    _replace(tmp, m.site, key)
    return True


def _ensure_dists(m: Machine) -> bool:
    """checkout/: this checkout's accel-core and accel-sdk, rebuilt when their files changed."""
    sources = [m.checkout / d for d in ("core", "sdk")]
    key = _key("checkout", _files_hash([s / "pyproject.toml" for s in sources] + [s / "src" for s in sources]))
    if _stamp(m.dists) == key:
        return False
    log = _fresh_log(m, "prepare-checkout")
    wheels = _fresh(m.cache / "checkout-wheels")
    isolation = ["--no-build-isolation"] if _importable("hatchling") else []
    _step(
        [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", *isolation,
         "-w", str(wheels), *map(str, sources)],
        "prepare", "building the wheels of this checkout's accel-core and accel-sdk", log,
    )  # fmt: skip
    tmp = _fresh(m.cache / "checkout.tmp")
    _step(
        [*_pip_target(m, tmp), "--no-deps", *map(str, sorted(wheels.glob("*.whl")))],
        "prepare", "installing this checkout's accel-core and accel-sdk", log,
    )  # fmt: skip
    shutil.rmtree(tmp / "bin", ignore_errors=True)  # console scripts for the host's python: bin/ has the machine's
    _replace(tmp, m.dists, key)
    shutil.rmtree(wheels, ignore_errors=True)
    return True


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


#: bin/ of the machine: the python script and the commands that run a module with it.
_MODULE_COMMANDS = {"pytest": "pytest", "accel": "accel", "accel-sdk": "accel_sdk.cli"}


def _write_scripts(m: Machine) -> None:
    """bin/python (and python3, python3.11) start the arm64 python under qemu with the machine's
    site-packages; ``-0 "$0"`` makes the script itself the interpreter's sys.executable, which is how
    subprocesses re-enter the emulated machine (there is no binfmt_misc to do it)."""
    m.bin.mkdir(parents=True, exist_ok=True)
    q = shlex.quote
    site = os.pathsep.join(str(p) for p in m.python_path)
    qemu = _qemu_python(m.sysroot, argv0="$0")
    qemu_line = " ".join('"$0"' if part == "$0" else q(part) for part in qemu)
    python = (
        "#!/bin/sh\n"
        "# python3.11 of the emulated aarch64 machine (accel-sdk arm64): Debian's arm64 build under qemu-aarch64\n"
        f"PYTHONHOME={q(str(m.python_root))}\n"
        f"site={q(site)}\n"
        'case ":${PYTHONPATH-}:" in *":$site:"*) ;; *) PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$site" ;; esac\n'
        "export PYTHONHOME PYTHONPATH\n"
        f'exec {qemu_line} "$@"\n'
    )
    for name in ("python", "python3", f"python{PYTHON_VERSION}"):
        _write_executable(m.bin / name, python)
    for name, module in _MODULE_COMMANDS.items():
        _write_executable(m.bin / name, f'#!/bin/sh\nexec {q(str(m.python))} -m {module} "$@"\n')


def _write_executable(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
        path.chmod(0o755)


def _fresh_log(m: Machine, name: str) -> Path:
    m.logs.mkdir(parents=True, exist_ok=True)
    log = m.logs / f"{name}.log"
    log.write_text("")
    return log


def _step(cmd: Sequence[str], step: str, what: str, log: Path, *, cwd: Path | None = None,
          env: dict[str, str] | None = None, capture: bool = False) -> str:  # fmt: skip
    """Run ``cmd`` with its output appended to ``log`` (``capture``: its standard output returned instead);
    :class:`StepError` naming ``step``, ``what`` failed, the tool's own error line and the log if it fails."""
    with log.open("a") as f:
        f.write(f"$ {shlex.join(cmd)}\n")
        f.flush()
        try:
            proc = subprocess.run(
                cmd, cwd=cwd, env=env, stdout=subprocess.PIPE if capture else f, stderr=f, text=True, check=False
            )
        except OSError as exc:
            raise StepError(f"{step}: {what} failed: {cmd[0]}: {exc.strerror or exc}; log: {log}") from None
        if capture:
            f.write(proc.stdout)
    if proc.returncode != 0:
        raise StepError(f"{step}: {what} failed ({_reason(log, proc.returncode)}); log: {log}")
    return proc.stdout if capture else ""


#: Lines of a tool's output that say what went wrong (apt, pip, CMake, the compiler, the linker).
_ERROR_LINE = re.compile(r"^\s*(E: |ERROR: |CMake Error|.*\berror: |.*fatal error|.*undefined reference)", re.I)


def _reason(log: Path, code: int) -> str:
    """The first line of the last command's output in ``log`` that reads like an error (with the next line
    for CMake, whose message follows its location), else the exit code."""
    text = log.read_text(errors="replace")
    start = text.rfind("\n$ ")
    lines = text[start + 1 if start >= 0 else 0 :].splitlines()[1:]
    for i, line in enumerate(lines):
        if _ERROR_LINE.match(line):
            if line.strip().startswith("CMake Error"):
                line += " " + next((n for n in lines[i + 1 :] if n.strip()), "")
            line = " ".join(line.split())
            return line if len(line) <= 240 else line[:237] + "..."
    return f"exit code {code}"


# -- running commands on it ----------------------------------------------------------------


def command_for(argv: Sequence[str], bin_dir: Path) -> list[str]:
    """``argv`` as the machine runs it: ``python`` and the commands of Python modules (``pytest``, ``accel``,
    ``accel-sdk``) through the machine's python script in ``bin_dir``; anything else as given (with
    ``bin_dir`` first on PATH, so a script that calls ``python`` gets the machine's)."""
    if not argv:
        raise Arm64Error("run: no command given (e.g. accel-sdk arm64 run -- python -c 'import platform')")
    head, *rest = argv
    python = str(bin_dir / "python")
    if head in ("python", "python3", f"python{PYTHON_VERSION}"):
        return [python, *rest]
    if head in _MODULE_COMMANDS:
        return [python, "-m", _MODULE_COMMANDS[head], *rest]
    return list(argv)


def run(argv: Sequence[str], machine: Machine | None = None, *, cwd: Path | None = None) -> int:
    """Run ``argv`` on the emulated machine, in ``cwd`` (default: the current folder); its exit code."""
    m = machine or prepare()
    cmd = command_for(argv, m.bin)
    try:
        return subprocess.run(cmd, cwd=cwd, env=m.env()).returncode
    except OSError as exc:
        raise Arm64Error(f"run: cannot start {cmd[0]}: {exc.strerror or exc}") from None


def plugin_test_command(plugin_dir: Path) -> list[str]:
    """What ``accel-sdk arm64 test`` runs for a plugin: pytest on its tests/ folder, its tests/test_arm64*.py
    files named too (pytest collects each file once)."""
    tests = plugin_dir / "tests"
    return ["pytest", str(tests), *map(str, sorted(tests.glob("test_arm64*.py"))), "-q", "-p", "no:cacheprovider"]


# -- cross-building plugins --------------------------------------------------------------------


def _project_name(plugin: Path) -> str:
    import tomllib

    try:
        return str(tomllib.loads((plugin / "pyproject.toml").read_text())["project"]["name"])
    except (OSError, KeyError, ValueError) as exc:
        raise Arm64Error(f"{plugin}: no pyproject.toml with a [project] name ({exc}); name a plugin's folder") from None


def _check_build_tools() -> None:
    missing = [
        m.replace("_", "-") for m in ("scikit_build_core", "pybind11", "accel", "accel_sdk") if not _importable(m)
    ]
    missing += [t for t in ("cmake", "ninja") if not (_importable(t) or shutil.which(t))]
    if missing:
        raise Arm64Error(
            f"build: {', '.join(missing)} not found for {sys.executable}; cross-building runs without build "
            "isolation there: pip install scikit-build-core pybind11 cmake ninja, and this checkout's ./core ./sdk"
        )


def _build_inputs_hash(plugin: Path) -> str:
    """What an aarch64 wheel of ``plugin`` is made from: its files (not its tests), the accel-sdk and accel-core
    this python builds with (CMake files, headers), the toolchain file."""
    import accel
    import accel_sdk

    sdk = Path(accel_sdk.__file__).resolve().parent
    return _files_hash([plugin, sdk / "cmake", sdk / "include", Path(accel.get_include())], _NOT_BUILT)


def cross_build(plugin_dir: Path | str, wheel_dir: Path | str | None = None, machine: Machine | None = None) -> Path:
    """Build the aarch64 wheel (cp311, linux_aarch64) of the plugin in ``plugin_dir``; its path (a copy in
    ``wheel_dir`` when given).

    On x86-64, with the cross compiler and the toolchain file, scikit-build-core and CMake from this
    Python (no build isolation: the build needs this checkout's accel-core and accel-sdk, installed
    here). The wheel is kept in the checkout's .arm64/wheels and built again only when the plugin,
    accel-sdk's CMake files or headers change; the CMake build tree stays in .arm64/build (one per
    build environment), so a rebuild from the same environment compiles only what changed. ``machine``: one :func:`prepare` returned (default: the
    checkout holding the plugin, its arm64 python only).
    """
    plugin = Path(plugin_dir).resolve()
    name = _project_name(plugin)
    _check_build_tools()
    m = machine or prepare(find_checkout(plugin), python_only=True)
    key = _key("wheel", _build_inputs_hash(plugin), _stamp(m.sysroot), PYTHON_VERSION)[:16]
    cached = m.cache / "wheels" / name / key
    with _locked(m):
        found = sorted(cached.glob("*.whl"))
        wheel = found[0] if found else _build_wheel(m, plugin, name, cached)
    if wheel_dir is None:
        return wheel
    out = Path(wheel_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(wheel, out / wheel.name)
    return out / wheel.name


def _build_wheel(m: Machine, plugin: Path, name: str, dest: Path) -> Path:
    log = _fresh_log(m, f"build-{name}")
    tmp = _fresh(dest.parent / f"{dest.name}.tmp")
    suffix = m.ext_suffix
    env = dict(os.environ)
    for var in ("PYTHONPATH", "PYTHONHOME"):
        env.pop(var, None)
    # scikit-build-core: the wheel's platform tag, and the suffix it hands CMake as SKBUILD_SOABI
    env.update(_PYTHON_HOST_PLATFORM=f"linux-{TRIPLET.split('-')[0]}", SETUPTOOLS_EXT_SUFFIX=suffix)
    settings = {
        "cmake.toolchain-file": str(TOOLCHAIN_FILE),
        # the build's python is x86-64: CMake gets the target's prefix instead (see the toolchain file)
        "cmake.python-hints": "false",
        "cmake.define.Python_EXECUTABLE": sys.executable,
        "cmake.define.Python_ROOT_DIR": str(m.python_root),
        # one CMake tree per build environment: CMake keeps the folders it found (pybind11's, accel-sdk's)
        "build-dir": str(m.cache / "build" / f"{name}-{_key(sys.prefix)[:8]}"),
    }
    _step(
        [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "--no-build-isolation",
         "-v", "-w", str(tmp), str(plugin), *(f"-C{k}={v}" for k, v in settings.items())],
        f"build {name}", "cross-compiling for aarch64", log, env=env,
    )  # fmt: skip
    wheels = sorted(tmp.glob("*.whl"))
    if len(wheels) != 1 or not wheels[0].name.endswith("-linux_aarch64.whl"):
        raise StepError(f"build {name}: expected one linux_aarch64 wheel, got {[w.name for w in wheels]}; log: {log}")
    for member, machine in _elf_machines(wheels[0]).items():
        if machine != ELF_AARCH64:
            raise StepError(
                f"build {name}: {member} in the wheel is not aarch64 code (ELF machine {machine}); log: {log}"
            )
    if dest.parent.exists():  # wheels of older sources go
        for old in dest.parent.iterdir():
            if old.is_dir() and old != tmp:
                shutil.rmtree(old)
    tmp.rename(dest)
    return dest / wheels[0].name


def _elf_machines(wheel: Path) -> dict[str, int]:
    """The ELF machine number of every shared object in ``wheel``."""
    found = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.filename.endswith(".so") or ".so." in info.filename:
                head = z.open(info).read(20)
                if head[:4] == b"\x7fELF":
                    found[info.filename] = int.from_bytes(head[18:20], "little")
    return found


def install(wheels: Sequence[Path], machine: Machine) -> None:
    """Make cross-built plugin ``wheels`` the machine's plugins (its plugins/ folder; those installed before go,
    so what a run sees is what it asked for).

    Without their dependencies: accel-core, accel-sdk and numpy are on the machine already, and a
    dependency marked for x86-64 only would be read with this host's markers.
    """
    log = _fresh_log(machine, "install")
    with _locked(machine):
        _fresh(machine.plugins)
        _step(
            [*_pip_target(machine, machine.plugins), "--no-deps", "--upgrade", *map(str, wheels)],
            "install", f"installing {', '.join(w.name for w in wheels)} on the emulated machine", log,
        )  # fmt: skip
        shutil.rmtree(machine.plugins / "bin", ignore_errors=True)
