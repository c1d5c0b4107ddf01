"""Every row of the support table, compiled for ncnn alone and run against accel's reference
executor (float32 within 1e-4): the op grid. A row without graphs fails here, so a new op comes
with its test (a unary one gets graphs from its row)."""

from __future__ import annotations

import numpy as np
import pytest
from accel_ncnn import NcnnBackend
from accel_ncnn.support import COMPOSITES, OPS
from accel_sdk.testing import random_inputs
from ncnn_graphs import EXAMPLES, unary_graphs

from accel.compiler import compile as compile_model
from accel.executor import ReferenceExecutor

ROWS = [*OPS, *(f"ncnn.{c}" for c in COMPOSITES)]
GRID = [
    pytest.param(row, make, id=f"{row}-{i}")
    for row in ROWS
    for i, make in enumerate(EXAMPLES.get(row, []) or [lambda op=row, k=k: unary_graphs(op)[k] for k in range(2)])
]


def test_every_row_has_graphs():
    for op, row in OPS.items():
        assert row.unary or op in EXAMPLES, f"support table row {op!r} has no graphs in tests/ncnn_graphs.py"
    assert set(EXAMPLES) <= set(ROWS), f"graphs for ops the table does not have: {set(EXAMPLES) - set(ROWS)}"


@pytest.mark.parametrize("row, make", GRID)
def test_row_matches_reference(row, make):
    graph = make()
    artifact = compile_model(graph, target={"devices": [{"kind": "ncnn"}]}, available={"ncnn": NcnnBackend})
    host = {n.op: n.reasons for n in artifact.report.host_nodes()}
    assert not host, f"{row}: left on the host: {host}"
    feed = random_inputs(graph, seed=3)
    got = artifact.executable(threads=2).run(feed)
    want = ReferenceExecutor(graph).run(feed)
    for v in graph.outputs:
        g, w = np.asarray(got[v.name]), np.asarray(want[v.name])
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{row}: %{v.name}")
