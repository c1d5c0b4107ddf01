"""An artifact is untrusted input: every edit to it is either refused with an ArtifactError or
changes nothing that loads. Edits here keep the zip well formed (valid CRCs), so only the
manifest's hashes and accel's own checks stand between them and a loaded model."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from backend_fakes import FakeBackend

import accel
from accel.artifact import Artifact, artifact_from_bytes, read_artifact
from accel.builder import GraphBuilder
from accel.errors import AccelError, ArtifactError
from accel.serialize import graph_to_json

AVAILABLE = {"fake": FakeBackend}


def _artifact() -> Artifact:
    """One of each member kind: graph, report, constants (two), partitions (two), manifest."""
    b = GraphBuilder(x=(2, 3, 4, 4), y=(2, 3, 4, 4))
    s = b.op("nn.relu", b.op("add", b.x["x"], b.x["y"]))
    h = b.op("sigmoid", b.op("multiply", s, b.const(np.full((1, 3, 1, 1), 0.5, np.float32))))
    t = b.op("abs", b.op("add", h, s))
    u = b.op("add", b.op("reshape", t, newshape=(2, 48)), b.const(np.arange(48, dtype=np.float32)))
    art = accel.compile(b.done(b.op("tanh", u), t), ["fake"], available=AVAILABLE)
    assert len(art.partitions) >= 2
    return art


@pytest.fixture(scope="module")
def data() -> bytes:
    return _artifact().to_bytes()


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def _rezip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, blob in members.items():
            zf.writestr(name, blob)
    return out.getvalue()


def _edited(data: bytes, edit: Callable[[dict[str, bytes]], None], *, rehash: bool = False) -> bytes:
    """``data`` with its members edited; ``rehash`` also rewrites the manifest's sha256 of each member."""
    members = _members(data)
    edit(members)
    if rehash:
        manifest = json.loads(members["manifest.json"])
        manifest["members"] = {k: hashlib.sha256(v).hexdigest() for k, v in members.items() if k != "manifest.json"}
        members["manifest.json"] = json.dumps(manifest).encode()
    return _rezip(members)


def _fingerprint(art: Artifact) -> tuple:
    """Everything a loaded artifact is made of, in comparable form."""
    doc, arrays = graph_to_json(art.graph)
    return (
        json.dumps(doc, sort_keys=True),
        {k: (v.dtype.str, v.shape, v.tobytes()) for k, v in arrays.items()},
        art.blobs,
        json.dumps(art.report.to_json(), sort_keys=True),
        art.target.model_dump_json(),
        [(b.name, b.version) for b in art.backends],
    )


def _load(data: bytes) -> Artifact:
    return artifact_from_bytes(data, backends=AVAILABLE)


def test_every_member_kind_is_hash_checked(data: bytes) -> None:
    members = _members(data)
    kinds = {name.split("/")[0] for name in members if name != "manifest.json"}
    assert kinds == {"graph.json", "report.json", "constants", "partitions"}
    for name, blob in members.items():
        if name == "manifest.json":
            continue
        # a change that keeps the member valid of its kind: JSON stays JSON, an .npy stays an .npy
        if name.endswith(".json"):
            changed = blob + b" "
        elif name.endswith(".npy"):
            changed = blob[:-1] + bytes([blob[-1] ^ 0x01])
        else:
            changed = blob.replace(b"relu", b"abs ") if b"relu" in blob else blob + b" "
        assert changed != blob

        def edit(m: dict[str, bytes], name: str = name, changed: bytes = changed) -> None:
            m[name] = changed

        with pytest.raises(ArtifactError, match=rf"member '{name}' does not match its sha256"):
            _load(_edited(data, edit))


def test_every_flipped_byte_is_refused_or_changes_nothing(data: bytes) -> None:
    """Flip each byte of the file in turn: a flip that loads must load exactly the original."""
    want = _fingerprint(_load(data))
    refused = accepted = 0
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x40
        try:
            got = _load(bytes(bad))
        except ArtifactError:
            refused += 1
            continue
        accepted += 1
        assert _fingerprint(got) == want, f"a flip at byte {pos} changed what loads"
    # headers' timestamps and attribute bytes may be harmless; members' bytes never are
    assert refused > 0.9 * len(data), (refused, accepted)


