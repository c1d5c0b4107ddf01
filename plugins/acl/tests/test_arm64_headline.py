"""On an Arm machine (``nox -s arm64`` runs this under qemu-user): the digits artifacts compiled on
x86-64 (arm64_headline.py) run here on Arm Compute Library with the same predictions and accuracy,
and an artifact with ethosn partitions is refused in one line (no ethosn plugin runs on Arm)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from accel_acl import AclBackend
from arm64_headline import RECORD, predictions

from accel.models import load_digits_test

pytestmark = pytest.mark.skipif(platform.machine() != "aarch64", reason="runs on an Arm machine: nox -s arm64")


@pytest.fixture(scope="module")
def folder() -> Path:
    given = os.environ.get("ACCEL_ARM64_HEADLINE")
    assert given, (
        "ACCEL_ARM64_HEADLINE names no folder: on x86, python arm64_headline.py FOLDER first (nox -s arm64 does)"
    )
    return Path(given)


def test_acl_computes_with_arm_compute_library():
    assert AclBackend().kernel_library().startswith("Arm Compute Library")


def test_digits_compiled_on_x86_predict_the_same_here(folder):
    x86 = json.loads((folder / RECORD).read_text(encoding="utf-8"))["digits_acl.accel"]
    assert x86["machine"] == "x86_64"
    got = predictions(folder / "digits_acl.accel")
    _, labels = load_digits_test()
    assert got.tolist() == x86["predictions"]
    assert float(np.mean(got == labels)) == x86["accuracy"]


def test_ethosn_partitions_are_refused_in_one_line(folder):
    proc = subprocess.run(
        [sys.executable, "-m", "accel", "run", str(folder / "digits_ethosn_acl.accel")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "ethosn" in lines[0] and "Traceback" not in proc.stderr


def test_a_refusal_of_arm_compute_library_names_the_node_in_its_words():
    """A blob the table would not have made (a rank-5 concatenation on axis 0): ACL's validate()
    refuses it when the blob is loaded, in one line naming the node."""
    from accel_acl import serializer

    from accel.builder import GraphBuilder

    b = GraphBuilder(x=(2, 2, 3, 4, 5), y=(2, 2, 3, 4, 5))
    blob = serializer.serialize(b.done(b.op("concatenate", b.x["x"], b.x["y"], axis=0)))
    with pytest.raises(
        ValueError, match=r"node 'concatenate' \(concatenate\): Arm Compute Library.*Axis not supported"
    ):
        AclBackend().runtime_module().Runtime(blob)
