"""Loaded blobs shared by threads, and blobs that are not what the serializer wrote."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import acl_cases as cases
import numpy as np
import pytest
from accel_acl import AclBackend, _runtime
from acl_helpers import compiled, inputs_for

from accel.partition import partition_graph


def test_one_handle_from_several_threads_with_threads_option():
    """Each call runs on its own arena and stream; 2 oneDNN threads per call, 4 callers at once."""
    graph = cases.qnn_network("uint8")
    executable = compiled(graph, {"threads": 2}).executable()
    feeds = [inputs_for(graph, seed) for seed in range(4)]
    want = [executable.run(f) for f in feeds]
    errors: list[str] = []

    def work(i: int) -> None:
        for _ in range(10):
            got = executable.run(feeds[i])
            for k, v in want[i].items():
                if not np.array_equal(np.asarray(got[k]), np.asarray(v)):
                    errors.append(f"thread {i}: %{k} differs")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def _blobs() -> list[bytes]:
    out = []
    for graph in (cases.network_fp32(), cases.qnn_network("int8"), cases.qnn_dense("uint8"), cases.l2_pool()):
        result = partition_graph(graph, [AclBackend()])
        out += [AclBackend().serialize(r.body) for r in result.regions]
    return out


def test_blob_of_another_kind_is_refused():
    blob = _blobs()[0]
    bad = blob.replace(b"\x03\x00\x00\x00acl", b"\x03\x00\x00\x00xyz", 1)
    with pytest.raises(ValueError, match="a 'xyz' graph blob, this runtime reads 'acl'"):
        _runtime.Runtime(bad)


def test_wrong_attribute_values_are_refused():
    """The serializer's attributes changed by hand: every kernel validates them against its tensors."""
    blob = _blobs()[0]
    # the first conv's strides (2 ints of 1) become 0: refused, not run
    key = b"\x07\x00\x00\x00strides\x05\x02\x00\x00\x00" + (1).to_bytes(8, "little") * 2
    assert key in blob
    bad = blob.replace(key, b"\x07\x00\x00\x00strides\x05\x02\x00\x00\x00" + (0).to_bytes(8, "little") * 2, 1)
    with pytest.raises(ValueError, match="strides"):
        _runtime.Runtime(bad)
    bad = blob.replace(key, b"\x07\x00\x00\x00strides\x05\x02\x00\x00\x00" + (3).to_bytes(8, "little") * 2, 1)
    with pytest.raises(ValueError, match="output must be"):
        _runtime.Runtime(bad)


FUZZ = """
import sys, numpy as np
from accel_acl import _runtime
blobs = [open(p, "rb").read() for p in sys.argv[2:]]
rng = np.random.default_rng(int(sys.argv[1]))
loaded = 0
for i in range(600):
    blob = bytearray(blobs[i % len(blobs)])
    kind = i % 3
    if kind == 0:      # a few random bytes changed
        for _ in range(int(rng.integers(1, 4))):
            blob[int(rng.integers(len(blob)))] = int(rng.integers(256))
    elif kind == 1:    # an aligned 4- or 8-byte field of the tables set to an extreme
        at = int(rng.integers(0, min(len(blob), 4096) - 8)) & ~3
        blob[at:at + 4] = int(rng.choice([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000])).to_bytes(4, "little")
    else:              # cut and spliced with another blob's tail
        other = blobs[int(rng.integers(len(blobs)))]
        cut = int(rng.integers(len(blob)))
        blob = blob[:cut] + other[int(rng.integers(len(other))):]
    try:
        rt = _runtime.Runtime(bytes(blob))
    except ValueError:
        continue
    loaded += 1
print("loaded", loaded)
"""


def test_mutated_blobs_never_crash(tmp_path: Path):
    """600 mutations (random bytes, extreme counts and sizes, splices) load or raise ValueError; run in a
    child process so that a crash is a failure with its signal, not a dead test run."""
    paths = []
    for i, blob in enumerate(_blobs()):
        p = tmp_path / f"blob{i}.bin"
        p.write_bytes(blob)
        paths.append(str(p))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FUZZ), "7", *paths], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert "loaded" in proc.stdout
