"""Graphs to and from JSON + .npy (never pickle).

``graph_to_json`` gives a JSON-able document and the constant arrays it
references by key; ``graph_from_json`` rebuilds the graph from both.
``save_graph``/``load_graph`` put them in one zip file: ``graph.json`` plus
``constants/<key>.npy``, read back with ``allow_pickle=False``.

Document layout (``format: "accel-graph"``, ``version: 2``)::

    {"name": ..., "inputs": [{"name", "type"}], "outputs": ["name", ...],
     "constants": [{"name", "type", "data": key}]?,
     "nodes": [{"name", "op", "inputs": ["name", ...], "attrs": {...}?,
                "outputs": [{"name", "type"}], "body": <graph document>?}]}

Keys marked ``?`` are left out when empty (no constants, no attributes, no
body). A type is ``[shape, dtype]`` (``[[1, 64, 56, 56], "float32"]``), or
``[shape, dtype, {"scale": [...], "zero_point": [...], "axis": int | null}]``
for a quantized tensor.

Version 1 documents are read too: there a type is ``{"shape": [...],
"dtype": ..., "quant": {...} | null}`` and every key is present.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

import numpy as np
import pydantic_core

from accel.errors import AccelError, SerializationError
from accel.files import open_regular, write_output
from accel.ir import CALL_OP, DTYPES, Graph, Node, QuantParams, TensorType, Value
from accel.limits import MAX_JSON_DEPTH, check_depth, json_depth, load_json
from accel.ops.registry import complete_attrs, get_op

FORMAT = "accel-graph"
VERSION = 2
#: Document versions :func:`graph_from_json` reads.
READS = (1, 2)
#: Largest total of member sizes :func:`load_graph` accepts (16 GiB).
MAX_GRAPH_FILE_BYTES = 1 << 34


def type_to_json(t: TensorType) -> list[Any]:
    """``t`` as a document writes it: ``[shape, dtype]``, with the quantization parameters third."""
    if t.quant is None:
        return [list(t.shape), t.dtype]
    q = {
        "scale": t.quant.scale.reshape(-1).tolist(),
        "zero_point": t.quant.zero_point.reshape(-1).tolist(),
        "axis": t.quant.axis,
    }
    return [list(t.shape), t.dtype, q]


def type_from_json(d: Any, seen: dict[tuple[Any, ...], TensorType] | None = None) -> TensorType:
    """The type ``d`` describes (either version's form). ``seen`` remembers unquantized types by
    shape and dtype, so that a document's many values of a few types share them (each is checked once)."""
    if type(d) is list:
        if len(d) == 2:
            shape, dtype = d
            q = None
        elif len(d) == 3:
            shape, dtype, q = d
            if q is None:
                raise SerializationError(f"invalid type {d!r}: the third item is the quantization parameters")
        else:
            raise SerializationError(f"invalid type {d!r}: expected [shape, dtype] or [shape, dtype, quant]")
        if type(shape) is not list:
            raise SerializationError(f"invalid type {d!r}: the shape is not a list")
    else:
        shape, dtype, q = d["shape"], d["dtype"], d.get("quant")
    if q is not None:
        return TensorType(tuple(shape), dtype, QuantParams(q["scale"], q["zero_point"], q["axis"]))
    if seen is None:
        return TensorType(tuple(shape), dtype)
    key = (*shape, dtype)
    found = seen.get(key)
    if found is None:
        found = seen[key] = TensorType(tuple(shape), dtype)
    return found


def _array_key(v: Value, keys: dict[int, str], arrays: dict[str, np.ndarray]) -> str:
    """The key of constant ``v``'s array in ``arrays``: one per array object, given at its first use."""
    const = v.const
    assert const is not None  # graph.constants() yields only values that have one
    key = keys.get(id(const))
    if key is None:
        key = keys[id(const)] = f"c{len(keys)}"
        arrays[key] = const
    return key


def graph_to_json(graph: Graph) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The graph's document and the constant arrays it names by key: :func:`graph_to_json_bytes`'s
    text, parsed (one writer of the document)."""
    text, arrays = graph_to_json_bytes(graph)
    return json.loads(text), arrays


def graph_to_json_bytes(graph: Graph) -> tuple[bytes, dict[str, np.ndarray]]:
    """The graph's document as compact JSON text (the module docstring's layout; strings
    ASCII-escaped, types and attributes as :func:`dump_json` writes them) and the constant arrays
    it names by key.

    Written directly, without the document's millions of small objects for a large graph (made,
    encoded and freed, they took three times as long): what :meth:`accel.artifact.Artifact.save`
    writes. Types and attributes are each encoded once (by identity, then by value)."""
    enc = encode_basestring_ascii
    arrays: dict[str, np.ndarray] = {}
    keys: dict[int, str] = {}
    type_texts: dict[int, str] = {}
    attr_texts: dict[int, str] = {}
    attr_by_value: dict[tuple[Any, ...], str] = {}
    op_texts: dict[str, str] = {}
    out: list[str] = []
    put = out.append

    def type_text(t: TensorType) -> str:
        found = type_texts.get(id(t))
        if found is None:
            found = type_texts[id(t)] = dump_json(type_to_json(t)).decode()
        return found

    def attrs_text(attrs: Any) -> str:
        found = attr_texts.get(id(attrs))
        if found is None:
            items = tuple(attrs.items())
            try:
                found = attr_by_value.get(items)
                hashable = True
            except TypeError:  # (an unhashable value: encoded as it is)
                hashable = False
            if found is None:
                found = dump_json(dict(attrs)).decode()
                if hashable:
                    attr_by_value[items] = found
            attr_texts[id(attrs)] = found
        return found

    def write(g: Graph) -> None:
        put('"name":')
        put(enc(g.name))
        put(',"inputs":[')
        put(",".join(f'{{"name":{enc(v.name)},"type":{type_text(v.type)}}}' for v in g.inputs))
        put('],"outputs":[')
        put(",".join([enc(v.name) for v in g.outputs]))
        put("]")
        consts = []
        for v in g.constants():
            key = _array_key(v, keys, arrays)
            consts.append(f'{{"name":{enc(v.name)},"type":{type_text(v.type)},"data":"{key}"}}')
        if consts:
            put(',"constants":[')
            put(",".join(consts))
            put("]")
        put(',"nodes":[')
        sep = ""
        for n in g.nodes:  # (the graph's bulk: lookups written out, a node of one output in one piece)
            op = op_texts.get(n.op)
            if op is None:
                op = op_texts[n.op] = enc(n.op)
            attrs = n.attrs
            if attrs:
                text = attr_texts.get(id(attrs))
                attrs_part = f',"attrs":{text if text is not None else attrs_text(attrs)}'
            else:
                attrs_part = ""
            outs = n.outputs
            if len(outs) == 1:
                t = outs[0].type
                text = type_texts.get(id(t))
                outs_part = f'{{"name":{enc(outs[0].name)},"type":{text if text is not None else type_text(t)}}}'
            else:
                outs_part = ",".join([f'{{"name":{enc(v.name)},"type":{type_text(v.type)}}}' for v in outs])
            put(
                f'{sep}{{"name":{enc(n.name)},"op":{op},"inputs":[{",".join([enc(v.name) for v in n.inputs])}]'
                f'{attrs_part},"outputs":[{outs_part}]'
            )
            sep = ","
            if n.body is not None:
                put(',"body":{')
                write(n.body)
                put("}")
            put("}")
        put("]")

    put(f'{{"format":{enc(FORMAT)},"version":{VERSION},')
    write(graph)
    put("}")
    return "".join(out).encode(), arrays


def _fast_json_encoder() -> bool:
    """Whether pydantic-core's encoder writes infinities and NaN as ``json`` does (its
    ``inf_nan_mode``, which older pydantic-core releases lack)."""
    try:
        return pydantic_core.to_json(float("inf"), inf_nan_mode="constants") == b"Infinity"
    except TypeError:
        return False


_FAST_JSON = _fast_json_encoder()


def dump_json(doc: Any) -> bytes:
    """``doc`` (dicts with string keys, lists, tuples, strings, numbers, booleans, None) as compact
    UTF-8 JSON text: the document ``json.dumps(doc, separators=(",", ":"))`` writes, non-ASCII
    characters as themselves instead of escapes and some floats in another notation of the same
    value (``0.00001`` for ``1e-05``), by pydantic-core's encoder (about three times faster on a
    large graph document). What that encoder refuses (another type, a lone surrogate) goes through
    ``json.dumps``, which writes it or raises its own error as before."""
    if _FAST_JSON:
        try:
            return pydantic_core.to_json(doc, inf_nan_mode="constants")
        except pydantic_core.PydanticSerializationError:
            pass
    return json.dumps(doc, separators=(",", ":")).encode()


def graph_from_json(doc: dict[str, Any], arrays: dict[str, np.ndarray]) -> Graph:
    """Rebuild a graph; any inconsistency is a :class:`SerializationError`."""
    if not isinstance(doc, dict) or doc.get("format", FORMAT) != FORMAT:
        raise SerializationError("not an accel graph document")
    if doc.get("version", VERSION) not in READS:
        raise SerializationError(
            f"graph format version {doc.get('version')} is not supported "
            f"(this accel reads {' and '.join(map(str, READS))})"
        )
    try:
        graph = _decode(doc, arrays, 0, {})
        graph.lint()
    except AccelError as exc:
        if isinstance(exc, SerializationError):
            raise
        raise SerializationError(f"invalid graph document: {exc}") from exc
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise SerializationError(f"invalid graph document: {type(exc).__name__}: {exc}") from exc
    return graph


def _decode(
    doc: dict[str, Any], arrays: dict[str, np.ndarray], depth: int, types: dict[tuple[Any, ...], TensorType]
) -> Graph:
    check_depth(depth, "the graph document", SerializationError)
    values: dict[str, Value] = {}
    inputs = []
    for d in doc["inputs"]:
        v = Value(d["name"], type_from_json(d["type"], types))
        values[v.name] = v
        inputs.append(v)
    for d in doc.get("constants", ()):
        key = d["data"]
        if key not in arrays:
            raise SerializationError(f"constant {d['name']!r} refers to missing data {key!r}")
        t = type_from_json(d["type"], types)
        data = arrays[key]
        if data.dtype.name != t.dtype or tuple(data.shape) != t.shape:
            raise SerializationError(
                f"constant {d['name']!r}: data is {data.dtype.name}{list(data.shape)}, type says {t}"
            )
        values[d["name"]] = Value.constant(d["name"], data, t.quant)
    nodes = []
    for d in doc["nodes"]:
        try:
            ins = [values[name] for name in d["inputs"]]
        except KeyError as exc:
            raise SerializationError(f"node {d.get('name')!r} reads undefined value {exc.args[0]!r}") from None
        attrs = d.get("attrs", _NO_ATTRS)
        if not _flat(attrs) and json_depth(attrs) > MAX_JSON_DEPTH:
            raise SerializationError(f"node {d.get('name')!r}: attributes nested more than {MAX_JSON_DEPTH} deep")
        body = _decode(d["body"], arrays, depth + 1, types) if d.get("body") is not None else None
        outs = d["outputs"]
        node = Node(
            d["op"],
            ins,
            # defaults filled in, unknown or missing ones refused: kernels read a node's attributes as they are
            attrs if d["op"] == CALL_OP else complete_attrs(get_op(d["op"]), attrs, str(d["name"])),
            [type_from_json(o["type"], types) for o in outs],
            name=d["name"],
            output_names=[o["name"] for o in outs],
            body=body,
        )
        for v in node.outputs:
            values[v.name] = v
        nodes.append(node)
    try:
        outputs = [values[name] for name in doc["outputs"]]
    except KeyError as exc:
        raise SerializationError(f"graph output {exc.args[0]!r} is undefined") from None
    return Graph(inputs, outputs, nodes, doc["name"])


_NO_ATTRS: dict[str, Any] = {}


def _flat(attrs: Any) -> bool:
    """Whether a node's attributes nest at most three deep (a mapping of numbers, strings, lists
    of them and lists of such lists: a composite's labels), as nearly all do: only others need
    their depth measured."""
    if type(attrs) is not dict:
        return False
    for v in attrs.values():
        if type(v) is list:
            for x in v:
                if type(x) is list:
                    for y in x:
                        if type(y) is list or type(y) is dict:
                            return False
                elif type(x) is dict:
                    return False
        elif type(v) is dict:
            return False
    return True


def read_npy_header(f: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, Fortran order, dtype) from the header of the ``.npy`` data ``f`` reads, leaving ``f`` at
    the array's first byte; no array memory is taken. A malformed header raises ValueError (or
    EOFError, SyntaxError, TypeError: numpy's parsing), as does a format version numpy has no reader for.
    """
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(f)
    raise ValueError(f"npy format version {version[0]}.{version[1]} holds no numeric array")


