"""Figures the documentation quotes are what the code gives today: op counts before and after
``simplify`` (docs/onnx.md), the size of the HTML report's page for 10,000 nodes and the lines
``accel compile`` and ``accel run --compare`` print (docs/cli.md). A change that moves a figure fails
here, with the figure to write instead. Times are quoted as measured, never asserted."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cli_helpers import run_accel

import accel
from accel.models import default_model_path
from accel.render import report_to_html
from accel.report import HOST, NodeReport, PartitionReport, Report

ROOT = Path(__file__).resolve().parents[1]


def page(name: str) -> str:
    """A docs page with its line breaks and indentation folded into single spaces."""
    return " ".join((ROOT / "docs" / name).read_text(encoding="utf-8").split())


def accel_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_accel(*args, cwd=cwd)


def test_onnx_page_op_counts_name_their_model() -> None:
    text = page("onnx.md")
    found = re.search(
        r"the embedded fp32 digits model .*?: (\d+) ops imported, (\d+) after simplify\. "
        r"The quantized one .*? has (\d+) ops imported and (\d+) after simplify",
        text,
    )
    assert found, "docs/onnx.md no longer says which model its op counts are of"
    counts = []
    for quantized in (False, True):
        path = default_model_path(quantized=quantized)
        counts += [len(accel.import_onnx(path, optimize=False).nodes), len(accel.import_onnx(path).nodes)]
    assert [int(g) for g in found.groups()] == counts, f"docs/onnx.md should say {counts}"


def host_chain(n: int) -> Report:
    """``n`` relus one after the other, all on the host."""
    nodes = [
        NodeReport(f"n{i}", "nn.relu", HOST, None, None, {"acl": "fp16"}, [f"v{i}"], [f"v{i + 1}"]) for i in range(n)
    ]
    return Report(["acl"], nodes, [], ["v0"], [f"v{n}"])


def residual_blocks(n: int, per_partition: int) -> Report:
    """``n`` nodes of residual blocks (conv → relu → conv → add → relu), ``per_partition`` nodes to a partition."""
    nodes: list[NodeReport] = []
    partitions: list[PartitionReport] = []
    types = {"x": "float32[1,64,56,56]"}
    value = "x"
    while len(nodes) < n:
        partition, names, entry = f"acl_{len(partitions)}", [], value
        for _ in range(per_partition // 5):
            k = len(nodes)
            outs = [f"v{k + j}" for j in range(5)]
            steps = [
                ("nn.conv2d", [value, f"w{k}"]),
                ("nn.relu", [outs[0]]),
                ("nn.conv2d", [outs[1], f"w{k + 2}"]),
                ("add", [outs[2], value]),
                ("nn.relu", [outs[3]]),
            ]
            for j, (op, inputs) in enumerate(steps):
                name = f"block{k // 5}/{op}_{j}"
                nodes.append(NodeReport(name, op, "acl", partition, None, {}, inputs, [outs[j]]))
                names.append(name)
                types[outs[j]] = "float32[1,64,56,56]"
            value = outs[4]
        partitions.append(PartitionReport(partition, "acl", names, [entry], [value], 10**8, 10**8, 0))
    return Report(["acl"], nodes, partitions, ["x"], [value], types=types)


def test_cli_page_html_sizes_are_todays() -> None:
    text = page("cli.md")
    found = re.search(
        r"A 10,000-node graph makes a ([\d.]+) MB page as a chain of host ops, "
        r"and a ([\d.]+) MB one as residual blocks in partitions of (\d+) nodes",
        text,
    )
    assert found, "docs/cli.md no longer quotes the page sizes this test checks"
    chain_mb, residual_mb, per_partition = float(found.group(1)), float(found.group(2)), int(found.group(3))
    sizes = [
        len(report_to_html(report, "size").encode("utf-8")) / 1e6
        for report in (host_chain(10_000), residual_blocks(10_000, per_partition))
    ]
    assert [round(s, 1) for s in sizes] == [chain_mb, residual_mb], f"docs/cli.md should say {sizes} MB"


def _masked(line: str) -> str:
    """A line with its numbers replaced (they depend on the machine's float rounding)."""
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", line)


def test_cli_page_compare_mismatch_line_is_what_run_prints() -> None:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    (documented,) = [line.strip() for line in text.splitlines() if line.strip().startswith("mismatch: ")]
    proc = accel_cli("run", str(default_model_path(quantized=False)), "-c", "onnxruntime", "--atol", "0", "--rtol", "0")
    assert proc.returncode == 1, proc.stderr
    assert _masked(documented) == _masked(proc.stderr.strip())


def test_cli_page_offload_warning_is_what_compile_prints(tmp_path: Path) -> None:
    """The transformer encoder of accel.testing.modelgen on acl (its MACs are in rank-3 dense layers)."""
    pytest.importorskip("accel_acl")
    import onnx

    from accel.testing import modelgen

    onnx.save(modelgen.transformer_encoder(), tmp_path / "encoder.onnx")
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    (documented,) = [line.strip() for line in text.splitlines() if line.strip().startswith("warning: only ")]
    proc = accel_cli("compile", "encoder.onnx", "-b", "acl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [documented]


def test_cli_page_unsupported_op_line_is_what_the_import_says() -> None:
    from accel.frontend.onnx import _unsupported_op_message

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    (documented,) = [line for line in text.splitlines() if line.startswith("error: unsupported op 'Relu6'")]
    assert documented == "error: " + _unsupported_op_message("Relu6", "", 17, "'r'")
