"""``accel-sdk new`` renders a backend that builds and passes its own tests as rendered.

The backend is rendered by the installed ``accel-sdk`` command, built by pip
against the installed accel-core and accel-sdk (no build isolation: the build
tools come from this environment, as in ``nox -s tests``), installed into a
folder of its own so this environment's plugins stay as they are, and its
tests (the conformance kit and its refusals) run in a fresh interpreter that
sees it. The build runs once for the module; then the rendered tests run, and a
ResNet-18 compiled through the plugin's entry point must have every convolution
offloaded and match the reference. About 40 s, most of it the C++ build.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from accel_sdk.cli import render

SCRIPT = Path(sys.executable).parent / "accel-sdk"
ROOT = Path(__file__).resolve().parents[1]
#: A code block of docs/sdk.md quoting a rendered file: its first line names it (``# accel-mynpu/<path>``).
EXCERPT = re.compile(r"^```\w*\n(?:#|//) accel-mynpu/(\S+)\n(.*?)^```", re.S | re.M)


def run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=env or dict(os.environ), timeout=900
    )
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return proc


@dataclass
class Rendered:
    folder: Path  # the rendered accel-mynpu
    env: dict[str, str]  # an environment that sees it installed


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Rendered:
    """``accel-sdk new mynpu``, built and installed into a folder of its own (once for this module)."""
    tmp = tmp_path_factory.mktemp("template")
    run(SCRIPT, "new", "mynpu", "--output", tmp / "accel-mynpu", cwd=tmp)
    site = tmp / "site"
    run(
        sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--target", site,
        tmp / "accel-mynpu", cwd=tmp,
    )  # fmt: skip
    assert list(site.glob("accel_mynpu/_runtime*.so")) or list(site.glob("accel_mynpu/_runtime*.pyd"))
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    # the runtime's RPATH reaches <prefix>/lib (libdnnl.so.3) from site-packages, not from this folder
    libs = os.pathsep.join([str(Path(sys.prefix) / "lib"), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
    env = {**os.environ, "PYTHONPATH": path, "LD_LIBRARY_PATH": libs, "COLUMNS": "200"}
    return Rendered(tmp / "accel-mynpu", env)


def test_rendered_backend_builds_installs_and_passes_its_tests(rendered):
    backends = run(sys.executable, "-m", "accel", "backends", cwd=rendered.folder, env=rendered.env)
    assert "mynpu" in backends.stdout
    tests = run(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "tests",
        cwd=rendered.folder, env=rendered.env,
    )  # fmt: skip
    summary = tests.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "skipped" not in summary and "failed" not in summary, tests.stdout
    passed = [line for line in tests.stdout.splitlines() if line.startswith("PASSED")]
    for name in (
        "test_runtime_matches_reference",
        "test_discoverable_through_its_entry_point",
        "test_refusals_give_their_reason",
        "test_compiled_model_matches_reference",
        "test_row_matches_reference",
        "test_threads_are_chosen_when_loading",
        "test_readme_lists_every_kernel_of_the_blob",
        "test_resnet18_offloads_every_convolution",
    ):
        assert any(name in line for line in passed), f"{name} did not pass:\n{tests.stdout}"


#: Compiles a ResNet-18 (PyTorch-export style) for the rendered backend, found through its entry point.
RESNET18 = """
import json
import accel
import numpy as np
from accel.executor import ReferenceExecutor
from accel.testing import modelgen

graph = accel.import_onnx(modelgen.resnet18(64).SerializeToString())
artifact = accel.compile(graph, "mynpu")
feed = {graph.inputs[0].name: np.random.default_rng(0).random(graph.inputs[0].type.shape, dtype=np.float32)}
out = graph.outputs[0].name
got = np.asarray(artifact.executable(threads=2).run(feed)[out])
want = np.asarray(ReferenceExecutor(graph).run(feed)[out])
composites = [n.attrs.get("composite") for p in artifact.graph.nodes if p.op == "call" for n in p.body.nodes]
print(json.dumps({
    "convs": sum(n.op == "nn.conv2d" for n in graph.nodes),
    "offloaded": composites.count("mynpu.conv2d"),
    "host": sorted({n.op for n in artifact.report.host_nodes()}),
    "error": float(np.max(np.abs(got - want)) / np.max(np.abs(want))),
}))
"""


def test_rendered_backend_offloads_every_convolution_of_resnet18(rendered):
    result = json.loads(run(sys.executable, "-c", RESNET18, cwd=rendered.folder, env=rendered.env).stdout)
    assert result["offloaded"] == result["convs"] == 20, result
    assert result["host"] == ["reshape"], result  # the flatten; every convolution, pool and the dense are offloaded
    assert result["error"] <= 1e-4, result


def test_the_sdk_docs_quote_the_rendered_template(tmp_path):
    """Every line of each excerpt in docs/sdk.md is a line of the rendered file, in order (``...`` skips)."""
    render("mynpu", tmp_path)
    excerpts = EXCERPT.findall((ROOT / "docs" / "sdk.md").read_text(encoding="utf-8"))
    assert {rel for rel, _ in excerpts} >= {"CMakeLists.txt", "pyproject.toml", "src/runtime.cpp"}
    for rel, body in excerpts:
        lines = (tmp_path / rel).read_text(encoding="utf-8").splitlines()
        at = 0
        for line in body.splitlines():
            if line.strip() in ("", "..."):
                continue
            assert line in lines[at:], (
                f"docs/sdk.md quotes {rel} with a line it does not have (after line {at}): {line!r}"
            )
            at = lines.index(line, at) + 1
