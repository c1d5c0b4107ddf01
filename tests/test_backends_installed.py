"""Installed plugins end to end: discovery, `accel backends`, compile → artifact → run, inspect.

The nox ``tests`` session installs tests/backends/*: the test backend (a C++
runtime built with accel-sdk) and three broken plugins (one fails to import,
one ships a runtime built for another ABI, one whose hook raises).
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from accel_testbackend import TestBackend
from test_cli import accel_cli

import accel
from accel import plugins
from accel.backend import ABI_VERSION, Backend
from accel.builder import GraphBuilder
from accel.errors import BackendNotFoundError
from accel.executor import ReferenceExecutor


@pytest.fixture(autouse=True)
def _fresh_discovery(monkeypatch):
    for var in ("ACCEL_DISABLE_PLUGINS", "ACCEL_LOAD_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    plugins.reset()
    yield
    plugins.reset()


def _cli(*args: str, cwd=None) -> tuple[int, str]:
    """Exit code and output (stdout, or stderr when it failed) of the installed command."""
    proc = accel_cli(*args, cwd=cwd)
    if proc.returncode != 0:
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.returncode, proc.stderr
    return 0, proc.stdout


def test_discovery_states_of_installed_plugins():
    got = {s.name: s for s in plugins.statuses()}
    assert got["testbackend"].state == "ok"
    assert got["testbackend"].distribution == "accel-testbackend"
    assert got["testbackend"].abi_version == ABI_VERSION
    assert got["wrongabi"].state == "ABI mismatch" and got["wrongabi"].abi_version == 999
    assert got["brokenimport"].state == "import error"
    assert got["hookraises"].state == "invalid" and "accel_register_backends raised" in got["hookraises"].error


def test_accel_backends_lists_every_plugin():
    code, out = _cli("backends")
    assert code == 0
    for name in ("testbackend", "wrongabi", "brokenimport", "hookraises"):
        assert name in out
    assert "ABI mismatch" in out and "import error" in out
    assert "Traceback" not in out
    code, verbose = _cli("backends", "--verbose")
    assert code == 0 and "Traceback" in verbose


def test_switches(monkeypatch):
    monkeypatch.setenv("ACCEL_DISABLE_PLUGINS", "brokenimport,hookraises")
    got = {s.name: s.state for s in plugins.discover()}
    assert got["brokenimport"] == got["hookraises"] == "disabled" and got["testbackend"] == "ok"
    monkeypatch.delenv("ACCEL_DISABLE_PLUGINS")
    monkeypatch.setenv("ACCEL_LOAD_PLUGINS", "testbackend")
    got = {s.name: s.state for s in plugins.discover()}
    assert got["testbackend"] == "ok" and got["wrongabi"] == "disabled"


def test_broken_plugins_never_break_the_cli(tmp_path, monkeypatch):
    code, out = _cli("run", "-n", "1", cwd=tmp_path)
    assert code == 0 and "accuracy" in out
    code, msg = _cli("compile", "--backends", "wrongabi", cwd=tmp_path)
    assert code == 2 and msg.startswith("error: backend wrongabi") and "ABI mismatch" in msg
    with pytest.raises(BackendNotFoundError, match=r"wrongabi \(accel-wrong-abi .*\) cannot be used: ABI mismatch"):
        plugins.get_backend("wrongabi")
    # a published backend that is not installed here gets the pip hint
    monkeypatch.setitem(plugins.KNOWN_DISTRIBUTIONS, "npu9", "accel-npu9")
    with pytest.raises(BackendNotFoundError, match="not installed; install it with: pip install accel-npu9"):
        plugins.get_backend("npu9")


def _exact_graph():
    """Ops the test backend computes exactly like the reference (no float reassociation)."""
    b = GraphBuilder(x=(1, 8, 16, 16), y=(1, 8, 8, 8))
    p = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2), strides=(2, 2))
    r = b.op("nn.relu", p)
    a = b.op("add", r, b.x["y"])
    m = b.op("maximum", a, b.op("clip", b.x["y"], a_min=-0.5, a_max=0.5))
    s = b.op("sigmoid", m)  # the host
    q = b.op("nn.max_pool2d", s, pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))
    return b.done(b.op("reshape", b.op("nn.relu", q), newshape=(1, 512)))


def _feeds(seed):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((1, 8, 16, 16)).astype(np.float32),
        "y": rng.standard_normal((1, 8, 8, 8)).astype(np.float32),
    }


def test_partitioned_graph_equals_reference_bitwise(tmp_path):
    g = _exact_graph()
    art = accel.compile(g, "testbackend")
    assert [b for _, b in art.partitions] == ["testbackend", "testbackend"]
    path = art.save(tmp_path / "exact.accel")
    exe = accel.load(path)
    ref = ReferenceExecutor(g)
    for seed in range(5):
        feeds = _feeds(seed)
        want = ref.run(feeds)
        got = exe.run(feeds)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


def test_eight_threads_two_hundred_runs_identical():
    exe = accel.compile(_exact_graph(), "testbackend").executable()
    feeds = _feeds(11)
    want = exe.run(feeds)
    failures: list[str] = []

    def worker() -> None:
        try:
            for _ in range(200):
                got = exe.run(feeds)
                if not all(np.array_equal(got[k], want[k]) for k in want):
                    failures.append("different result")
                    return
        except Exception as exc:  # reported below
            failures.append(repr(exc))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_conv_model_close_to_reference():
    rng = np.random.default_rng(0)
    b = GraphBuilder(x=(1, 3, 12, 12))
    w = b.const(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    y = b.op("nn.conv2d", b.x["x"], w, padding=(1, 1, 1, 1))
    y = b.op("nn.relu", b.op("nn.bias_add", y, b.const(rng.standard_normal(8).astype(np.float32))))
    g = b.done(b.op("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2)))
    art = accel.compile(g, "testbackend")
    assert {n.composite for n in art.report.nodes if n.op == "nn.conv2d"} == {"testbackend.conv2d"}
    feeds = {"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
    want = ReferenceExecutor(g).run(feeds)
    got = art.executable().run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


def test_inspect_json_shows_a_refusal_reason(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])
    relu = helper.make_node("Relu", ["y"], ["z"])
    graph = helper.make_graph(
        [node, relu],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 6, 6])],
    )
    path = tmp_path / "pool.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    code, out = _cli("inspect", str(path), "--backends", "testbackend", "--format", "json")
    assert code == 0, out
    doc = json.loads(out)
    pool = next(n for n in doc["nodes"] if n["op"] == "nn.max_pool2d")
    assert pool["backend"] == "host"
    assert pool["reasons"] == {"testbackend": "dilation=[2, 2], dilation must = [1, 1]"}
    relu = next(n for n in doc["nodes"] if n["op"] == "nn.relu")
    assert relu["backend"] == "testbackend" and relu["partition"] == "testbackend_0"
    (part,) = doc["partitions"]
    assert set(part) >= {"name", "backend", "nodes", "inputs", "outputs", "macs"}


def test_compile_run_inspect_cli(tmp_path):
    from accel.models import default_model_path

    fp32 = default_model_path(quantized=False)
    code, out = _cli("compile", str(fp32), "--backends", "testbackend", "--report", "r.html", cwd=tmp_path)
    assert code == 0, out
    artifact = tmp_path / (fp32.stem + ".accel")
    assert artifact.exists() and (tmp_path / "r.html").exists()
    assert "testbackend" in out and "wrote" in out
    code, out = _cli("run", str(artifact), "-n", "3", cwd=tmp_path)
    assert code == 0 and "partition(s)" in out
    x = np.zeros((1, 1, 8, 8), np.float32)
    np.save(tmp_path / "x.npy", x)
    code, out = _cli("run", str(artifact), "-i", "image=x.npy", "-o", "o.npz", cwd=tmp_path)
    assert code == 0
    got = np.load(tmp_path / "o.npz")["probabilities"]
    want = ReferenceExecutor(accel.import_onnx(fp32)).run({"image": x})["probabilities"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    code, out = _cli("inspect", str(artifact), "--format", "html")
    assert code == 0 and out.lstrip().startswith("<!DOCTYPE html>")
    code, out = _cli("inspect", str(artifact))
    assert code == 0 and "testbackend" in out


def test_target_file_with_bad_option(tmp_path):
    t = tmp_path / "t.json"
    t.write_text(json.dumps({"devices": [{"kind": "testbackend", "options": {"turbo": True}}]}))
    code, msg = _cli("compile", "--target", str(t), cwd=tmp_path)
    assert code == 2 and "turbo: unknown option" in msg


def test_testbackend_is_a_plain_backend_class():
    assert issubclass(TestBackend, Backend)


def _big_endian(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder(">"))


def _misaligned(a: np.ndarray) -> np.ndarray:
    buf = np.empty(a.nbytes + 1, np.uint8)
    out = np.frombuffer(buf.data, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("odd", [_big_endian, _misaligned])
def test_compiled_runtime_takes_big_endian_and_misaligned_inputs(odd):
    g = _exact_graph()
    exe = accel.compile(g, "testbackend").executable()
    feeds = _feeds(5)
    given = {k: odd(v) for k, v in feeds.items()}
    assert all(not v.dtype.isnative or not v.flags.aligned for v in given.values())
    want = ReferenceExecutor(g).run(feeds)
    for got in (exe.run(given), accel.execute(g, given)):
        for k in want:
            assert got[k].dtype.isnative
            np.testing.assert_array_equal(got[k], want[k])
