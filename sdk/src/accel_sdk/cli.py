"""The ``accel-sdk`` command: ``accel-sdk new NAME`` renders a backend distribution that builds and passes
the conformance kit as rendered.

Errors a user can cause (a bad name, a folder that is not empty) print one line
(``error: ...``) and exit with code 2.
"""

from __future__ import annotations

import keyword
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

import accel
import accel_sdk
from accel.errors import AccelError, InputError

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
