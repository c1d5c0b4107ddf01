"""Load ONNX external tensor data safely, confined to the model's folder.

ONNX lets a tensor keep its bytes in a side file (``data_location = EXTERNAL``
with ``location``, ``offset`` and ``length`` entries). onnx's own loader has
had path-traversal holes (CVE-2022-25882: ``../`` in ``location``;
CVE-2024-27318: the bypass through ``a/../../x``), so accel never calls it.
Here every reference is checked before a single byte is read:

- ``location`` is relative, has no ``..`` component and no NUL byte;
- neither the file nor any folder between it and the base folder is a
  symbolic link, and the file is a regular file with a single hard link;
- ``offset`` and ``length`` are non-negative integers inside the file, and
  the range is exactly as long as the tensor's type and shape require.

The file is then opened with ``O_NOFOLLOW`` and re-checked through its open
descriptor (same inode as the one checked), so a swap between check and read
is caught too.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, helper

from accel.errors import ExternalDataError

__all__ = [
    "ExternalRef",
    "check_tensor",
    "expected_nbytes",
    "external_tensors",
    "load_external_data",
    "resolve_location",
    "scan_graph",
    "subgraph_depth",
    "uses_external_data",
]


@dataclass(frozen=True)
class ExternalRef:
    """A checked external-data reference: the file and the byte range to read."""

    tensor: str
    path: Path
    offset: int
    length: int
    st_dev: int
    st_ino: int


def _attr_graphs(attr: AttributeProto) -> list[GraphProto]:
    graphs = [attr.g] if attr.HasField("g") else []
    return [*graphs, *attr.graphs]


def _attr_tensors(attr: AttributeProto) -> Iterator[TensorProto]:
    if attr.HasField("t"):
        yield attr.t
    yield from attr.tensors
    sparse = [attr.sparse_tensor] if attr.HasField("sparse_tensor") else []
    for sp in [*sparse, *attr.sparse_tensors]:
        yield sp.values
        yield sp.indices


#: Attribute types whose value is read from a number or string field only (the importer reads an
#: attribute by its type, so a tensor or graph hidden in another field of one is never used).
_NUMBERS_OR_STRINGS = frozenset(
    {
        AttributeProto.FLOAT,
        AttributeProto.INT,
        AttributeProto.STRING,
        AttributeProto.FLOATS,
        AttributeProto.INTS,
        AttributeProto.STRINGS,
    }
)


def scan_graph(graph: GraphProto) -> tuple[int, list[TensorProto]]:
    """How deeply ``graph`` nests subgraphs (0: none) and every tensor of it and its
    subgraphs, in one walk without recursion (each attribute of a large model is
    visited once for both: reading a node's attribute list is what costs)."""
    tensors: list[TensorProto] = []
    deepest = 0
    pending = [(graph, 0)]
    while pending:
        g, depth = pending.pop()
        deepest = max(deepest, depth)
        tensors.extend(g.initializer)
        for sparse in g.sparse_initializer:
            tensors.append(sparse.values)
            tensors.append(sparse.indices)
        for node in g.node:
            for attr in node.attribute:
                # most attributes hold numbers or strings, which their type says: only those
                # typed as tensors or graphs (or not typed) are looked into
                if attr.type in _NUMBERS_OR_STRINGS:
                    continue
                if attr.HasField("t") or attr.tensors or attr.HasField("sparse_tensor") or attr.sparse_tensors:
                    tensors.extend(_attr_tensors(attr))
                if attr.HasField("g") or attr.graphs:
                    pending.extend((sub, depth + 1) for sub in _attr_graphs(attr))
    return deepest, tensors


def _graph_tensors(graph: GraphProto) -> list[TensorProto]:
    """Every tensor of ``graph`` and its subgraphs, walked without recursion."""
    return scan_graph(graph)[1]


def subgraph_depth(graph: GraphProto) -> int:
    """How deeply ``graph`` nests subgraphs (0: none), measured without recursion."""
    deepest = 0
    pending = [(graph, 0)]
    while pending:
        g, depth = pending.pop()
        deepest = max(deepest, depth)
        for node in g.node:
            for attr in node.attribute:
                if attr.HasField("g") or attr.graphs:
                    pending.extend((sub, depth + 1) for sub in _attr_graphs(attr))
    return deepest


def external_tensors(model: ModelProto, graph_tensors: list[TensorProto] | None = None) -> list[TensorProto]:
    """Every tensor of the model (graph, subgraphs, functions) stored externally.

    ``graph_tensors``: the tensors of the model's graph as :func:`scan_graph` gave them
    (saves walking the graph again)."""
    tensors = list(_graph_tensors(model.graph) if graph_tensors is None else graph_tensors)
    for fn in model.functions:
        for node in fn.node:
            for attr in node.attribute:
                tensors.extend(_attr_tensors(attr))
                for g in _attr_graphs(attr):
                    tensors.extend(_graph_tensors(g))
    return [t for t in tensors if t.data_location == TensorProto.EXTERNAL]


#: Element types stored two to a byte.
_PACKED_4BIT = {getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(TensorProto, n)}


def expected_nbytes(tensor: TensorProto) -> int:
    """The number of raw bytes ``tensor``'s type and dims call for (what its external data must hold)."""
    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims):
        raise ExternalDataError(f"tensor {tensor.name!r} has a negative dimension in {dims}")
    n = 1
    for d in dims:
        n *= d
    if tensor.data_type in _PACKED_4BIT:
        return (n + 1) // 2
    if tensor.data_type == TensorProto.STRING:
        raise ExternalDataError(f"tensor {tensor.name!r}: string tensors cannot keep their data externally")
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        raise ExternalDataError(
            f"tensor {tensor.name!r} has element type {tensor.data_type}, which has no known size"
        ) from None
    return n * itemsize


