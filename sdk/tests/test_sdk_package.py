"""What the accel-sdk distribution ships: headers, CMake support, the scikit-build-core entry point."""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path

import accel_sdk

import accel
from accel.backend import ABI_VERSION

HEADERS = ["blob_reader.hpp", "tensor.hpp", "thread_pool.hpp", "quant.hpp", "runtime.hpp"]


def test_headers_are_shipped():
    folder = Path(accel_sdk.get_include()) / "accel_sdk"
    assert Path(accel_sdk.get_include()).is_absolute()
    for name in HEADERS:
        text = (folder / name).read_text(encoding="utf-8")
        guard = "ACCEL_SDK_" + name.upper().replace(".", "_")
        assert f"#ifndef {guard}" in text and f"#define {guard}" in text, f"{name} has no include guard {guard}"


def test_core_ships_the_abi_header_with_the_version_python_reads():
    header = Path(accel.get_include()) / "accel" / "runtime_abi.h"
    text = header.read_text(encoding="utf-8")
    version = re.search(r"#define ACCEL_ABI_VERSION (\d+)", text)
    assert version is not None and int(version.group(1)) == ABI_VERSION
    assert '#define ACCEL_RUNTIME_CAPSULE "accel.runtime_api"' in text


def test_cmake_config_defines_accel_add_runtime():
    config = Path(accel_sdk.get_cmake_dir()) / "accel_sdkConfig.cmake"
    text = config.read_text(encoding="utf-8")
    assert "function(accel_add_runtime target)" in text
    assert "python_add_library(${target} MODULE WITH_SOABI" in text
    # the config finds the sdk headers relative to itself
    assert (config.parent / ".." / "include" / "accel_sdk" / "runtime.hpp").resolve().is_file()


def test_scikit_build_core_finds_the_config_through_the_cmake_root_entry_point():
    (ep,) = [ep for ep in entry_points(group="cmake.root") if ep.name == "accel_sdk"]
    package = Path(ep.load().__file__).parent
    # find_package(accel_sdk CONFIG) searches <accel_sdk_ROOT>/cmake/
    assert (package / "cmake" / "accel_sdkConfig.cmake").resolve() == (
        Path(accel_sdk.get_cmake_dir()) / "accel_sdkConfig.cmake"
    ).resolve()
