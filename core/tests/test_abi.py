"""accel.abi holds the same numbers as accel/runtime_abi.h, parsed from the shipped header."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import accel
from accel import abi, backend
from accel.errors import GraphError
from accel.ir import DTYPES

HEADER = Path(accel.get_include()) / "accel" / "runtime_abi.h"


def _enum(text: str, name: str) -> dict[str, int]:
    """``NAME = value`` members of ``typedef enum name { ... } name;`` in the header."""
    body = re.search(rf"typedef enum {name} \{{(.*?)\}} {name};", text, re.S)
    assert body is not None, f"enum {name} not found in {HEADER}"
    code = re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S)
    members = dict(re.findall(r"(ACCEL_\w+)\s*=\s*(\d+)\s*,?", code))
    assert members, f"enum {name} has no members"
    # every member has an explicit value: a member written without one would be missed here
    assert len(members) == code.count(","), f"enum {name}: every member needs an explicit value"
    return {k: int(v) for k, v in members.items()}


def _define(text: str, name: str) -> str:
    got = re.search(rf"^#define {name} (.+)$", text, re.M)
    assert got is not None, f"#define {name} not found"
    return got.group(1).strip()


def test_dtype_codes_match_the_header():
    header = _enum(HEADER.read_text(encoding="utf-8"), "accel_dtype")
    assert {k.removeprefix("ACCEL_").lower(): v for k, v in header.items()} == dict(abi.DTYPE_CODES)
    assert {abi.DTYPE_NAMES[v] for v in header.values()} == set(DTYPES)


def test_status_codes_match_the_header():
    assert _enum(HEADER.read_text(encoding="utf-8"), "accel_status") == dict(abi.STATUS_CODES)


def test_version_capsule_and_max_rank_match_the_header():
    text = HEADER.read_text(encoding="utf-8")
    assert int(_define(text, "ACCEL_ABI_VERSION")) == abi.ABI_VERSION
    assert _define(text, "ACCEL_RUNTIME_CAPSULE") == f'"{abi.RUNTIME_CAPSULE}"'
    assert int(_define(text, "ACCEL_MAX_RANK")) == abi.MAX_RANK


def test_backend_keeps_exporting_the_version_and_capsule():
    assert backend.ABI_VERSION == abi.ABI_VERSION
    assert abi.RUNTIME_CAPSULE.encode() == backend.RUNTIME_CAPSULE


@pytest.mark.parametrize(("dtype", "code"), [("float32", 0), (np.int8, 3), (np.dtype("uint8"), 4), (bool, 11)])
def test_dtype_code_normalizes_its_argument(dtype, code):
    assert abi.dtype_code(dtype) == code


def test_dtype_code_refuses_a_dtype_without_a_code():
    with pytest.raises(GraphError, match="complex64"):
        abi.dtype_code(np.complex64)


def test_the_parser_sees_a_changed_code():
    text = HEADER.read_text(encoding="utf-8").replace("ACCEL_INT8 = 3", "ACCEL_INT8 = 13")
    codes = _enum(text, "accel_dtype")
    assert codes["ACCEL_INT8"] == 13 and codes != {f"ACCEL_{k.upper()}": v for k, v in abi.DTYPE_CODES.items()}