def _npy_head(blob: bytes) -> bytes | None:
    """The bytes of an ``.npy`` blob before its array (magic, version, header length and header),
    for the formats :func:`read_npy_header` reads; None for anything else."""
    if blob[:6] != b"\x93NUMPY" or len(blob) < 12:
        return None
    if blob[6] == 1:
        end = 10 + int.from_bytes(blob[8:10], "little")
    elif blob[6] == 2:
        end = 12 + int.from_bytes(blob[8:12], "little")
    else:
        return None
    return blob[:end] if end <= len(blob) else None


#: header bytes -> (shape, Fortran order, dtype, array offset) as numpy parsed them: the
#: constants of a network repeat a few headers many times, and parsing one is ~40 µs
_NPY_HEADERS: dict[bytes, tuple[tuple[int, ...], bool, np.dtype, int]] = {}


def load_npy(blob: bytes, what: str, error: type[AccelError] = SerializationError) -> np.ndarray:
    """An ``.npy`` member, its header checked before any array memory is taken.

    Every problem is ``error`` naming ``what``. The header's dtype must be one the IR knows (never an object dtype), and
    the bytes it declares must be exactly the bytes that follow it.
    """
    head = _npy_head(blob)
    found = _NPY_HEADERS.get(head) if head is not None else None
    if found is None:
        fp = io.BytesIO(blob)
        try:
            shape, fortran, dtype = read_npy_header(fp)
        except Exception as exc:  # ValueError and the like: a malformed header
            raise error(f"{what} is not a valid .npy array ({exc})") from None
        found = (shape, fortran, dtype, fp.tell())
        if head is not None and len(head) == found[3]:
            if len(_NPY_HEADERS) >= 4096:
                _NPY_HEADERS.clear()
            _NPY_HEADERS[head] = found
    shape, fortran, dtype, offset = found
    if dtype.hasobject or dtype.name not in DTYPES or fortran:
        raise error(f"{what} holds a {dtype} array ({'Fortran' if fortran else 'C'} order), not an IR constant")
    count = 1
    for d in shape:
        count *= int(d)
    declared, present = count * dtype.itemsize, len(blob) - offset
    if declared != present:
        raise error(f"{what} declares {list(shape)} {dtype} ({declared} bytes) but holds {present} bytes")
    arr = np.frombuffer(blob, dtype=dtype, count=count, offset=offset).reshape(shape)
    return arr.astype(dtype.newbyteorder("="))  # a copy, in this machine's byte order


