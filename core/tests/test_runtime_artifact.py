"""Executable (planned buffers, threads) and the .accel artifact (round trip, corruption, versions)."""

from __future__ import annotations

import ast
import io
import json
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
from backend_fakes import FakeBackend

import accel
from accel import runtime
from accel.artifact import artifact_from_bytes, read_artifact
from accel.backend import ABI_VERSION
from accel.builder import GraphBuilder
from accel.errors import AbiMismatchError, ArtifactError, BackendNotFoundError, GraphError, InputError, TargetError
from accel.executor import Program, ReferenceExecutor, plan_offsets
from accel.runtime import Executable, create_handle

AVAILABLE = {"fake": FakeBackend}


def _graph():
    b = GraphBuilder(x=(2, 3, 4, 4), y=(2, 3, 4, 4))
    s = b.op("nn.relu", b.op("add", b.x["x"], b.x["y"]))  # the relu_add composite
    h = b.op("sigmoid", s)  # host
    t = b.op("abs", b.op("add", h, s))  # fake again
    u = b.op("reshape", t, newshape=(2, 48))  # host view of a backend output
    return b.done(b.op("tanh", u), t)


def _feeds(seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal((2, 3, 4, 4)).astype(np.float32) for k in ("x", "y")}


def _compile(graph=None, **kw):
    return accel.compile(graph if graph is not None else _graph(), ["fake"], available=AVAILABLE, **kw)


