"""The HTML report of ResNet-50 and DenseNet-121 compiled for the testbackend, as ``accel compile --report`` writes it.

The drawing's layout does not depend on the input resolution (box sizes follow the op names), so the
models are built at 64x64 to keep the test quick; the figures docs/cli.md quotes are checked here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import onnx
import pytest

from accel.artifact import read_artifact
from accel.render import report_to_json
from accel.testing import modelgen

ROOT = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"
#: How docs/cli.md names each network.
DOC_NAMES = {"resnet50": "ResNet-50", "densenet121": "DenseNet-121"}


@pytest.fixture(scope="module", params=list(DOC_NAMES))
def report(request, tmp_path_factory) -> tuple[str, dict, ET.Element]:
    """``accel compile --report`` of the network: the report (from the artifact) and the page's drawing."""
    folder = tmp_path_factory.mktemp(request.param)
    model, artifact, page = (folder / f"{request.param}{ext}" for ext in (".onnx", ".accel", ".html"))
    onnx.save(getattr(modelgen, request.param)(64, num_classes=10), model)
    args = ["compile", str(model), "--backends", "testbackend", "-o", str(artifact), "--report", str(page)]
    proc = subprocess.run(
        [sys.executable, "-m", "accel", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    doc = report_to_json(read_artifact(artifact).report)
    svg = ET.fromstring(re.search(r"<svg\b.*?</svg>", page.read_text(encoding="utf-8"), re.S).group(0))
    return request.param, doc, svg


def _groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if cls in g.get("class", "").split()]


def test_every_node_partition_and_composite_is_drawn(report):
    _, doc, svg = report
    boxes = _groups(svg, "node")
    drawn = [name for g in boxes for name in json.loads(g.get("data-nodes"))]
    assert sorted(drawn) == sorted(n["name"] for n in doc["nodes"])
    assert [g.get("data-partition") for g in _groups(svg, "partition")] == [p["name"] for p in doc["partitions"]]
    instances = Counter(n["composite_root"] for n in doc["nodes"] if n["composite_root"])
    composites = _groups(svg, "composite")
    assert len(composites) == len(instances) > 0
    assert {g.get("data-composite") for g in composites} == {"testbackend.conv2d"}
    assert len(boxes) == len(doc["nodes"]) - sum(k - 1 for k in instances.values())
    # every value between two boxes carries its shape (the models are built at 64x64)
    labels = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "shape"]
    assert len(labels) > len(boxes) // 2
    assert all(re.fullmatch(r"1×\d+(×\d+×\d+)?", label) for label in labels)
    assert "1×3×64×64" in labels


def test_the_figures_docs_cli_quotes(report):
    name, _, svg = report
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    match = re.search(rf"{DOC_NAMES[name]}:\s+(\d+) columns, ([\d,]+)×([\d,]+) px", text)
    assert match, f"docs/cli.md quotes no figure for {DOC_NAMES[name]}"
    columns, width, height = (int(g.replace(",", "")) for g in match.groups())
    assert (int(svg.get("data-columns")), int(svg.get("data-width")), int(svg.get("data-height"))) == (
        columns,
        width,
        height,
    )