@pytest.mark.parametrize("value", [0x00, 0xFF, 0x7F])
def test_zip_header_edits_are_artifact_errors(data: bytes, value: int) -> None:
    """Set each byte of every local header, the central directory and its end record to ``value``:
    NotImplementedError (zip version, compression method), struct errors and the like all end as
    ArtifactError, or the artifact loads unchanged."""
    want = _fingerprint(_load(data))
    positions: list[int] = []
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
            positions += range(info.header_offset, info.header_offset + 30 + name_len + extra_len)
        central = data.rindex(b"PK\x01\x02", 0, data.rindex(b"PK\x05\x06"))
        first_central = min(data.index(b"PK\x01\x02"), central)
    positions += range(first_central, len(data))
    for pos in positions:
        if data[pos] == value:
            continue
        bad = bytearray(data)
        bad[pos] = value
        try:
            got = _load(bytes(bad))
        except ArtifactError:
            continue
        except Exception as exc:  # the point: nothing but ArtifactError may escape
            pytest.fail(f"byte {pos} set to {value:#x}: {type(exc).__name__}: {exc}")
        assert _fingerprint(got) == want, f"byte {pos} set to {value:#x} changed what loads"


def test_manifest_partition_naming_an_absent_member(data: bytes) -> None:
    def edit(m: dict[str, bytes]) -> None:
        manifest = json.loads(m["manifest.json"])
        manifest["partitions"][0]["blob"] = "partitions/nowhere.bin"
        m["manifest.json"] = json.dumps(manifest).encode()

    with pytest.raises(ArtifactError, match=r"names blob 'partitions/nowhere.bin', which is not a member"):
        _load(_edited(data, edit))


def test_manifest_partition_pointing_at_another_kind_of_member(data: bytes) -> None:
    def edit(m: dict[str, bytes]) -> None:
        manifest = json.loads(m["manifest.json"])
        manifest["partitions"][0]["blob"] = "graph.json"
        m["manifest.json"] = json.dumps(manifest).encode()

    with pytest.raises(ArtifactError, match="which is not a member"):
        _load(_edited(data, edit))


def test_missing_graph_member_is_named(data: bytes) -> None:
    def edit(m: dict[str, bytes]) -> None:
        del m["graph.json"]
        manifest = json.loads(m["manifest.json"])
        del manifest["members"]["graph.json"]
        m["manifest.json"] = json.dumps(manifest).encode()

    with pytest.raises(ArtifactError, match=r"member 'graph\.json' is missing"):
        _load(_edited(data, edit))


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _first_constant(members: dict[str, bytes]) -> str:
    return next(k for k in sorted(members) if k.startswith("constants/"))


@pytest.mark.parametrize(
    "header,text",
    [
        (_npy_header((1 << 40,)), "declares"),  # 4 TiB declared, a few bytes present
        (_npy_header((1 << 20, 1 << 20)), "declares"),
        (_npy_header((3,), "|O"), "not an IR constant"),  # object arrays would need pickle
        (_npy_header((3,), "<c8"), "not an IR constant"),
        (b"\x93NUMPY\x03\x00garbage", "not a valid .npy"),
        (b"not an npy file at all", "not a valid .npy"),
    ],
)
def test_npy_member_header_checked_before_loading(data: bytes, header: bytes, text: str) -> None:
    """Even with the manifest's hash recomputed (so only the header check stands), a member that
    declares more than it holds is refused before its memory is taken."""

    def edit(m: dict[str, bytes]) -> None:
        m[_first_constant(m)] = header + b"\x00" * 16

    with pytest.raises(ArtifactError, match=text) as exc:
        _load(_edited(data, edit, rehash=True))
    assert "\n" not in str(exc.value)


