"""The ``accel-sdk`` command: ``accel-sdk new NAME`` renders a backend distribution that builds and passes
the conformance kit as rendered.

Errors a user can cause (a bad name, a folder that is not empty) print one line
(``error: ...``) and exit with code 2.
"""

from __future__ import annotations

import keyword
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

import accel
import accel_sdk
from accel.errors import AccelError, InputError
from accel_sdk import arm64

#: A backend name: what targets and ``--backends`` use, the composite prefix and the package suffix.
NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,30}")
#: Names a rendered backend may not take: what the core's targets already mean.
RESERVED = frozenset({"host", "cpu", "reference", "sdk", "core"})
#: ``{{ key }}`` placeholders of the template files (CMake's and the shell's ``${...}`` stay untouched).
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
#: The path segment standing for the Python package folder.
PACKAGE_SEGMENT = "__package__"
#: Stands for the backend's name inside a file name (``bench___name__.py`` -> ``bench_mynpu.py``).
NAME_MARK = "__name__"
#: A file or folder name starting with this is rendered with a leading dot (``dot_gitignore`` -> ``.gitignore``).
DOT_PREFIX = "dot_"
TEMPLATE_SUFFIX = ".tmpl"

app = typer.Typer(
    name="accel-sdk",
    help=(
        "Tools for writing accel backends.\n\n"
        "Examples:\n\n"
        "  accel-sdk new mynpu           # the backend accel-mynpu, in ./accel-mynpu\n\n"
        "  accel-sdk new mynpu -o npu/   # in another folder (missing or empty)\n\n"
        "It builds and passes the conformance kit as rendered (needs a C++17 compiler):\n\n"
        "  pip install scikit-build-core pybind11 cmake ninja onednn-devel-cpu-gomp==2023.2.0 onednn-cpu-gomp==2023.2.0\n\n"
        "  pip install --no-build-isolation ./accel-mynpu\n\n"
        "  pytest accel-mynpu/tests"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def check_name(name: str) -> str:
    """``name`` if it can name a backend, else :class:`~accel.errors.InputError` saying why."""
    if not NAME_RE.fullmatch(name):
        raise InputError(
            f"backend name {name!r}: use 1-31 lowercase letters, digits and underscores, starting with a letter "
            "(it names the backend in targets, its composites and the package accel_<name>)"
        )
    if keyword.iskeyword(name) or name in RESERVED:
        raise InputError(f"backend name {name!r} is reserved; choose another")
    return name


def template_values(name: str) -> dict[str, str]:
    """What the template's ``{{ key }}`` placeholders stand for, for backend ``name``."""
    check_name(name)
    camel = "".join(part.capitalize() for part in name.split("_"))
    return {
        "name": name,
        "package": f"accel_{name}",
        "distribution": f"accel-{name.replace('_', '-')}",
        "class_name": f"{camel}Backend",
        "runtime_class": f"{camel}Runtime",
        "options_class": f"{camel}Options",
        "sdk_version": accel_sdk.__version__,
        "core_version": accel.__version__,
    }


def render_text(text: str, values: dict[str, str], where: str = "template") -> str:
    """``text`` with every ``{{ key }}`` replaced; an unknown key is a bug in the template (KeyError)."""

    def one(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in values:
            raise KeyError(f"{where}: unknown placeholder {{{{ {key} }}}}")
        return values[key]

    return PLACEHOLDER.sub(one, text)


def template_root() -> Path:
    """The template folder shipped in accel-sdk (package data)."""
    return Path(__file__).resolve().parent / "templates" / "backend"


def template_files(root: Path | None = None) -> dict[str, str]:
    """Relative path → text of every template file (``/``-separated paths, still with placeholders)."""
    out: dict[str, str] = {}

    def walk(folder: Path, prefix: str) -> None:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name == "__pycache__":
                continue
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith(TEMPLATE_SUFFIX):
                out[prefix + entry.name[: -len(TEMPLATE_SUFFIX)]] = entry.read_text(encoding="utf-8")

    walk(root or template_root(), "")
    return out


def _segment(part: str, values: dict[str, str]) -> str:
    if part == PACKAGE_SEGMENT:
        return values["package"]
    part = part.replace(NAME_MARK, values["name"])
    return "." + part[len(DOT_PREFIX) :] if part.startswith(DOT_PREFIX) else part


def render(name: str, dest: Path) -> list[Path]:
    """Render the backend template for ``name`` into ``dest`` (missing or empty); returns the files written.

    Raises :class:`~accel.errors.InputError` for a bad name or a ``dest`` that is a file or not empty.
    """
    values = template_values(name)
    try:
        dest.exists()
    except (OSError, ValueError) as exc:
        raise InputError(f"--output {str(dest)!r} cannot be used: {exc}") from None
    if dest.exists():
        if not dest.is_dir():
            raise InputError(f"{dest} exists and is not a folder; choose another --output")
        if any(dest.iterdir()):
            raise InputError(f"{dest} exists and is not empty; choose another --output or remove it")
    rendered: dict[Path, str] = {}
    for rel, text in template_files().items():
        parts = [_segment(p, values) for p in rel.split("/")]
        rendered[dest.joinpath(*parts)] = render_text(text, values, rel)
    for path, text in rendered.items():  # everything rendered first: a template bug writes nothing
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:  # a file where a folder must be, no permission, a full disk
            raise InputError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    return sorted(rendered)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"accel-sdk {accel_sdk.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Tools for writing accel backends."""


@app.command()
def new(
    name: Annotated[
        str,
        typer.Argument(
            metavar="NAME",
            help="The backend's name: lowercase letters, digits and underscores (e.g. mynpu). "
            "It becomes the target name, the composite prefix (mynpu.conv2d), the package accel_mynpu "
            "and the distribution accel-mynpu.",
            show_default=False,
        ),
    ],
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Folder to render into (missing or empty). Default: ./accel-NAME."),
    ] = None,
) -> None:
    """Render a new backend distribution that builds and passes accel-sdk's conformance kit as rendered.

    It holds pyproject.toml (scikit-build-core, entry point in group accel.backends), CMakeLists.txt
    (find_package(accel_sdk) + accel_add_runtime + accel_link_onednn), the Backend class, the support
    table (support.py), the target options, a serializer writing accel-sdk's graph blob, a C++ runtime
    on accel-sdk's graph runtime computing through oneDNN (a conv2d -> bias_add -> relu composite,
    max/avg pools, add, relu, sigmoid, tanh), a README documenting the blob, tests (the conformance
    kit of accel_sdk.testing, an op grid, refusals, threads, a ResNet-18) and a benchmark.
    """
    values = template_values(name)
    dest = output if output is not None else Path(values["distribution"])
    written = render(name, dest)
    typer.echo(f"rendered {values['distribution']} ({len(written)} files) in {dest}")
    typer.echo(
        "next, with a C++17 compiler and the build tools (pip install scikit-build-core pybind11 cmake ninja "
        "onednn-devel-cpu-gomp==2023.2.0 onednn-cpu-gomp==2023.2.0):"
    )
    # a path pip reads as a folder (a bare "accel-mynpu" is a name it would look up on the package index)
    where = str(dest) if dest.is_absolute() or str(dest).startswith(".") else f"./{dest}"
    typer.echo(f"  pip install --no-build-isolation {where}")
    typer.echo(f"  pytest {Path(where) / 'tests'}")


# -- accel-sdk arm64 ------------------------------------------------------------------------

arm64_app = typer.Typer(
    name="arm64",
    help=(
        "An emulated aarch64 machine (Debian's arm64 python3.11 under qemu-user) for this checkout, and plugin "
        "wheels cross-built for it on x86-64. Kept in <checkout>/.arm64 between runs (docs/arm64.md).\n\n"
        "Examples:\n\n"
        "  accel-sdk arm64 check                          # the cross compiler, qemu and arm64 packages?\n\n"
        "  accel-sdk arm64 build plugins/acl              # wheelhouse/accel_acl-...-linux_aarch64.whl\n\n"
        "  accel-sdk arm64 test plugins/acl               # build, install, run its tests on the machine\n\n"
        "  accel-sdk arm64 run -p plugins/acl -- accel run model.accel -i x=x.npy -o out.npz"
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(arm64_app, name="arm64")

CheckoutOption = Annotated[
    Optional[Path],
    typer.Option(
        "--checkout", help="The accel checkout (default: the one holding the current folder).", show_default=False
    ),
]


def _step_line(step: str, seconds: float, detail: str) -> None:
    """One line per step, on stderr (a command's own output stays alone on stdout)."""
    typer.echo(f"arm64 {step}: {seconds:.1f} s ({detail})", err=True)


def _shown(path: Path, checkout: Path) -> str:
    return str(path.relative_to(checkout)) if path.is_relative_to(checkout) else str(path)


def _arm64_prepare(checkout: Optional[Path]) -> arm64.Machine:
    t = time.perf_counter()
    machine = arm64.prepare(checkout)
    made = ", ".join(machine.rebuilt) if machine.rebuilt else "cached"
    _step_line("prepare", time.perf_counter() - t, f"{made}; {_shown(machine.cache, Path.cwd().resolve())}")
    return machine


def _arm64_plugins(machine: arm64.Machine, plugins: list[Path]) -> None:
    """Cross-build ``plugins`` (cached) and install them on ``machine``, a line per step."""
    wheels = []
    for plugin in plugins:
        t = time.perf_counter()
        before = set((machine.cache / "wheels").rglob("*.whl"))
        wheel = arm64.cross_build(plugin, machine=machine)
        how = "cached" if wheel in before else "built"
        _step_line(
            f"build {_shown(plugin.resolve(), machine.checkout)}", time.perf_counter() - t, f"{how}: {wheel.name}"
        )
        wheels.append(wheel)
    if wheels:
        t = time.perf_counter()
        arm64.install(wheels, machine)
        _step_line("install", time.perf_counter() - t, ", ".join(w.name.split("-")[0] for w in wheels))


PluginsArgument = Annotated[
    list[Path], typer.Argument(metavar="PLUGIN...", help="Plugin folders (e.g. plugins/acl).", show_default=False)
]


@arm64_app.command("check")
def arm64_check() -> None:
    """Say whether this machine has the cross compiler, qemu-aarch64 and Debian's arm64 packages (else what to install)."""
    arm64.check_tools()
    typer.echo(f"ok: {arm64.TRIPLET}-g++, qemu-aarch64, dpkg's arm64 architecture and its package lists")


@arm64_app.command("prepare")
def arm64_prepare(checkout: CheckoutOption = None) -> None:
    """Make (or bring up to date) the emulated machine in <checkout>/.arm64."""
    _arm64_prepare(checkout)


@arm64_app.command("build")
def arm64_build(
    plugins: PluginsArgument,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder for the wheels.")] = Path("wheelhouse"),
) -> None:
    """Cross-build aarch64 wheels (cp311, linux_aarch64) of plugins, on this x86-64 machine."""
    for plugin in plugins:
        t = time.perf_counter()
        wheel = arm64.cross_build(plugin, output)
        _step_line(f"build {plugin}", time.perf_counter() - t, _shown(wheel, Path.cwd().resolve()))


@arm64_app.command(
    "run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}
)
def arm64_run(
    command: Annotated[
        Optional[list[str]],
        typer.Argument(
            metavar="COMMAND...",
            help="What to run, in the current folder: python ..., pytest ..., accel ..., accel-sdk ..., or any program "
            "(the machine's python first on its PATH).",
            show_default=False,
        ),
    ] = None,
    plugin: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--plugin", "-p", help="Cross-build this plugin and install it on the machine first (repeatable)."
        ),
    ] = None,
    checkout: CheckoutOption = None,
) -> None:
    """Run a command on the emulated aarch64 machine; its exit code."""
    arm64.command_for(command or [], Path("bin"))  # no command: one line, before anything is prepared
    machine = _arm64_prepare(checkout)
    _arm64_plugins(machine, plugin or [])
    raise typer.Exit(arm64.run(command or [], machine))


@arm64_app.command("test")
def arm64_test(plugins: PluginsArgument, checkout: CheckoutOption = None) -> None:
    """Cross-build plugins, install them on the emulated machine and run each one's tests there."""
    machine = _arm64_prepare(checkout)
    _arm64_plugins(machine, plugins)
    failed = 0
    for plugin in plugins:
        t = time.perf_counter()
        code = arm64.run(arm64.plugin_test_command(plugin.resolve()), machine, cwd=machine.checkout)
        where = _shown(plugin.resolve(), machine.checkout)
        _step_line(f"tests {where}", time.perf_counter() - t, "passed" if code == 0 else f"failed, exit code {code}")
        failed = failed or code
    raise typer.Exit(failed)


def main(argv: list[str] | None = None) -> Any:
    """Console entry point: one-line errors, exit code 2 for user errors."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return app(args=args, prog_name="accel-sdk")
    except AccelError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
