"""``accel-sdk new``: names, folders, the rendered files (the build and the rendered tests: tests/test_sdk_template.py)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from accel_sdk import cli

SCRIPT = Path(sys.executable).parent / "accel-sdk"


def sdk_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, env={**os.environ, "COLUMNS": "200"}, timeout=120
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for f in fragments:
        assert f in lines[0]


def test_the_console_script_renders_into_accel_name_by_default(tmp_path):
    proc = sdk_cli("new", "mynpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "accel-mynpu"
    got = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert got == [
        ".gitignore",
        "CMakeLists.txt",
        "README.md",
        "benchmarks/bench_mynpu.py",
        "pyproject.toml",
        "src/accel_mynpu/__init__.py",
        "src/accel_mynpu/_runtime.pyi",
        "src/accel_mynpu/options.py",
        "src/accel_mynpu/serializer.py",
        "src/accel_mynpu/support.py",
        "src/runtime.cpp",
        "tests/graphs.py",
        "tests/test_conformance.py",
        "tests/test_ops.py",
        "tests/test_resnet18.py",
        "tests/test_runtime.py",
    ]
    # a folder pip installs, not a name it would look up on the package index (a stranger's package)
    assert f"pip install --no-build-isolation ./{root.name}\n" in proc.stdout


def test_help_teaches_the_whole_path():
    top = sdk_cli("--help")
    assert top.returncode == 0
    for step in ("accel-sdk new mynpu", "pip install --no-build-isolation ./accel-mynpu", "C++17"):
        assert step in top.stdout
    new = sdk_cli("new", "--help")
    assert new.returncode == 0 and "--output" in new.stdout and "accel.backends" in new.stdout


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("My-Npu", "lowercase letters, digits and underscores"),
        ("9npu", "starting with a letter"),
        ("x" * 40, "1-31"),
        ("class", "is reserved"),
        ("host", "is reserved"),
    ],
)
def test_bad_names_are_refused_with_one_line(tmp_path, name, fragment):
    assert_one_line_error(sdk_cli("new", name, cwd=tmp_path), repr(name), fragment)
    assert not any(tmp_path.iterdir())


def test_a_non_empty_folder_is_refused_and_left_alone(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    assert_one_line_error(sdk_cli("new", "mynpu", "-o", str(tmp_path / "out")), "is not empty")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
    (tmp_path / "file").write_text("")
    assert_one_line_error(sdk_cli("new", "mynpu", "-o", str(tmp_path / "file")), "is not a folder")


def test_a_folder_under_a_file_is_a_one_line_error(tmp_path):
    (tmp_path / "file").write_text("mine")
    assert_one_line_error(
        sdk_cli("new", "mynpu", "-o", str(tmp_path / "file" / "sub")), "cannot write", "Not a directory"
    )
    assert (tmp_path / "file").read_text() == "mine"


def test_an_empty_folder_is_rendered_into(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    written = cli.render("edge_tpu2", out)
    assert (out / "src" / "accel_edge_tpu2" / "__init__.py") in written


def test_rendered_files_are_complete_and_consistent(tmp_path):
    cli.render("edge_tpu2", tmp_path)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert "{{" not in text and not cli.PLACEHOLDER.search(text), f"{path} keeps a placeholder"
            if path.suffix in (".py", ".pyi"):
                ast.parse(text, str(path))
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((tmp_path / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["name"] == "accel-edge-tpu2"
    assert meta["project"]["entry-points"]["accel.backends"] == {"edge_tpu2": "accel_edge_tpu2"}
    assert meta["tool"]["scikit-build"]["wheel"]["packages"] == ["src/accel_edge_tpu2"]
    assert any(r.startswith("accel-sdk>=") for r in meta["build-system"]["requires"])
    cmake = (tmp_path / "CMakeLists.txt").read_text(encoding="utf-8")
    assert "find_package(accel_sdk CONFIG" in cmake and "DESTINATION accel_edge_tpu2" in cmake
    runtime = (tmp_path / "src" / "runtime.cpp").read_text(encoding="utf-8")
    assert 'ACCEL_SDK_RUNTIME_MODULE(_runtime, "edge_tpu2", EdgeTpu2Runtime)' in runtime
    assert 'blob_spec() { return {"edge_tpu2", kKindVersion, kKindVersion}; }' in runtime
    assert 'KIND = "edge_tpu2"' in (tmp_path / "src" / "accel_edge_tpu2" / "serializer.py").read_text(encoding="utf-8")


def test_an_unknown_placeholder_is_a_template_bug():
    with pytest.raises(KeyError, match="unknown placeholder"):
        cli.render_text("{{ nope }}", {"name": "x"}, "t")
    assert cli.render_text("${CMAKE_X} {{name}}", {"name": "x"}) == "${CMAKE_X} x"


def test_the_template_ships_in_the_package():
    files = cli.template_files()
    assert "src/runtime.cpp" in files and "dot_gitignore" in files
    assert all(not name.endswith(".tmpl") for name in files)