def test_partitioned_results_equal_the_reference_bitwise():
    g = _graph()
    art = _compile(g)
    assert [b for _, b in art.partitions] == ["fake", "fake"]
    exe = art.executable()
    feeds = _feeds()
    want = ReferenceExecutor(g).run(feeds)
    got = exe.run(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    # the intermediate that only crosses between steps lives in the arena
    assert exe.arena_bytes > 0


def test_outputs_are_owned_and_survive_later_runs():
    exe = _compile().executable()
    first = exe.run(_feeds(0))
    keep = {k: v.copy() for k, v in first.items()}
    exe.run(_feeds(1))
    for k in keep:
        np.testing.assert_array_equal(first[k], keep[k])


def test_many_threads_give_identical_results():
    exe = _compile().executable()
    feeds = _feeds(3)
    want = exe.run(feeds)
    bad: list[str] = []

    def worker() -> None:
        for _ in range(200):
            got = exe.run(feeds)
            if not all(np.array_equal(got[k], want[k]) for k in want):
                bad.append("mismatch")
                return

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []


def test_wrong_input_is_an_input_error():
    exe = _compile().executable()
    with pytest.raises(InputError, match="must be float32"):
        exe.run({"x": np.zeros((2, 3, 4, 4), np.float64), "y": np.zeros((2, 3, 4, 4), np.float32)})
    with pytest.raises(InputError, match="missing input 'y'"):
        exe.run({"x": np.zeros((2, 3, 4, 4), np.float32)})


def test_plan_never_overlaps_live_tensors():
    rng = np.random.default_rng(0)
    items = []
    for s in range(200):
        a = int(rng.integers(0, 50))
        items.append((s, a, a + int(rng.integers(0, 10)), int(rng.integers(1, 5000))))
    offsets, total = plan_offsets(items)
    for s1, a1, b1, n1 in items:
        for s2, a2, b2, n2 in items:
            if s1 < s2 and not (b1 < a2 or b2 < a1):
                o1, o2 = offsets[s1], offsets[s2]
                assert o1 + n1 <= o2 or o2 + n2 <= o1
    assert total <= sum(n + 64 for *_, n in items)
    assert all(o % 64 == 0 for o in offsets.values())


# -- artifact ------------------------------------------------------------------------------
def test_artifact_round_trip(tmp_path):
    g = _graph()
    art = _compile(g)
    path = art.save(tmp_path / "m.accel")
    back = read_artifact(path, backends=AVAILABLE)
    assert back.partitions == art.partitions
    assert back.blobs == art.blobs
    assert back.report.to_json() == art.report.to_json()
    feeds = _feeds(5)
    want = ReferenceExecutor(g).run(feeds)
    got = back.executable().run(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    manifest = json.loads(zipfile.ZipFile(path).read("manifest.json"))
    assert manifest["backends"] == [
        {"name": "fake", "distribution": "accel-fake", "version": "1.2.3", "abi_version": ABI_VERSION}
    ]
    assert set(manifest["members"]) >= {"graph.json", "report.json", "partitions/fake_0.bin"}


def _rezip(data: bytes, edit) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(data))
    members = {i.filename: src.read(i) for i in src.infolist()}
    edit(members)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for k, v in members.items():
            zf.writestr(k, v)
    return out.getvalue()


def test_truncated_file_is_an_artifact_error():
    data = _compile().to_bytes()
    for n in (0, 10, len(data) // 3, len(data) // 2, len(data) - 1):
        with pytest.raises(ArtifactError):
            artifact_from_bytes(data[:n], backends=AVAILABLE)


def test_member_with_wrong_hash_is_named():
    data = _compile().to_bytes()

    def edit(m):
        m["partitions/fake_0.bin"] = m["partitions/fake_0.bin"].replace(b"relu", b"abs ")

    with pytest.raises(ArtifactError, match=r"member 'partitions/fake_0.bin' does not match its sha256"):
        artifact_from_bytes(_rezip(data, edit), backends=AVAILABLE)

    def extra(m):
        m["evil.py"] = b"print('hi')"

    with pytest.raises(ArtifactError, match="not listed in the manifest"):
        artifact_from_bytes(_rezip(data, extra), backends=AVAILABLE)


def test_absent_backend_names_the_distribution():
    data = _compile().to_bytes()
    with pytest.raises(BackendNotFoundError, match="pip install accel-fake"):
        artifact_from_bytes(data, backends={})


def test_other_abi_version_is_refused():
    data = _compile().to_bytes()

    def edit(m):
        doc = json.loads(m["manifest.json"])
        doc["backends"][0]["abi_version"] = 7
        m["manifest.json"] = json.dumps(doc).encode()

    with pytest.raises(ArtifactError, match=r"runtime ABI 7.*recompile"):
        artifact_from_bytes(_rezip(data, edit), backends=AVAILABLE)


def test_other_format_version_and_bad_manifest():
    data = _compile().to_bytes()

    def newer(m):
        doc = json.loads(m["manifest.json"])
        doc["format_version"] = 99
        m["manifest.json"] = json.dumps(doc).encode()

    with pytest.raises(ArtifactError, match="format version 99"):
        artifact_from_bytes(_rezip(data, newer), backends=AVAILABLE)

    def broken(m):
        m["manifest.json"] = b"{not json"

    with pytest.raises(ArtifactError, match=r"manifest\.json is invalid"):
        artifact_from_bytes(_rezip(data, broken), backends=AVAILABLE)
    with pytest.raises(ArtifactError, match="not an accel artifact"):
        artifact_from_bytes(b"PK\x03\x04 nothing", backends=AVAILABLE)


def test_runtime_with_another_abi_is_refused():
    class Old(FakeBackend):
        name = "old"
        abi = 999

    with pytest.raises(AbiMismatchError, match=rf"runtime ABI 999, this accel-core speaks {ABI_VERSION}"):
        create_handle(Old(), b"{}", "old_0")


def test_refused_blob_is_a_backend_runtime_error():
    from accel.errors import BackendRuntimeError

    with pytest.raises(BackendRuntimeError, match=r"fake refused the blob of partition 'p'"):
        create_handle(FakeBackend(), b"\x00garbage", "p")


def test_save_is_atomic(tmp_path, monkeypatch):
    art = _compile()
    target = tmp_path / "m.accel"
    target.write_bytes(b"old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(ArtifactError, match=r"cannot write .*disk full"):
        art.save(target)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["m.accel"]


def test_target_forms():
    with pytest.raises(TargetError, match="give either backends or a target"):
        accel.compile(_graph(), ["fake"], target={"devices": []}, available=AVAILABLE)
    art = accel.compile(_graph(), target={"devices": [{"kind": "fake"}]}, available=AVAILABLE)
    assert len(art.partitions) == 2
    with pytest.raises(TargetError, match=r"devices\.0\.colour: unknown option|colour"):
        accel.compile(_graph(), target={"devices": [{"kind": "fake", "colour": 1}]}, available=AVAILABLE)
    with pytest.raises(TargetError, match=r"devices\[0\] \(fake\): min_work: Input should be greater"):
        accel.compile(
            _graph(), target={"devices": [{"kind": "fake", "options": {"min_work": -1}}]}, available=AVAILABLE
        )


def test_executable_and_reference_executor_are_one_run_core():
    """Both are a Program: one planner, one run loop, one input boundary; runtime.py adds only the binding."""
    assert issubclass(Executable, Program) and issubclass(ReferenceExecutor, Program)
    assert [k for k, v in vars(Executable).items() if callable(v)] == ["__init__"]
    tree = ast.parse(Path(runtime.__file__).read_text(encoding="utf-8"))
    from_executor = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "accel.executor"
                     for a in n.names}  # fmt: skip
    assert from_executor and not any(name.startswith("_") or name == "ReferenceExecutor" for name in from_executor)
    g = _graph()
    exe, ref = Executable(g, {}), ReferenceExecutor(g)
    assert exe.arena_bytes == ref.arena_bytes
    messages = []
    for program in (exe, ref):
        with pytest.raises(InputError) as info:
            program.run({"x": np.zeros((2, 3, 4, 5), np.float32), "y": np.zeros((2, 3, 4, 4), np.float32)})
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "x" in messages[0]


def test_host_only_executable_matches_reference():
    g = _graph()
    exe = Executable(g, {})
    feeds = _feeds(2)
    want = ReferenceExecutor(g).run(feeds)
    got = exe.run(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def big_endian(a: np.ndarray) -> np.ndarray:
    out = a.astype(a.dtype.newbyteorder(">"))
    assert not out.dtype.isnative and out.dtype.name == a.dtype.name
    return out


def misaligned(a: np.ndarray) -> np.ndarray:
    """The same values at an address one byte off the dtype's alignment."""
    buf = np.empty(a.nbytes + 1, np.uint8)
    out = np.frombuffer(buf.data, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned and out.flags.c_contiguous
    return out


def _boundary_graph():
    """Inputs read first by a host view (reshape) and by a partition (the fake relu_add)."""
    b = GraphBuilder(x=(2, 3, 4, 4), y=(2, 3, 4, 4))
    flat = b.op("reshape", b.x["x"], newshape=(2, 48))
    s = b.op("nn.relu", b.op("add", b.x["x"], b.x["y"]))
    return b.done(flat, s)


@pytest.mark.parametrize("odd", [big_endian, misaligned])
def test_inputs_are_made_native_and_aligned_at_the_boundary(odd):
    g = _boundary_graph()
    feeds = _feeds(4)
    want = ReferenceExecutor(g).run(feeds)
    given = {k: odd(v) for k, v in feeds.items()}
    before = {k: v.copy() for k, v in given.items()}
    exe = _compile(g).executable()
    assert len(exe.partitions) == 1
    runs = {
        "execute": accel.execute(g, given),
        "reference": ReferenceExecutor(g).run(given),
        "compiled": exe.run(given),
    }
    for how, got in runs.items():
        for k in want:
            assert got[k].dtype == want[k].dtype and got[k].dtype.isnative, (how, k)
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{how} {k}")
    for k, v in given.items():  # the caller's arrays are left as they were
        assert v.dtype == before[k].dtype
        np.testing.assert_array_equal(v, before[k])


def test_a_kernel_result_in_the_other_byte_order_is_named_as_such():
    from accel.ops.common import same_as_input
    from accel.ops.registry import REGISTRY, Layout, register_op

    register_op("probe.swapped", infer=same_as_input, layout=Layout.ELEMENTWISE)(
        lambda ctx, x: x.astype(x.dtype.newbyteorder(">"))
    )
    try:
        b = GraphBuilder(x=(1, 2))
        g = b.done(b.op("probe.swapped", b.x["x"]))
        with pytest.raises(
            GraphError, match=r"returned float32 \(big-endian\)\[1,2\], its type rule says float32\[1,2\]"
        ):
            accel.execute(g, {"x": np.ones((1, 2), np.float32)})
    finally:
        REGISTRY.pop("probe.swapped", None)


def _plan_by_comparing_all(items, align=64):
    """The planner's rule written plainly: each tensor compared with every tensor placed before it."""
    placed, offsets, total = [], {}, 0
    for s, start, stop, size in sorted(items, key=lambda x: (-x[3], x[1])):
        size = (max(size, 1) + align - 1) // align * align
        clashes = sorted((o, o + sz) for o, sz, a, b in placed if not (b < start or stop < a))
        offset = 0
        for lo, hi in clashes:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((offset, size, start, stop))
        offsets[s] = offset
        total = max(total, offset + size)
    return offsets, total


@pytest.mark.parametrize("seed", range(6))
def test_plan_places_as_comparing_every_tensor_does(seed):
    """The block index finds exactly the tensors alive at the same time: same offsets as comparing all,
    on short and long lifetimes (long ones span many blocks), equal sizes and starts included."""
    rng = np.random.default_rng(seed)
    steps = int(rng.integers(5, 400))
    items = []
    for s in range(int(rng.integers(1, 300))):
        a = int(rng.integers(0, steps))
        span = int(rng.integers(0, 4)) if rng.random() < 0.7 else int(rng.integers(0, steps))
        items.append((s, a, min(a + span, steps), int(rng.choice([64, 100, 4096, int(rng.integers(1, 9000))]))))
    assert plan_offsets(items) == _plan_by_comparing_all(items)
