"""``accel.compile``: model → partitioned graph → blobs → :class:`accel.artifact.Artifact`."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from accel.artifact import Artifact
from accel.backend import Backend
from accel.errors import AccelError, PartitionError, TargetError
from accel.ir import Graph
from accel.partition import partition_graph
from accel.passes.layout import contiguous_constants
from accel.target import CompositeTarget

if TYPE_CHECKING:
    from accel.tune import TuneOptions

Progress = Callable[[str, int, int], None]


def resolve_target(
    backends: str | Sequence[str] | None = None,
    target: CompositeTarget | Mapping[str, Any] | str | None = None,
) -> CompositeTarget:
    """One :class:`CompositeTarget` from ``backends`` (names) or ``target`` (model, dict or JSON file path)."""
    if backends is not None and target is not None:
        raise TargetError("give either backends or a target, not both")
    if target is None:
        return CompositeTarget.from_backends(backends if backends is not None else [])
    if isinstance(target, CompositeTarget):
        return target
    if isinstance(target, str):
        return CompositeTarget.from_file(target)
    return CompositeTarget.parse(dict(target))


def compile(
    model: Any,
    backends: str | Sequence[str] | None = None,
    *,
    target: CompositeTarget | Mapping[str, Any] | str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    available: Mapping[str, type[Backend]] | None = None,
    progress: Progress | None = None,
    tune: bool | TuneOptions | None = None,
) -> Artifact:
    """Compile ``model`` (ONNX path, bytes, ModelProto or an accel Graph) for a composite target.

    ``backends`` is the shorthand (``"ethosn,acl"`` or a list); ``target`` the
    full form. ``available`` replaces plugin discovery (a mapping of backend
    name to class), for tests and embedding. ``progress(stage, done, total)``
    is called as the stages advance. ``tune`` (True or a
    :class:`accel.tune.TuneOptions`) chooses the placement by measuring
    candidates on this machine (:func:`accel.tune.tune`); the artifact's
    report then holds the tuning record.
    """
    timings: dict[str, float] = {}
    t = time.perf_counter()
    tgt = resolve_target(backends, target)
    instances = tgt.instantiate(available)
    if isinstance(model, Graph):
        graph = model
    else:
        from accel import import_onnx

        graph = import_onnx(model, input_shapes=input_shapes)
    timings["import"] = time.perf_counter() - t
    if tune:
        from accel.tune import TuneOptions
        from accel.tune import tune as tune_placement

        options = tune if isinstance(tune, TuneOptions) else TuneOptions()
        artifact = tune_placement(graph, tgt, instances, options, progress=progress)
        artifact.report.timings.update(timings)
        artifact.report.timings["tune"] = artifact.report.tuning["elapsed"] if artifact.report.tuning else 0.0
        return artifact
    return build_artifact(graph, tgt, instances, progress=progress, timings=timings)


def build_artifact(
    graph: Graph,
    tgt: CompositeTarget,
    instances: list[Backend],
    *,
    forbid: Mapping[str, Collection[str]] | None = None,
    progress: Progress | None = None,
    timings: dict[str, float] | None = None,
) -> Artifact:
    """Partition ``graph`` for ``instances`` (``forbid`` as :func:`accel.partition.partition_graph`'s) and
    serialize every region: the artifact :func:`compile` returns."""
    timings = dict(timings or {})
    if progress:
        progress("partition", 0, 1)
    result = partition_graph(graph, instances, materialize=False, forbid=forbid)
    timings["partition"] = result.report.timings["partition"]
    regions = result.regions
    by_name = {b.name: b for b in instances}
    blobs: dict[str, bytes] = {}
    t = time.perf_counter()
    for i, node in enumerate(regions):
        if progress:
            progress("serialize", i, len(regions))
        backend = by_name[node.attrs["compiler"]]
        assert node.body is not None
        contiguous_constants(node.body)
        try:
            blob = backend.serialize(node.body)
        except AccelError:
            raise
        except Exception as exc:
            raise PartitionError(
                f"{backend.name} ({backend.distribution} {backend.version}) failed to serialize partition "
                f"{node.name!r}: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise PartitionError(f"{backend.name}.serialize returned {type(blob).__name__}, not bytes")
        blobs[node.name] = bytes(blob)
    if progress:
        progress("serialize", len(regions), len(regions))
    timings["serialize"] = time.perf_counter() - t
    report = result.report
    report.timings.update(timings)
    return Artifact(result.graph, blobs, tgt, instances, report)
