"""Budgets for sizes and nesting depths that come from untrusted files.

A model, an artifact or a target file is data someone else wrote. Every size
such a file declares (a tensor's shape, an external-data length, an ``.npy``
header, a folded constant) is compared with what it must be and with a budget
here *before* memory is taken, and every nested structure (subgraphs, JSON
documents) is measured against a depth limit before anything walks it
recursively. Going over a budget is the caller's typed error, never a
``MemoryError`` or a ``RecursionError``.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from accel.errors import AccelError

#: Largest constant import-time folding may create (bytes). A larger result is
#: left to run time as an op (``ConstantOfShape`` becomes a broadcast), and an
#: op that can only be folded (``Range``, ``NonZero``...) is refused.
#: The most threads a partition computes with (``accel_sdk::kMaxThreads``): ``accel run --threads``,
#: ``accel.load(path, threads=N)`` and ``ACCEL_NUM_THREADS`` are checked against it.
MAX_THREADS = 1024
MAX_FOLD_BYTES = 64 << 20
#: Deepest nesting of subgraphs (If/Loop bodies, ``call`` bodies) accepted.
MAX_SUBGRAPH_DEPTH = 64
#: Deepest nesting of arrays/objects accepted in a JSON document read from a file.
MAX_JSON_DEPTH = 128


def fmt_bytes(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it >= 1 (``64 GiB``)."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.4g} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def json_depth(doc: Any) -> int:
    """Nesting depth of a parsed JSON document (a scalar is 0, ``[]`` is 1), walked without recursion.

    Level by level: the containers of one level are gathered from those of the
    level above, so each is looked at once, without a depth kept beside it.
    """
    depth = 0
    level = [doc] if isinstance(doc, (dict, list)) else []
    while level:
        depth += 1
        below: list[Any] = []
        for obj in level:
            items = obj.values() if isinstance(obj, dict) else obj
            below += [c for c in items if isinstance(c, (dict, list))]
        level = below
    return depth


def load_json(data: str | bytes, what: str, error: type[AccelError], *, max_depth: int | None = MAX_JSON_DEPTH) -> Any:
    """Parse JSON from a file; malformed or too deeply nested input is ``error`` naming ``what``.

    ``max_depth=None`` skips the depth walk for documents whose nesting the
    caller bounds itself (the graph document checks its bodies as it decodes
    them); the parser's own recursion guard still turns pathological input
    into ``error``.
    """

    def fail(why: str) -> NoReturn:
        raise error(f"{what} {why}") from None

    try:
        doc = json.loads(data)
    except RecursionError:
        fail(f"is nested too deeply (more than {MAX_JSON_DEPTH} levels are refused)")
    except UnicodeDecodeError as exc:
        fail(f"is not UTF-8 text ({exc.reason} at byte {exc.start})")
    except json.JSONDecodeError as exc:
        fail(f"is not valid JSON: {exc}")
    except ValueError as exc:  # e.g. an integer too long to convert
        fail(f"is not valid JSON: {exc}")
    if max_depth is not None and json_depth(doc) > max_depth:
        fail(f"is nested more than {max_depth} levels deep")
    return doc


def check_depth(depth: int, what: str, error: type[AccelError]) -> None:
    """Refuse a subgraph nested ``depth`` levels down when that is over :data:`MAX_SUBGRAPH_DEPTH`."""
    if depth > MAX_SUBGRAPH_DEPTH:
        raise error(f"{what} nests subgraphs more than {MAX_SUBGRAPH_DEPTH} levels deep")


__all__ = [
    "MAX_FOLD_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_SUBGRAPH_DEPTH",
    "check_depth",
    "fmt_bytes",
    "json_depth",
    "load_json",
]
