"""The documentation's Python examples run as written and print what the page says.

Every ```python block of README.md and docs/*.md is executed (blocks of one
page share a namespace, in order) in a temporary folder holding a
``model.onnx`` (the embedded fp32 digits model), the file name the examples use.
A block that prints must be followed by "It prints:" and a ```text block with
its output: a line ``...`` there stands for any number of lines, and ``...``
inside a line for any text. Figures quoted in prose (accuracies, the plugin
table) are checked against what the commands print.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
from cli_helpers import run_accel

from accel.models import default_model_path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```\n(?:\nIt prints:\n\n```text\n(.*?)^```)?", re.S | re.M)


def python_blocks(page: Path) -> list[tuple[str, str | None]]:
    """(code, expected output or None) of every python block of ``page``."""
    return [(code, out or None) for code, out in BLOCK.findall(page.read_text(encoding="utf-8"))]


def output_pattern(expected: str) -> re.Pattern[str]:
    """A regex for ``expected``: a ``...`` line matches any lines, ``...`` in a line any text."""
    parts = []
    for line in expected.rstrip("\n").split("\n"):
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.rstrip().split("...")) + r"\n")
    return re.compile("".join(parts), re.S)


def normalized(text: str) -> str:
    return "".join(line.rstrip() + "\n" for line in text.rstrip("\n").split("\n")) if text.strip() else ""


def test_output_pattern() -> None:
    pattern = output_pattern("a\n...\nx ... z\n")
    assert pattern.fullmatch("a\nb\nc\nx y z\n") and pattern.fullmatch("a\nx  z\n")
    assert not pattern.fullmatch("a\nx y\n") and not pattern.fullmatch("b\nx y z\n")


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_examples_run_and_print_what_the_page_shows(page: Path, tmp_path, monkeypatch, capsys):
    shutil.copy(default_model_path(quantized=False), tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for i, (code, expected) in enumerate(python_blocks(page)):
        exec(compile(code, f"{page.name}[python block {i}]", "exec"), namespace)
        printed = normalized(capsys.readouterr().out)
        where = f"{page.name}, python block {i}"
        if expected is None:
            assert printed == "", f"{where} prints but the page does not show it:\n{printed}"
        else:
            assert output_pattern(expected).fullmatch(printed), (
                f"{where} printed\n{printed}\nthe page shows\n{expected}"
            )


def _table_rows(text: str) -> dict[str, list[str]]:
    """Rows of a rich table by their first cell."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            rows[cells[0]] = cells
    return rows


def _accel(*args: str, env: dict[str, str] | None = None) -> str:
    proc = run_accel(*args, env=env, columns=200)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_plugins_page_shows_what_accel_backends_prints():
    page = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    sample = page[page.index("$ accel backends") :]
    sample = sample[: sample.index("```")]
    documented = _table_rows(sample)
    assert set(documented) >= {"testbackend", "wrongabi"}
    printed = _accel("backends")
    actual = _table_rows(printed)
    for name, row in documented.items():
        assert actual.get(name) == row, f"docs/plugins.md shows {row}, accel backends prints {actual.get(name)}"
    for line in sample.splitlines():
        if line.startswith("wrongabi:"):
            assert line in printed.splitlines()


def test_models_page_figures_are_what_accel_run_prints():
    page = " ".join((ROOT / "docs" / "models.md").read_text(encoding="utf-8").split())
    accuracy = re.search(r"Measured held-out accuracy: ([\d.]+)% for both", page)
    same = re.search(r"predict the same digit on (\d+) of (\d+) images", page)
    assert accuracy and same, "docs/models.md no longer states the figures this test checks"
    printed = _accel("run")
    rows = [line for line in printed.splitlines() if "%" in line]
    assert len(rows) == 2 and all(f"{accuracy.group(1)}%" in row for row in rows), printed
    assert f"predictions identical on {same.group(1)}/{same.group(2)} images" in printed


def test_every_doc_page_is_linked_from_the_index():
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "index.md":
            assert f"({page.name})" in index, f"docs/index.md does not link {page.name}"


def test_every_hook_is_documented_with_its_exact_signature():
    import inspect as pyinspect

    from accel import hookspecs
    from accel.plugins import hook_names

    page = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    names = hook_names()
    assert names, "no hooks found"
    for name in names:
        fn = getattr(hookspecs, name)
        sig = f"{name}{pyinspect.signature(fn)}".replace("'", "")  # annotations are strings
        assert f"### `{name}`" in page, f"docs/plugins.md has no section for {name}"
        assert sig in page, f"docs/plugins.md does not give the exact signature {sig}"
        assert sig in (fn.__doc__ or ""), f"the docstring of {name} does not give its exact signature"


def _modules(src: Path, package: str) -> list[tuple[str, Path]]:
    """(dotted name, file) of every module of ``package`` whose sources are under ``src``."""
    found = []
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join(parts), path))
    return found


def _named_in(section: str, module: str, path: Path) -> bool:
    """Whether the architecture page's module tables name ``module``: by its dotted name, as a
    ``.name`` in a row of its siblings, or by a public function or class it defines."""
    last = module.rsplit(".", 1)[-1]
    if any(f"`{form}`" in section for form in (module, f".{last}", last)):
        return True
    if path.name == "__init__.py" and f"`{module}." in section:
        return True  # a package: its modules have rows
    defined = [
        n.name
        for n in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")
    ]
    return any(f"`{name}`" in section for name in defined)


def test_every_module_is_in_the_architecture_tables():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    modules = _modules(ROOT / "core" / "src", "accel") + _modules(ROOT / "sdk" / "src", "accel_sdk")
    assert len(modules) > 40
    missing = [name for name, path in modules if not _named_in(section, name, path)]
    assert missing == [], f"docs/architecture.md's module tables do not name: {', '.join(missing)}"


def test_sdk_page_lists_every_check_of_the_conformance_kit():
    from accel_sdk.testing import BackendConformance

    page = (ROOT / "docs" / "sdk.md").read_text(encoding="utf-8")
    table = set(re.findall(r"^\| `(test_\w+)` \|", page, re.M))
    checks = {name for name in dir(BackendConformance) if name.startswith("test_")}
    assert sorted(checks - table) == [], "docs/sdk.md's conformance-kit table misses these checks"
    assert sorted(table - checks) == [], "docs/sdk.md's conformance-kit table lists checks the kit does not have"
