"""Every accel-sdk header ships with an include guard and compiles alone, warning-free."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import accel_sdk
import pytest
from probe_build import compiler, include_dirs


def onednn_include() -> str | None:
    """oneDNN's header folder from the onednn-devel-cpu-gomp wheel, or None without it."""
    try:
        dist = importlib.metadata.distribution("onednn-devel-cpu-gomp")
    except importlib.metadata.PackageNotFoundError:
        return None
    header = next((f for f in dist.files or [] if str(f).endswith("oneapi/dnnl/dnnl.hpp")), None)
    return None if header is None else str(Path(dist.locate_file(header)).resolve().parents[2])


HEADERS = sorted(p.name for p in (Path(accel_sdk.get_include()) / "accel_sdk").glob("*.hpp"))


def test_the_shared_serializer_parts_are_shipped():
    assert {"blob_reader.hpp", "graph_blob.hpp", "geometry.hpp"} <= set(HEADERS)


@pytest.mark.parametrize("name", HEADERS)
def test_header_has_a_guard_and_compiles_alone_without_warnings(name, tmp_path):
    text = (Path(accel_sdk.get_include()) / "accel_sdk" / name).read_text(encoding="utf-8")
    guard = "ACCEL_SDK_" + name.upper().replace(".", "_")
    assert f"#ifndef {guard}" in text and f"#define {guard}" in text
    cxx = compiler()
    if cxx is None:
        pytest.skip("no C++ compiler (set CXX)")
    extra = []
    if "oneapi/dnnl" in text or "accel_sdk/onednn.hpp" in text:
        folder = onednn_include()
        if folder is None:
            pytest.skip("onednn-devel-cpu-gomp is not installed (accel-sdk's [test] extra installs it)")
        extra = [f"-isystem{folder}"]
    src = tmp_path / "one.cpp"
    src.write_text(f"#include <accel_sdk/{name}>\n#include <accel_sdk/{name}>\nint main() {{ return 0; }}\n")
    # hidden visibility, as accel_add_runtime builds (pybind11 requires it)
    cmd = [
        cxx,
        "-std=c++17",
        "-fsyntax-only",
        "-fvisibility=hidden",
        "-Wall",
        "-Wextra",
        "-Wpedantic",
        "-Wshadow",
        "-Werror",
    ]
    cmd += [f"-isystem{d}" for d in include_dirs()[2:]] + extra + [f"-I{d}" for d in include_dirs()[:2]] + [str(src)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