def npy_bytes(arr: np.ndarray, headers: dict[tuple[str, tuple[int, ...]], bytes] | None = None) -> bytes:
    """``arr`` as an ``.npy`` file, C order, as ``np.save(..., allow_pickle=False)`` writes it.

    ``headers`` remembers the header numpy wrote for each dtype and shape: the constants of a
    network repeat a few of them many times, and the rest of the file is the array's bytes.
    """
    a = np.asarray(arr, order="C")  # asarray, not ascontiguousarray: that one turns a 0-d constant into shape (1,)
    key = (a.dtype.str, a.shape)
    head = headers.get(key) if headers is not None else None
    if head is not None:
        return head + a.tobytes()
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    data = buf.getvalue()
    if headers is not None and not a.dtype.hasobject:
        headers[key] = data[: len(data) - a.nbytes]
    return data


def save_graph(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write ``graph`` as one zip file (atomically: a temporary file renamed at the end; see :mod:`accel.files`)."""
    doc, arrays = graph_to_json(graph)

    def write(f: Any) -> None:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("graph.json", json.dumps(doc, indent=1))
            headers: dict[tuple[str, tuple[int, ...]], bytes] = {}
            for key, arr in arrays.items():
                zf.writestr(f"constants/{key}.npy", npy_bytes(arr, headers))

    write_output(path, f"graph file {os.fspath(path)!r}", SerializationError, write)


def load_graph(path: str | os.PathLike[str]) -> Graph:
    where = os.fspath(path)
    try:
        with open_regular(path, f"graph file {where!r}", SerializationError) as f, zipfile.ZipFile(f) as zf:
            total = sum(info.file_size for info in zf.infolist())
            if total > MAX_GRAPH_FILE_BYTES:
                raise SerializationError(
                    f"{where}: members declare {total} bytes, over the {MAX_GRAPH_FILE_BYTES} limit"
                )
            doc = load_json(zf.read("graph.json"), f"{where}: graph.json", SerializationError, max_depth=None)
            arrays = {}
            for name in zf.namelist():
                if name.startswith("constants/") and name.endswith(".npy"):
                    arrays[name[len("constants/") : -4]] = load_npy(zf.read(name), f"{where}: {name}")
    except SerializationError:
        raise
    except FileNotFoundError:
        raise SerializationError(f"{where}: no such file") from None
    except Exception as exc:  # a damaged zip raises BadZipFile, NotImplementedError, zlib errors...
        raise SerializationError(f"{where}: not a readable accel graph ({type(exc).__name__}: {exc})") from None
    return graph_from_json(doc, arrays)
