"""Compile a graph for acl alone and compare it with accel's reference executor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from accel_acl import AclBackend

from accel import quant
from accel.compiler import compile as compile_model
from accel.executor import ReferenceExecutor
from accel.ir import Graph
from accel.partition import partition_graph

AVAILABLE = {"acl": AclBackend}


def inputs_for(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for v in graph.inputs:
        t = v.type
        if t.dtype == "float32":
            out[v.name] = rng.standard_normal(t.shape).astype(np.float32)
        else:
            lo, hi = quant.dtype_range(t.dtype)
            out[v.name] = rng.integers(lo, hi + 1, size=t.shape).astype(t.dtype)
    return out


def compiled(graph: Graph, options: Mapping[str, Any] | None = None):
    target = {"devices": [{"kind": "acl", "options": dict(options or {})}]}
    return compile_model(graph, target=target, available=AVAILABLE)


def host_ops(graph: Graph) -> dict[str, dict[str, str]]:
    """What stays on the host when acl alone partitions ``graph``: op -> reasons."""
    result = partition_graph(graph, [AclBackend()])
    return {n.op: dict(n.reasons) for n in result.report.host_nodes()}


def check(graph: Graph, *, rtol: float = 1e-5, atol: float = 1e-5, seed: int = 0, options=None) -> None:
    """Every output of the compiled graph equals the reference: integers bitwise, floats within rtol/atol."""
    artifact = compiled(graph, options)
    assert artifact.partitions, "nothing was offloaded to acl"
    feed = inputs_for(graph, seed)
    got = artifact.executable().run(feed)
    want = ReferenceExecutor(graph).run(feed)
    for v in graph.outputs:
        g, w = np.asarray(got[v.name]), np.asarray(want[v.name])
        assert g.dtype == w.dtype and g.shape == w.shape, (v.name, g.dtype, g.shape, w.dtype, w.shape)
        assert np.unique(w).size > 1, f"the reference output %{v.name} is constant: a bad case"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=v.name)
        else:
            bad = np.flatnonzero(g.reshape(-1) != w.reshape(-1))
            assert bad.size == 0, (
                f"%{v.name}: {bad.size} of {w.size} differ, first at {bad[:5].tolist()}: {g.reshape(-1)[bad[:5]]} vs {w.reshape(-1)[bad[:5]]}"
            )
