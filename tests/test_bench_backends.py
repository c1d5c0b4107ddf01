"""core/benchmarks/bench_backends.py on tiny inputs: the rows and table it gives and the docs section it rewrites.

Times are measured, never asserted: what is checked is the shape of the result (a row per installed
backend, model form and thread count, each output checked against the reference executor) and that
``--update-docs`` rewrites only this machine kind's table between the markers.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accel import plugins

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "core" / "benchmarks" / "bench_backends.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("bench_backends", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_script()


def _doc(*blocks: tuple[str, str]) -> str:
    inner = "\n".join(
        f"<!-- bench:backends:{k}:start -->\n{body}<!-- bench:backends:{k}:end -->\n" for k, body in blocks
    )
    return f"# Title\n\nbefore\n\n{bench.START}\n{inner}{bench.END}\n\nafter\n"


def test_update_replaces_only_its_kind():
    text = _doc(("avx512-vnni", "### AVX-512 VNNI\n\nold\n"), ("avx2", "### AVX2-only\n\n| kept | table |\n"))
    got = bench.update_section(text, "avx512-vnni", "### AVX-512 VNNI\n\nnew\n")
    assert got == _doc(("avx512-vnni", "### AVX-512 VNNI\n\nnew\n"), ("avx2", "### AVX2-only\n\n| kept | table |\n"))
    assert bench.update_section(got, "avx512-vnni", "### AVX-512 VNNI\n\nnew\n") == got  # idempotent


def test_update_adds_a_missing_kind_in_kind_order():
    text = _doc(("avx2", "### AVX2-only\n\nkept\n"))
    got = bench.update_section(text, "avx512-vnni", "### AVX-512 VNNI\n\nnew\n")
    assert got == _doc(("avx512-vnni", "### AVX-512 VNNI\n\nnew\n"), ("avx2", "### AVX2-only\n\nkept\n"))
    got = bench.update_section(got, "aarch64", "### aarch64\n\narm\n")
    assert got.index("avx2:end") < got.index("aarch64:start") < got.index(bench.END)


def test_update_needs_the_markers():
    with pytest.raises(ValueError, match="bench:backends:start"):
        bench.update_section("# no markers\n", "avx2", "x\n")


def test_machine_kinds():
    assert bench.machine_kind({"avx2", "avx512f", "avx512_vnni"}) == "avx512-vnni"
    assert bench.machine_kind({"avx2", "avx512f"}) == "avx512"
    assert bench.machine_kind({"avx2", "avx_vnni"}) == "avx2-vnni"
    assert bench.machine_kind({"avx2", "fma"}) == "avx2"


def test_docs_page_has_the_section():
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert text.count(bench.START) == 1 and text.count(bench.END) == 1
    inner = text[text.index(bench.START) : text.index(bench.END)]
    assert {m.group(1) for m in bench._BLOCK.finditer(inner)} >= {"avx512-vnni", "avx2"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One run at 32×32, two rounds, ResNet-18 and ten digits, on a copy of docs/benchmarks.md."""
    tmp = tmp_path_factory.mktemp("bench-backends")
    doc = tmp / "benchmarks.md"
    shutil.copy(ROOT / "docs" / "benchmarks.md", doc)
    rows = tmp / "rows.json"
    args = ["--resolution", "32", "--repeat", "2", "--models", "resnet18,digits", "--digits", "10"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--json", str(rows), "--update-docs", str(doc)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(rows.read_text()), doc.read_text(encoding="utf-8")


def _installed() -> list[str]:
    plugins.reset()
    return [b for b in bench.BACKENDS if b in plugins.available_backends()]


def test_rows_per_backend_form_and_thread_count(tiny_run):
    _, result, _ = tiny_run
    installed = _installed()
    want = {
        (backend, "resnet18", form, threads)
        for form, backends in bench.FORMS.items()
        for backend in backends
        if backend in installed
        for threads in (1, 2)
    }
    if {"ethosn", "acl"} <= set(installed):
        want |= {("ethosn,acl", "digits", "qdq", threads) for threads in (1, 2)}
    rows = result["rows"]
    assert {(r["backend"], r["model"], r["form"], r["threads"]) for r in rows} == want
    assert len(rows) == len(want)
    for r in rows:
        assert r["accel_ms"] > 0 and r["ort_ms"] > 0 and r["ratio"] == pytest.approx(r["accel_ms"] / r["ort_ms"])
        assert r["check"]["ok"], r
        if r["form"] == "qdq" and r["model"] != "digits":
            assert r["check"]["bit_exact"], r
    machine = result["machine"]
    assert machine["kind"] == bench.machine_kind(bench.cpu_flags()[1])
    assert set(machine["load_average"]) == {"start", "end"}
    assert machine["versions"]["onnxruntime"]


def test_printed_table(tiny_run):
    out, result, _ = tiny_run
    assert "accel backends next to ONNX Runtime" in out
    for r in result["rows"]:
        assert r["label"] in out
    assert "32×32, batch 1, median of 2 rounds" in " ".join(out.split())


def test_docs_update_rewrites_this_kind_only(tiny_run):
    _, result, text = tiny_run
    before = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    kind = result["machine"]["kind"]

    def split(page: str) -> tuple[str, dict[str, str], str]:
        start, end = page.index(bench.START), page.index(bench.END)
        blocks = {m.group(1): m.group(2) for m in bench._BLOCK.finditer(page[start:end])}
        return page[:start], blocks, page[end:]

    head, blocks, tail = split(text)
    head0, blocks0, tail0 = split(before)
    assert (head, tail) == (head0, tail0)
    assert {k: v for k, v in blocks.items() if k != kind} == {k: v for k, v in blocks0.items() if k != kind}
    mine = blocks[kind]
    assert mine.startswith(f"### {bench.kind_heading(kind)}\n")
    table = [line for line in mine.splitlines() if line.startswith("|")]
    labels = {(r["backend"], r["label"]) for r in result["rows"]}
    assert len(table) == 2 + len(labels)  # header, rule, a line per backend and model
    assert table[0].count("|") == table[1].count("|") == 2 + 2 * 2 + 2  # backend, model, 2 per thread count, outputs
    assert all(line.count("|") == table[0].count("|") for line in table)
    assert result["machine"]["date"] in mine
