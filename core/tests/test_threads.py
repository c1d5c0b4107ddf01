"""The thread count: chosen when an artifact is loaded, read from ACCEL_NUM_THREADS in one place."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from backend_fakes import FakeBackend

import accel
from accel import runtime
from accel.artifact import artifact_from_bytes
from accel.builder import GraphBuilder
from accel.errors import InputError
from accel.limits import MAX_THREADS

AVAILABLE = {"fake": FakeBackend}


def _artifact():
    b = GraphBuilder(x=(1, 3, 4, 4), y=(1, 3, 4, 4))
    return accel.compile(b.done(b.op("nn.relu", b.op("add", b.x["x"], b.x["y"]))), ["fake"], available=AVAILABLE)


def test_the_count_given_at_load_reaches_every_handle(monkeypatch):
    monkeypatch.delenv(runtime.THREADS_ENV, raising=False)
    art = _artifact()
    for n in (1, 2, 5):
        exe = art.executable(threads=n)
        assert exe.threads == n
        assert exe.handles and {h.threads for h in exe.handles.values()} == {n}


def test_without_a_count_the_variable_then_every_core(monkeypatch):
    monkeypatch.setenv(runtime.THREADS_ENV, "3")
    assert runtime.resolve_threads() == 3
    assert runtime.resolve_threads(2) == 2  # the caller's choice wins
    assert {h.threads for h in _artifact().executable().handles.values()} == {3}
    monkeypatch.delenv(runtime.THREADS_ENV)
    assert runtime.resolve_threads() == runtime.available_cores()


@pytest.mark.parametrize("text", ["two", "0", "-1", "1.5", str(MAX_THREADS + 1)])
def test_an_unusable_variable_is_one_clear_error(monkeypatch, text):
    monkeypatch.setenv(runtime.THREADS_ENV, text)
    with pytest.raises(InputError, match=r"ACCEL_NUM_THREADS"):
        runtime.resolve_threads()


@pytest.mark.parametrize("bad", [0, -2, MAX_THREADS + 1, True, 1.5])
def test_an_unusable_count_is_one_clear_error(bad):
    with pytest.raises(InputError, match=r"thread count must be a whole number"):
        runtime.resolve_threads(bad)


def test_the_variable_is_read_in_one_place():
    """Only accel.runtime reads ACCEL_NUM_THREADS (through THREADS_ENV); no other module of the core or the
    sdk, and none of the sdk's headers: runtimes get the count through the ABI."""
    import re

    import accel_sdk

    reads = re.compile(r"(environ|getenv)[^\n]*(ACCEL_NUM_THREADS|THREADS_ENV)")
    roots = [Path(accel.__file__).parent, Path(accel_sdk.__file__).parent]
    readers = [
        p.name
        for root in roots
        for p in root.rglob("*")
        if p.suffix in (".py", ".hpp", ".h") and reads.search(p.read_text())
    ]
    assert readers == ["runtime.py"]


def test_an_artifact_records_no_thread_count():
    doc = json.loads(zipfile.ZipFile(io.BytesIO(_artifact().to_bytes())).read("manifest.json"))
    assert "threads" not in json.dumps(doc["target"])


def test_an_artifact_of_runtime_abi_1_still_loads():
    data = _artifact().to_bytes()
    src = zipfile.ZipFile(io.BytesIO(data))
    members = {n: src.read(n) for n in src.namelist()}
    doc = json.loads(members["manifest.json"])
    doc["backends"][0]["abi_version"] = 1
    members["manifest.json"] = json.dumps(doc).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, blob in members.items():
            zf.writestr(name, blob)
    art = artifact_from_bytes(buf.getvalue(), backends=AVAILABLE)
    x = np.ones((1, 3, 4, 4), np.float32)
    assert np.array_equal(art.executable(threads=1).run({"x": x, "y": -x})[art.graph.outputs[0].name], 0 * x)