def test_npy_header_seen_before_still_checks_the_data() -> None:
    """Parsed headers are remembered by their bytes; a blob of a known header is still held to the
    byte count it declares, and a header differing by one byte is parsed on its own."""
    from accel.serialize import load_npy

    header = _npy_header((2, 3))
    good = header + np.arange(6, dtype="<f4").tobytes()
    for _ in range(2):
        np.testing.assert_array_equal(load_npy(good, "a"), np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(ArtifactError, match="declares"):
        load_npy(good[:-4], "a", ArtifactError)
    with pytest.raises(ArtifactError, match="not an IR constant"):
        load_npy(_npy_header((2, 3), "|O") + b"\x00" * 48, "a", ArtifactError)
    other = header.replace(b"(2, 3)", b"(3, 2)")
    assert len(other) == len(header)
    np.testing.assert_array_equal(
        load_npy(other + np.arange(6, dtype="<f4").tobytes(), "a"), np.arange(6, dtype=np.float32).reshape(3, 2)
    )


def test_big_endian_constant_loads_in_native_order(data: bytes) -> None:
    members = _members(data)
    name = _first_constant(members)
    arr = np.load(io.BytesIO(members[name]))
    buf = io.BytesIO()
    np.save(buf, arr.astype(arr.dtype.newbyteorder(">")))

    def edit(m: dict[str, bytes]) -> None:
        m[name] = buf.getvalue()

    art = _load(_edited(data, edit, rehash=True))
    consts = [v.const for v in art.graph.constants() if v.const is not None and v.const.shape == arr.shape]
    assert any(c.dtype.isnative and np.array_equal(c, arr) for c in consts)


@pytest.mark.parametrize("member", ["graph.json", "report.json"])
def test_deeply_nested_json_member(data: bytes, member: str) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000

    def edit(m: dict[str, bytes]) -> None:
        m[member] = deep

    with pytest.raises(ArtifactError, match="nested"):
        _load(_edited(data, edit, rehash=True))
    # nested just past the limit without reaching Python's recursion limit: refused as well
    from accel.limits import MAX_JSON_DEPTH

    def edit_attrs(m: dict[str, bytes]) -> None:
        doc = json.loads(m["graph.json"])
        doc["nodes"][0]["attrs"]["x"] = json.loads("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
        m["graph.json"] = json.dumps(doc).encode()

    if member == "graph.json":
        with pytest.raises(ArtifactError, match="nested more than"):
            _load(_edited(data, edit_attrs, rehash=True))


def test_compressed_member_is_refused(data: bytes) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, blob in _members(data).items():
            zf.writestr(name, blob)
    with pytest.raises(ArtifactError, match="compressed"):
        _load(out.getvalue())


def test_member_json_of_the_wrong_shape_is_an_artifact_error(data: bytes) -> None:
    for member, doc in [
        ("graph.json", b'{"format": "accel-graph", "nodes": 5}'),
        ("graph.json", b'"just a string"'),
        ("report.json", b"[1, 2, 3]"),
        ("report.json", b'{"target": 5}'),
        ("graph.json", b"\xff\xfe not utf-8"),
    ]:

        def edit(m: dict[str, bytes], member: str = member, doc: bytes = doc) -> None:
            m[member] = doc

        with pytest.raises(ArtifactError):
            _load(_edited(data, edit, rehash=True))


def test_saved_artifact_mode_follows_the_umask(tmp_path, data: bytes) -> None:  # type: ignore[no-untyped-def]
    import os

    art = _load(data)
    old = os.umask(0o022)
    try:
        path = art.save(tmp_path / "m.accel")
        assert (path.stat().st_mode & 0o777) == 0o644
        os.umask(0o077)
        path = art.save(tmp_path / "private.accel")
        assert (path.stat().st_mode & 0o777) == 0o600
    finally:
        os.umask(old)
    assert _fingerprint(read_artifact(tmp_path / "m.accel", backends=AVAILABLE)) == _fingerprint(art)


def test_nothing_but_artifact_errors_escape_for_random_garbage() -> None:
    rng = np.random.default_rng(0)
    for n in (0, 4, 22, 100, 1000):
        blob = b"PK\x03\x04" + rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        with pytest.raises(AccelError):
            _load(blob)


def _edit_graph_node(op: str, edit: Callable[[dict], None]) -> Callable[[dict[str, bytes]], None]:
    def apply(m: dict[str, bytes]) -> None:
        doc = json.loads(m["graph.json"])
        edit(next(n for n in doc["nodes"] if n["op"] == op))
        m["graph.json"] = json.dumps(doc).encode()

    return apply


def test_node_attributes_are_completed_or_refused_as_the_op_declares(data: bytes) -> None:
    # the reshape's newshape is required; a node written without it cannot reach a kernel
    missing = _edited(data, _edit_graph_node("reshape", lambda n: n["attrs"].clear()), rehash=True)
    with pytest.raises(ArtifactError) as exc:
        _load(missing)
    assert "missing required attribute 'newshape'" in str(exc.value)
    unknown = _edited(data, _edit_graph_node("reshape", lambda n: n["attrs"].update(colour=1)), rehash=True)
    with pytest.raises(ArtifactError, match=r"unknown attribute\(s\) colour"):
        _load(unknown)


def test_node_with_attributes_left_at_their_defaults_runs() -> None:
    b = GraphBuilder(x=(2, 5))
    art = accel.compile(b.done(b.op("nn.softmax", b.x["x"], axis=-1)))
    data = art.to_bytes()
    assert json.loads(_members(data)["graph.json"])["nodes"][0]["attrs"] == {"axis": -1}
    edited = _load(_edited(data, _edit_graph_node("nn.softmax", lambda n: n["attrs"].clear()), rehash=True))
    assert dict(edited.graph.nodes[0].attrs) == {"axis": -1}
    x = {"x": np.arange(10, dtype=np.float32).reshape(2, 5)}
    (got,) = edited.executable().run(x).values()
    (want,) = art.executable().run(x).values()
    np.testing.assert_array_equal(got, want)


def test_manifest_partition_on_a_backend_its_target_does_not_list(data: bytes) -> None:
    def edit(m: dict[str, bytes]) -> None:
        manifest = json.loads(m["manifest.json"])
        manifest["target"]["devices"] = []
        m["manifest.json"] = json.dumps(manifest).encode()

    with pytest.raises(ArtifactError, match="runs on 'fake', which the manifest's target and backend list"):
        _load(_edited(data, edit))


def test_graph_text_is_the_graph_document() -> None:
    """The graph member is written directly as text: exactly the document graph_to_json gives, encoded."""
    from accel.ir import Graph, QuantParams, TensorType, Value
    from accel.serialize import dump_json, graph_to_json_bytes

    art = _artifact()
    x = Value("x", TensorType((2, 3), "int8", QuantParams([0.5, 0.25, 0.125], [1, 2, 3], axis=1)))
    quantized = Graph([x], [], [])
    relu = quantized.new_node("nn.relu", [x], {})
    quantized.nodes, quantized.outputs = [relu], [relu.output]
    assert relu.output.type.quant is not None
    for graph in (art.graph, quantized):
        text, arrays = graph_to_json_bytes(graph)
        doc, want = graph_to_json(graph)
        assert text == dump_json(doc)
        assert list(arrays) == list(want) and all(arrays[k] is want[k] for k in want)


def _as_version_1(data: bytes) -> bytes:
    """``data`` rewritten as format version 1 wrote it: types as mappings, every key present, the
    report a dict per node and partition."""

    def graph(doc: dict) -> dict:
        def typ(t: list) -> dict:
            return {"shape": t[0], "dtype": t[1], "quant": t[2] if len(t) > 2 else None}

        out = {
            "name": doc["name"],
            "inputs": [{"name": v["name"], "type": typ(v["type"])} for v in doc["inputs"]],
            "outputs": doc["outputs"],
            "constants": [{**c, "type": typ(c["type"])} for c in doc.get("constants", [])],
            "nodes": [],
        }
        for n in doc["nodes"]:
            node = {
                "name": n["name"],
                "op": n["op"],
                "inputs": n["inputs"],
                "attrs": n.get("attrs", {}),
                "outputs": [{"name": v["name"], "type": typ(v["type"])} for v in n["outputs"]],
            }
            if "body" in n:
                node["body"] = graph(n["body"])
            out["nodes"].append(node)
        return out

    def edit(m: dict[str, bytes]) -> None:
        doc = json.loads(m["graph.json"])
        m["graph.json"] = json.dumps({"format": "accel-graph", "version": 1, **graph(doc)}).encode()
        report = json.loads(m["report.json"])
        for key in ("nodes", "partitions"):
            columns = report[key]
            report[key] = [dict(zip(columns, row)) for row in zip(*columns.values())]
        m["report.json"] = json.dumps(report).encode()
        manifest = json.loads(m["manifest.json"])
        manifest["format_version"] = 1
        m["manifest.json"] = json.dumps(manifest).encode()

    return _edited(data, edit, rehash=True)


def test_format_version_1_still_loads(data: bytes) -> None:
    old = _as_version_1(data)
    assert json.loads(_members(old)["manifest.json"])["format_version"] == 1
    assert _fingerprint(_load(old)) == _fingerprint(_load(data))


def test_report_columns_are_checked(data: bytes) -> None:
    for change in (
        lambda cols: cols.pop("op"),
        lambda cols: cols.update(colour=[1] * len(cols["name"])),
        lambda cols: cols["name"].pop(),
        lambda cols: cols.update(name="abc"),
    ):

        def edit(m: dict[str, bytes], change: Callable = change) -> None:
            report = json.loads(m["report.json"])
            change(report["nodes"])
            m["report.json"] = json.dumps(report).encode()

        with pytest.raises(ArtifactError, match=r"report\.json|cannot be read") as exc:
            _load(_edited(data, edit, rehash=True))
        assert "\n" not in str(exc.value)


def _zip_members(data: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.testzip() is None
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def test_stored_zip_is_what_zipfile_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    import accel.artifact as artifact_module
    from accel.artifact import stored_zip

    members = [("manifest.json", b"{}"), ("graph.json", b"[1]"), ("partitions/\u00e9t\u00e9_0.bin", bytes(range(256)))]
    members.append(("empty", b""))
    assert _zip_members(stored_zip(members)) == members
    with zipfile.ZipFile(io.BytesIO(stored_zip(members))) as zf:
        infos = zf.infolist()
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos)
        assert infos[2].flag_bits & 0x800 and not infos[0].flag_bits
    # more members than the end record counts: zip64 end records
    many = [(f"partitions/p{i}.bin", i.to_bytes(3, "little")) for i in range(70_000)]
    assert _zip_members(stored_zip(many)) == many
    # offsets past the limit (made small here): each in a zip64 extra field, and zip64 end records
    monkeypatch.setattr(artifact_module, "_ZIP64_LIMIT", 300)
    wide = [(f"m{i}", bytes([i]) * 100) for i in range(8)]
    assert _zip_members(stored_zip(wide)) == wide
    # a member over the limit is written by zipfile, with zip64 sizes
    large = [("a", b"x" * 50), ("b", b"y" * 400)]
    assert _zip_members(stored_zip(large)) == large


def test_save_writes_the_bytes_to_bytes_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """save() writes the zip's pieces one after the other: the file is to_bytes(), member for member
    and byte for byte (at one time of writing), and each member's bytes are written as they are."""
    import accel.artifact as artifact_module
    from accel.artifact import stored_zip, stored_zip_chunks

    members = [("manifest.json", b"{}"), ("partitions/p0.bin", bytes(range(256))), ("empty", b"")]
    chunks = stored_zip_chunks(members)
    assert b"".join(chunks) == stored_zip(members)
    assert any(c is members[1][1] for c in chunks)  # (not copied)
    monkeypatch.setattr(artifact_module.time, "time", lambda: 1_800_000_000.0)
    art = _artifact()
    path = art.save(tmp_path / "m.accel")
    assert path.read_bytes() == art.to_bytes()
    assert _zip_members(path.read_bytes())[0][0] == "manifest.json"
