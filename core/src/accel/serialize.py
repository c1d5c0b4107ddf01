"""Graphs to and from JSON + .npy (never pickle).

``graph_to_json`` gives a JSON-able document and the constant arrays it
references by key; ``graph_from_json`` rebuilds the graph from both.
``save_graph``/``load_graph`` put them in one zip file: ``graph.json`` plus
``constants/<key>.npy``, read back with ``allow_pickle=False``.

Document layout (``format: "accel-graph"``, ``version: 1``)::

    {"name": ..., "inputs": [{"name", "type"}], "outputs": ["name", ...],
     "constants": [{"name", "type", "data": key}],
     "nodes": [{"name", "op", "inputs": ["name", ...], "attrs": {...},
                "outputs": [{"name", "type"}], "body": <graph document>?}]}

A type is ``{"shape": [...], "dtype": "float32", "quant": {"scale": [...],
"zero_point": [...], "axis": int | null} | null}``.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from typing import Any

import numpy as np

from accel.errors import AccelError, SerializationError
from accel.ir import Graph, Node, QuantParams, TensorType, Value

FORMAT = "accel-graph"
VERSION = 1


def type_to_json(t: TensorType) -> dict[str, Any]:
    q = None
    if t.quant is not None:
        q = {
            "scale": t.quant.scale.reshape(-1).tolist(),
            "zero_point": t.quant.zero_point.reshape(-1).tolist(),
            "axis": t.quant.axis,
        }
    return {"shape": list(t.shape), "dtype": t.dtype, "quant": q}


def type_from_json(d: dict[str, Any]) -> TensorType:
    q = d.get("quant")
    quant = QuantParams(q["scale"], q["zero_point"], q["axis"]) if q is not None else None
    return TensorType(tuple(d["shape"]), d["dtype"], quant)


def graph_to_json(graph: Graph) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {}
    keys: dict[int, str] = {}

    def encode(g: Graph) -> dict[str, Any]:
        consts = []
        for v in g.constants():
            const = v.const
            assert const is not None  # constants() yields only values that have one
            key = keys.get(id(const))
            if key is None:
                key = keys[id(const)] = f"c{len(keys)}"
                arrays[key] = const
            consts.append({"name": v.name, "type": type_to_json(v.type), "data": key})
        nodes = []
        for n in g.nodes:
            d: dict[str, Any] = {
                "name": n.name,
                "op": n.op,
                "inputs": [v.name for v in n.inputs],
                "attrs": dict(n.attrs),
                "outputs": [{"name": v.name, "type": type_to_json(v.type)} for v in n.outputs],
            }
            if n.body is not None:
                d["body"] = encode(n.body)
            nodes.append(d)
        return {
            "name": g.name,
            "inputs": [{"name": v.name, "type": type_to_json(v.type)} for v in g.inputs],
            "outputs": [v.name for v in g.outputs],
            "constants": consts,
            "nodes": nodes,
        }

    doc = encode(graph)
    doc = {"format": FORMAT, "version": VERSION, **doc}
    return doc, arrays


def graph_from_json(doc: dict[str, Any], arrays: dict[str, np.ndarray]) -> Graph:
    """Rebuild a graph; any inconsistency is a :class:`SerializationError`."""
    if not isinstance(doc, dict) or doc.get("format", FORMAT) != FORMAT:
        raise SerializationError("not an accel graph document")
    if doc.get("version", VERSION) != VERSION:
        raise SerializationError(
            f"graph format version {doc.get('version')} is not supported (this accel reads {VERSION})"
        )
    try:
        graph = _decode(doc, arrays)
        graph.lint()
    except AccelError as exc:
        if isinstance(exc, SerializationError):
            raise
        raise SerializationError(f"invalid graph document: {exc}") from exc
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise SerializationError(f"invalid graph document: {type(exc).__name__}: {exc}") from exc
    return graph


def _decode(doc: dict[str, Any], arrays: dict[str, np.ndarray]) -> Graph:
    values: dict[str, Value] = {}
    inputs = []
    for d in doc["inputs"]:
        v = Value(d["name"], type_from_json(d["type"]))
        values[v.name] = v
        inputs.append(v)
    for d in doc["constants"]:
        key = d["data"]
        if key not in arrays:
            raise SerializationError(f"constant {d['name']!r} refers to missing data {key!r}")
        t = type_from_json(d["type"])
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
        body = _decode(d["body"], arrays) if d.get("body") is not None else None
        outs = d["outputs"]
        node = Node(
            d["op"],
            ins,
            d["attrs"],
            [type_from_json(o["type"]) for o in outs],
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


def save_graph(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write ``graph`` as one zip file (atomically: a temporary file renamed at the end)."""
    doc, arrays = graph_to_json(graph)
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("graph.json", json.dumps(doc, indent=1))
            for key, arr in arrays.items():
                buf = io.BytesIO()
                # asarray, not ascontiguousarray: that one turns a 0-d constant into shape (1,)
                np.save(buf, np.asarray(arr, order="C"), allow_pickle=False)
                zf.writestr(f"constants/{key}.npy", buf.getvalue())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_graph(path: str | os.PathLike[str]) -> Graph:
    try:
        with zipfile.ZipFile(path) as zf:
            doc = json.loads(zf.read("graph.json"))
            arrays = {}
            for name in zf.namelist():
                if name.startswith("constants/") and name.endswith(".npy"):
                    arrays[name[len("constants/") : -4]] = np.load(io.BytesIO(zf.read(name)), allow_pickle=False)
    except FileNotFoundError:
        raise SerializationError(f"{os.fspath(path)}: no such file") from None
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError) as exc:
        raise SerializationError(f"{os.fspath(path)}: not a readable accel graph ({exc})") from None
    return graph_from_json(doc, arrays)
