"""The documentation's Python examples run as written.

Every ```python block of README.md and docs/*.md is executed (blocks of one
page share a namespace, in order) in a temporary folder holding a
``model.onnx`` (the embedded fp32 digits model), the file name the examples use.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from accel.models import default_model_path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_examples_run(page: Path, tmp_path, monkeypatch, capsys):
    shutil.copy(default_model_path(quantized=False), tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for i, code in enumerate(python_blocks(page)):
        exec(compile(code, f"{page.name}[python block {i}]", "exec"), namespace)
    capsys.readouterr()


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