def _entries(tensor: TensorProto) -> dict[str, str]:
    entries: dict[str, str] = {}
    for kv in tensor.external_data:
        if kv.key in entries:
            raise ExternalDataError(f"tensor {tensor.name!r}: external data key {kv.key!r} given twice")
        entries[kv.key] = kv.value
    return entries


def _int_entry(tensor: TensorProto, entries: dict[str, str], key: str) -> int | None:
    raw = entries.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ExternalDataError(f"tensor {tensor.name!r}: external data {key} {raw!r} is not an integer") from None
    if value < 0:
        raise ExternalDataError(f"tensor {tensor.name!r}: external data {key} {value} is negative")
    return value


def resolve_location(location: str, base_dir: str | os.PathLike[str], *, tensor: str = "?") -> Path:
    """The file ``location`` names inside ``base_dir``; refuse anything that could leave it.

    Checks the path text first (absolute, ``..``, drive letters, NUL), then
    every existing component on disk (no symlink anywhere below ``base_dir``).
    Returns the path of a regular, singly linked file.
    """
    where = f"tensor {tensor!r}: external data location {location!r}"
    if not location:
        raise ExternalDataError(f"tensor {tensor!r}: external data has no location")
    if "\x00" in location:
        raise ExternalDataError(f"{where} contains a NUL byte")
    # Backslashes are separators on Windows; treat them as such everywhere so a
    # model that is safe here is safe there too.
    text = location.replace("\\", "/")
    if text.startswith("/") or PurePosixPath(text).is_absolute() or (len(text) >= 2 and text[1] == ":"):
        raise ExternalDataError(f"{where} is an absolute path; it must be relative to the model's folder")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise ExternalDataError(f"{where} has a '..' component; it must stay inside the model's folder")
    if not parts:
        raise ExternalDataError(f"{where} does not name a file")

    base = Path(os.path.realpath(base_dir))
    try:
        base_st = os.stat(base)
    except OSError as exc:
        raise ExternalDataError(f"{where}: model folder {str(base)!r} cannot be read ({exc.strerror})") from None
    if not stat.S_ISDIR(base_st.st_mode):
        raise ExternalDataError(f"{where}: model folder {str(base)!r} is not a folder")

    current = base
    for i, part in enumerate(parts):
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            raise ExternalDataError(f"{where}: file {str(current)!r} does not exist") from None
        except OSError as exc:
            raise ExternalDataError(f"{where}: cannot stat {str(current)!r} ({exc.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise ExternalDataError(f"{where}: {str(current)!r} is a symbolic link; links are refused")
        last = i == len(parts) - 1
        if not last and not stat.S_ISDIR(st.st_mode):
            raise ExternalDataError(f"{where}: {str(current)!r} is not a folder")
        if last:
            if not stat.S_ISREG(st.st_mode):
                raise ExternalDataError(f"{where}: {str(current)!r} is not a regular file")
            if st.st_nlink > 1:
                raise ExternalDataError(
                    f"{where}: {str(current)!r} has {st.st_nlink} hard links; hard-linked data files are refused"
                )
    # Belt and braces: the resolved path must be below the base folder.
    real = Path(os.path.realpath(current))
    if real != current or base not in real.parents:
        raise ExternalDataError(f"{where} resolves outside the model's folder")
    return current


def check_tensor(tensor: TensorProto, base_dir: str | os.PathLike[str]) -> ExternalRef:
    """Check one external reference (path, kind of file, byte range) without reading it."""
    entries = _entries(tensor)
    unknown = sorted(set(entries) - {"location", "offset", "length", "checksum", "basepath"})
    if unknown:
        raise ExternalDataError(f"tensor {tensor.name!r}: unknown external data key(s) {', '.join(unknown)}")
    if "basepath" in entries:
        raise ExternalDataError(
            f"tensor {tensor.name!r}: external data 'basepath' is not accepted; use 'location' only"
        )
    path = resolve_location(entries.get("location", ""), base_dir, tensor=tensor.name)
    offset = _int_entry(tensor, entries, "offset") or 0
    length = _int_entry(tensor, entries, "length")
    st = os.lstat(path)
    size = st.st_size
    if offset > size:
        raise ExternalDataError(
            f"tensor {tensor.name!r}: external data offset {offset} is beyond the end of {path.name!r} ({size} bytes)"
        )
    if length is None:
        length = size - offset
    if offset + length > size:
        raise ExternalDataError(
            f"tensor {tensor.name!r}: external data range [{offset}, {offset + length}) is beyond the end "
            f"of {path.name!r} ({size} bytes)"
        )
    # Compared before a byte is read: a 4-float tensor must not pull in a whole multi-GB file.
    need = expected_nbytes(tensor)
    if length != need:
        raise ExternalDataError(
            f"tensor {tensor.name!r}: its type and shape need {need} bytes but its external data in "
            f"{path.name!r} is {length} bytes long"
        )
    return ExternalRef(tensor.name, path, offset, length, st.st_dev, st.st_ino)


def _read(ref: ExternalRef) -> bytes:
    # O_NONBLOCK: a FIFO swapped in after the check would otherwise block the open (fstat refuses it below)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(ref.path, flags)
    except OSError as exc:
        raise ExternalDataError(f"tensor {ref.tensor!r}: cannot open {ref.path.name!r} ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        # The file checked must be the file opened (no swap in between).
        if (st.st_dev, st.st_ino) != (ref.st_dev, ref.st_ino) or not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise ExternalDataError(f"tensor {ref.tensor!r}: {ref.path.name!r} changed while it was being loaded")
        if ref.offset + ref.length > st.st_size:
            raise ExternalDataError(f"tensor {ref.tensor!r}: {ref.path.name!r} shrank while it was being loaded")
        chunks = []
        remaining = ref.length
        os.lseek(fd, ref.offset, os.SEEK_SET)
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 26))
            if not chunk:
                raise ExternalDataError(f"tensor {ref.tensor!r}: unexpected end of {ref.path.name!r}")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_external_data(
    model: ModelProto,
    base_dir: str | os.PathLike[str] | None,
    *,
    graph_tensors: list[TensorProto] | None = None,
) -> int:
    """Inline every external tensor of ``model`` (in place); return how many were loaded.

    All references are checked first; nothing is read unless every one of them
    is acceptable. ``base_dir`` is the folder the locations are relative to;
    ``None`` is refused when the model has external data. ``graph_tensors``: as
    for :func:`external_tensors`.
    """
    tensors = external_tensors(model, graph_tensors)
    if not tensors:
        return 0
    if base_dir is None:
        raise ExternalDataError(
            f"tensor {tensors[0].name!r} keeps its data in an external file but the model was not given "
            "as a path: pass base_dir= (the folder holding the data files)"
        )
    refs = [check_tensor(t, base_dir) for t in tensors]
    for tensor, ref in zip(tensors, refs, strict=False):
        tensor.raw_data = _read(ref)
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT
    return len(tensors)


def uses_external_data(model: ModelProto) -> bool:
    """Whether any tensor of ``model`` is stored externally."""
    return bool(external_tensors(model))
