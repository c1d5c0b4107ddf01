"""The ``.accel`` artifact: one zip file holding a compiled model (DESIGN §7).

Members::

    manifest.json          Manifest (below): versions, target, backends, signature, sha256 of every member
    graph.json             the host graph (accel.serialize format); partitions are ``call`` nodes
    constants/<key>.npy    its constants (read with allow_pickle=False)
    partitions/<name>.bin  one blob per partition, in its backend's own format
    report.json            the partition report (Report.to_json: nodes and partitions by column)

Format version 2 writes the graph in version 2 of the graph document (types as
``[shape, dtype]``, empty keys left out) and the report by column; version 1
(the version 1 graph document, the report a dict per node) is read too.

Loading runs no code from the file: it checks the manifest, every member's
hash and every version first, then asks each backend's runtime to validate
its blobs. Saving writes a temporary file and renames it, so a failed save
leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import struct
import sys
import time
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from accel.abi import ARTIFACT_ABI_VERSIONS
from accel.backend import ABI_VERSION, Backend
from accel.errors import AccelError, ArtifactError
from accel.files import open_regular, physical_memory, read_regular, write_output
from accel.ir import CALL_OP, Graph, collector_paused
from accel.limits import load_json
from accel.report import Report
from accel.runtime import Executable, create_handle, resolve_threads
from accel.serialize import dump_json, graph_from_json, graph_to_json_bytes, load_npy, npy_bytes
from accel.target import CompositeTarget

FORMAT = "accel-artifact"
FORMAT_VERSION = 2
#: Format versions this accel-core reads.
READS_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
#: Largest member accepted when loading (4 GiB).
MAX_MEMBER_BYTES = 1 << 32


class BackendRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    distribution: str
    version: str
    abi_version: int


class TensorSignature(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    dtype: str
    shape: list[int]


class PartitionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    backend: str
    blob: str


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["accel-artifact"] = "accel-artifact"
    format_version: int = FORMAT_VERSION
    accel_core_version: str
    target: CompositeTarget
    backends: list[BackendRecord]
    inputs: list[TensorSignature]
    outputs: list[TensorSignature]
    partitions: list[PartitionRecord]
    #: sha256 (hex) of every other member.
    members: dict[str, str]


def _signature(graph: Graph, outputs: bool) -> list[TensorSignature]:
    values = graph.outputs if outputs else graph.inputs
    return [TensorSignature(name=v.name, dtype=v.type.dtype, shape=list(v.type.shape)) for v in values]


class Artifact:
    """A compiled model in memory: ``.save(path)``, ``.executable()``, ``.report``."""

    def __init__(
        self,
        graph: Graph,
        blobs: Mapping[str, bytes],
        target: CompositeTarget,
        backends: list[Backend],
        report: Report,
    ):
        self.graph = graph
        self.blobs = dict(blobs)
        self.target = target
        self.backends = backends
        self.report = report

    @property
    def partitions(self) -> list[tuple[str, str]]:
        """(partition name, backend) of every partition, in graph order."""
        return [(n.name, n.attrs["compiler"]) for n in self.graph.nodes if n.op == CALL_OP and "compiler" in n.attrs]

    def executable(self, threads: int | None = None) -> Executable:
        """Load every blob in its backend's runtime and plan the buffers.

        The partitions compute with ``threads`` threads; without it, ``ACCEL_NUM_THREADS`` or every available
        core (:func:`accel.runtime.resolve_threads`)."""
        count = resolve_threads(threads)
        if self.report.tuning is not None:
            import warnings

            from accel.tune import TunedElsewhereWarning, tuned_elsewhere

            note = tuned_elsewhere(self.report)
            if note is not None:
                warnings.warn(note, TunedElsewhereWarning, stacklevel=2)
        by_name = {b.name: b for b in self.backends}
        handles = {
            name: create_handle(by_name[backend], self.blobs[name], name, count) for name, backend in self.partitions
        }
        return Executable(self.graph, handles, count)

    def to_bytes(self) -> bytes:
        """The artifact file's bytes (what :meth:`save` writes)."""
        return b"".join(self._chunks())

    def _chunks(self) -> list[bytes]:
        """The file's bytes in pieces, in order: its members (made at once) and the zip's records."""
        with collector_paused():  # (many small objects: the graph and report documents)
            return self._zip_chunks()

    def _zip_chunks(self) -> list[bytes]:
        from accel import __version__

        members: dict[str, bytes] = {}
        members["graph.json"], arrays = graph_to_json_bytes(self.graph)
        headers: dict[tuple[str, tuple[int, ...]], bytes] = {}
        for key, arr in arrays.items():
            members[f"constants/{key}.npy"] = npy_bytes(arr, headers)
        records = []
        for name, backend in self.partitions:
            path = f"partitions/{name}.bin"
            members[path] = self.blobs[name]
            records.append(PartitionRecord(name=name, backend=backend, blob=path))
        members["report.json"] = dump_json(self.report.to_json(copy=False))  # (encoded at once: no copies)
        used = {b for _, b in self.partitions}
        manifest = Manifest(
            accel_core_version=__version__,
            target=self.target,
            backends=[
                BackendRecord(name=b.name, distribution=b.distribution, version=b.version, abi_version=ABI_VERSION)
                for b in self.backends
                if b.name in used
            ],
            inputs=_signature(self.graph, False),
            outputs=_signature(self.graph, True),
            partitions=records,
            members={k: hashlib.sha256(v).hexdigest() for k, v in members.items()},
        )
        return stored_zip_chunks([(MANIFEST, manifest.model_dump_json(indent=1).encode()), *members.items()])

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the artifact atomically (a temporary file renamed into place; see :mod:`accel.files`).

        Every member is made before the file is opened; the pieces are then written as they are, not
        joined into one copy of the whole file first."""
        chunks = self._chunks()
        return write_output(path, f"artifact {str(os.fspath(path))!r}", ArtifactError, lambda f: f.writelines(chunks))


# The zip structures stored_zip writes (APPNOTE.TXT 4.3; as zipfile's own struct formats)
_LOCAL = struct.Struct("<4s2B4HL2L2H")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_END = struct.Struct("<4s4H2LH")
_END64 = struct.Struct("<4sQ2H2L4Q")
_END64_LOCATOR = struct.Struct("<4sLQL")
_U32 = 0xFFFFFFFF
_ZIP64_LIMIT = (1 << 31) - 1  # (zipfile's: larger sizes and offsets are written in zip64 fields)


def stored_zip(members: list[tuple[str, bytes]]) -> bytes:
    """A zip file of ``members`` (name, bytes), each stored (not compressed), as
    :class:`zipfile.ZipFile` writes them with ``ZIP_STORED``: the same headers, the time of
    writing, zip64 offsets and end records past 65,535 members or 2 GiB. One pass over the members
    without zipfile's work per member, which is most of the time for an artifact of many small
    blobs; a member over 2 GiB (which needs zip64 sizes) is left to zipfile."""
    return b"".join(stored_zip_chunks(members))


def stored_zip_chunks(members: list[tuple[str, bytes]]) -> list[bytes]:
    """:func:`stored_zip`'s file in pieces (its records, and each member's bytes as given), to write
    one after the other without a copy of the whole file."""
    if any(len(data) > _ZIP64_LIMIT for _, data in members):
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
            for name, data in members:
                zf.writestr(name, data)
        return [out.getvalue()]
    now = time.localtime(time.time())
    dos_time = now.tm_hour << 11 | now.tm_min << 5 | now.tm_sec // 2
    dos_date = (now.tm_year - 1980) << 9 | now.tm_mon << 5 | now.tm_mday
    system = 0 if sys.platform == "win32" else 3
    attr = 0o600 << 16  # (zipfile.writestr's for a name)
    chunks: list[bytes] = []
    central: list[bytes] = []
    offset = 0
    for name, data in members:
        try:
            raw, flags = name.encode("ascii"), 0
        except UnicodeEncodeError:
            raw, flags = name.encode("utf-8"), 0x800
        crc, size = zlib.crc32(data), len(data)
        head = _LOCAL.pack(b"PK\x03\x04", 20, 0, flags, 0, dos_time, dos_date, crc, size, size, len(raw), 0)
        if offset <= _ZIP64_LIMIT:
            extra, version, at = b"", 20, offset
        else:  # the header's offset in a zip64 extra field
            extra, version, at = struct.pack("<HHQ", 1, 8, offset), 45, _U32
        entry = _CENTRAL.pack(
            b"PK\x01\x02", version, system, version, 0, flags, 0, dos_time, dos_date, crc, size, size,
            len(raw), len(extra), 0, 0, 0, attr, at,
        )  # fmt: skip
        central.append(entry + raw + extra)
        chunks += (head, raw, data)
        offset += len(head) + len(raw) + size
    directory = b"".join(central)
    count, start, length = len(members), offset, len(directory)
    chunks.append(directory)
    if count >= 0xFFFF or start > _ZIP64_LIMIT or length > _ZIP64_LIMIT:
        chunks.append(_END64.pack(b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, length, start))
        chunks.append(_END64_LOCATOR.pack(b"PK\x06\x07", 0, start + length, 1))
        count, start, length = min(count, 0xFFFF), min(start, _U32), min(length, _U32)
    chunks.append(_END.pack(b"PK\x05\x06", 0, 0, count, count, length, start, 0))
    return chunks


def read_artifact(path: str | os.PathLike[str], *, backends: Mapping[str, type[Backend]] | None = None) -> Artifact:
    """Read and verify an artifact; every problem is an :class:`ArtifactError` (or a plugin error)."""
    path = Path(path)
    data = read_regular(
        path, f"artifact {str(path)!r}", ArtifactError, limit=physical_memory(), why="of this machine's memory"
    )
    return artifact_from_bytes(data, where=str(path), backends=backends)


def artifact_from_bytes(
    data: bytes, *, where: str = "artifact", backends: Mapping[str, type[Backend]] | None = None
) -> Artifact:
    """The artifact ``data`` holds, verified (:func:`read_artifact` of bytes)."""
    with collector_paused():  # (many small objects: the graph and report rebuilt)
        return _artifact_from_bytes(data, where, backends)


def _artifact_from_bytes(data: bytes, where: str, backends: Mapping[str, type[Backend]] | None) -> Artifact:
    members = _read_members(data, where)
    try:
        manifest = Manifest.model_validate_json(members.pop(MANIFEST))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err.get("loc", ()))
        raise ArtifactError(f"{where}: manifest.json is invalid at {loc or 'top level'}: {err.get('msg')}") from None
    if manifest.format_version not in READS_VERSIONS:
        raise ArtifactError(
            f"{where}: artifact format version {manifest.format_version}; this accel-core reads versions "
            f"{', '.join(map(str, READS_VERSIONS[:-1]))} and {READS_VERSIONS[-1]}"
        )
    listed, present = set(manifest.members), set(members)
    if listed != present:
        extra = sorted(present - listed)
        missing = sorted(listed - present)
        what = f"member {extra[0]!r} is not listed in the manifest" if extra else f"member {missing[0]!r} is missing"
        raise ArtifactError(f"{where}: {what}")
    for name, digest in manifest.members.items():
        if hashlib.sha256(members[name]).hexdigest() != digest:
            raise ArtifactError(
                f"{where}: member {name!r} does not match its sha256 in the manifest (corrupted or edited)"
            )
    for rec in manifest.backends:
        if rec.abi_version not in ARTIFACT_ABI_VERSIONS:
            raise ArtifactError(
                f"{where}: built for runtime ABI {rec.abi_version} (backend {rec.name} {rec.version}); "
                f"this accel-core speaks ABI {ABI_VERSION} and reads artifacts of ABI "
                f"{', '.join(map(str, sorted(ARTIFACT_ABI_VERSIONS)))}: recompile the model"
            )
    # Backends: every one the artifact uses must be installed and usable.
    from accel.plugins import get_backend, install_hint, statuses

    dists = {r.name: r.distribution for r in manifest.backends}
    instances: list[Backend] = []
    for i, device in enumerate(manifest.target.devices):
        if device.kind not in dists:
            continue  # listed in the target but took no partition
        try:
            cls = get_backend(device.kind, backends)
        except AccelError as exc:
            # Only a backend that is not installed at all is helped by installing it; a disabled or
            # broken one says what is wrong with it (accel backends --verbose shows more).
            dist = dists.get(device.kind)
            absent = backends is not None or all(s.name != device.kind for s in statuses())
            needed = absent and "pip install" not in str(exc)
            hint = f"; {install_hint(device.kind, dist)}" if dist and needed else ""
            raise type(exc)(f"{where}: {exc}{hint}") from None
        try:
            instances.append(cls(device.options))
        except ValidationError as exc:
            raise ArtifactError(
                f"{where}: devices[{i}] ({device.kind}) options are invalid: {exc.errors()[0]['msg']}"
            ) from None
    for required in ("graph.json", "report.json"):
        if required not in members:
            raise ArtifactError(f"{where}: member {required!r} is missing")
    try:
        # graph_from_json bounds the graph's own nesting (bodies, attributes) as it decodes
        doc = load_json(members["graph.json"], f"{where}: graph.json", ArtifactError, max_depth=None)
        arrays = {}
        for name, blob in members.items():
            if name.startswith("constants/") and name.endswith(".npy"):
                arrays[name[len("constants/") : -len(".npy")]] = load_npy(
                    blob, f"{where}: member {name!r}", ArtifactError
                )
        graph = graph_from_json(doc, arrays)
        report = Report.from_json(load_json(members["report.json"], f"{where}: report.json", ArtifactError))
    except ArtifactError:
        raise
    except AccelError as exc:
        raise ArtifactError(f"{where}: the host graph cannot be read: {exc}") from None
    except Exception as exc:  # any other failure to decode a member is still a malformed artifact
        raise ArtifactError(f"{where}: a member cannot be read: {type(exc).__name__}: {exc}") from None
    blobs = {}
    calls = {n.name: n.attrs.get("compiler") for n in graph.nodes if n.op == CALL_OP and "compiler" in n.attrs}
    for part in manifest.partitions:
        if part.backend not in dists or part.backend not in manifest.target.backend_names():
            raise ArtifactError(
                f"{where}: partition {part.name!r} runs on {part.backend!r}, which the manifest's target and "
                "backend list do not both name"
            )
        if calls.get(part.name) != part.backend:
            raise ArtifactError(f"{where}: partition {part.name!r} ({part.backend}) is not in the host graph")
        if part.blob not in members or not part.blob.startswith("partitions/"):
            raise ArtifactError(f"{where}: partition {part.name!r} names blob {part.blob!r}, which is not a member")
        if part.name in blobs:
            raise ArtifactError(f"{where}: partition {part.name!r} is listed twice in the manifest")
        blobs[part.name] = members[part.blob]
    if set(calls) != set(blobs):
        raise ArtifactError(f"{where}: the host graph has partitions without blobs")
    sig_in, sig_out = _signature(graph, False), _signature(graph, True)
    if sig_in != manifest.inputs or sig_out != manifest.outputs:
        raise ArtifactError(f"{where}: the host graph's signature differs from the manifest's")
    return Artifact(graph, blobs, manifest.target, instances, report)


def _read_members(data: bytes, where: str) -> dict[str, bytes]:
    """Every member's bytes. Sizes come from the zip's directory, so each is checked against what the
    writer makes (stored, not compressed: a member is exactly as large as its bytes in the file)
    before it is read; any defect of the container is an :class:`ArtifactError`."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ArtifactError(f"{where} is not an accel artifact (not a zip file, or truncated)") from None
    except Exception as exc:  # NotImplementedError (zip version), ValueError, struct errors: a damaged header
        raise ArtifactError(f"{where} is a damaged zip file ({type(exc).__name__}: {exc})") from None
    members: dict[str, bytes] = {}
    with zf:
        for info in zf.infolist():
            name = info.filename
            if info.file_size > MAX_MEMBER_BYTES:
                raise ArtifactError(f"{where}: member {name!r} is too large ({info.file_size} bytes)")
            if info.compress_type != zipfile.ZIP_STORED:
                raise ArtifactError(
                    f"{where}: member {name!r} is compressed; accel writes artifact members stored, "
                    "so this file was made or changed by something else"
                )
            if info.compress_size != info.file_size:
                raise ArtifactError(
                    f"{where}: member {name!r} is stored in {info.compress_size} bytes but declares "
                    f"{info.file_size} (a damaged or edited zip directory)"
                )
            if info.header_offset + info.file_size > len(data):
                raise ArtifactError(
                    f"{where}: member {name!r} declares {info.file_size} bytes past the end of the file"
                )
            if name in members:
                raise ArtifactError(f"{where}: member {name!r} appears twice")
            try:
                members[name] = zf.read(info)
            except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
                raise ArtifactError(f"{where}: member {name!r} is corrupted ({exc})") from None
            except Exception as exc:  # NotImplementedError, zlib errors and the like: still a corrupt file
                raise ArtifactError(f"{where}: member {name!r} cannot be read ({type(exc).__name__}: {exc})") from None
    if MANIFEST not in members:
        raise ArtifactError(f"{where} is not an accel artifact (no {MANIFEST})")
    return members


def load(path: str | os.PathLike[str], threads: int | None = None) -> Executable:
    """Read an artifact and make it runnable: ``accel.load(path).run({name: array})``.

    Its partitions compute with ``threads`` threads; without it, ``ACCEL_NUM_THREADS`` or every available core.
    """
    return read_artifact(path).executable(threads)


def is_artifact(path: str | os.PathLike[str] | bytes) -> bool:
    """Whether ``path`` (or these bytes) looks like an artifact (a zip with a manifest), without verifying it.

    A path that is not a regular file (a folder, a pipe, a device) is not one, and is not opened.
    """
    with contextlib.ExitStack() as stack:
        return _is_artifact(path, stack)


def _is_artifact(path: str | os.PathLike[str] | bytes, stack: contextlib.ExitStack) -> bool:
    try:
        if isinstance(path, bytes):
            source: Any = io.BytesIO(path)
        else:
            source = stack.enter_context(open_regular(path, "", ArtifactError))
        with zipfile.ZipFile(source) as zf:
            return MANIFEST in zf.namelist()
    except Exception:  # any file that does not open as a zip is not an artifact
        return False


__all__ = ["Artifact", "Manifest", "artifact_from_bytes", "is_artifact", "load", "read_artifact"]
