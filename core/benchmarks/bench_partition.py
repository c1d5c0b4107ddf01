"""Partitioner and dispatch benchmarks.

- partition time for ResNet-18 with an ACL-like NHWC backend (conv composites,
  pools, adds, dense, reshape) next to an NCHW one, and for synthetic graphs
  of 10k and 100k nodes with residual and branching structure and two
  backends (one NCHW, one NHWC), with the 100k / 10k ratio;
- per-call dispatch overhead of an external step: an Executable whose only
  step is a one-element partition, minus the runtime's own run time. Uses the
  test backend (a C++ runtime built with accel-sdk) when it is installed.

Run with ``nox -s bench`` (or ``python core/benchmarks/bench_partition.py``).
"""

from __future__ import annotations

# ruff: noqa: I001  (accel is imported before numpy on purpose: see accel/_cpu.py)

import argparse
import json

import accel

import numpy as np
from rich.console import Console
from rich.table import Table

from accel.backend import Backend, PatternEntry
from accel.ir import Graph
from accel.partition import partition_graph
from accel.pattern import is_constant, is_op, wildcard
from accel.testing import modelgen
from bench_core import median_time


def _ok(node):
    return None


class AclLike(Backend):
    """The shape of ACL's support table: NHWC, conv/dense composites, pools, add, reshape."""

    name = "acllike"
    layout = "NHWC"

    def pattern_table(self):
        conv = is_op("nn.pad")(wildcard()).optional()
        conv = is_op("nn.conv2d")(conv, is_constant())
        conv = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
        conv = conv.optional(lambda x: is_op("nn.relu")(x) | is_op("clip")(x))
        dense = is_op("nn.dense")(wildcard(), is_constant())
        dense = dense.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
        return [PatternEntry("conv2d", conv, self.check_conv), PatternEntry("dense", dense)]

    def check_conv(self, match):
        conv = next(n for n in match.nodes if n.op == "nn.conv2d")
        if conv.attrs["groups"] != 1 and conv.attrs["groups"] != conv.inputs[0].type.shape[3]:
            return f"grouped convolution (groups={conv.attrs['groups']}) is not supported"
        return None

    def op_checks(self):
        return {op: _ok for op in ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "add", "reshape")}


class PoolsNchw(Backend):
    name = "poolsnchw"
    layout = "NCHW"

    def op_checks(self):
        return {op: _ok for op in ("nn.max_pool2d", "nn.relu", "add", "abs")}


class ElementwiseNhwc(Backend):
    name = "eltnhwc"
    layout = "NHWC"

    def op_checks(self):
        return {op: _ok for op in ("nn.relu", "add", "nn.max_pool2d", "sigmoid")}


def synthetic(n_nodes: int, seed: int = 0) -> Graph:
    """Residual blocks with side branches; roughly ``n_nodes`` nodes, some only the host runs
    (``accel.testing.modelgen.branching``, imported)."""
    return accel.import_onnx(modelgen.branching(n_nodes, seed=seed))


def bench_resnet18(repeat: int) -> dict:
    graph = accel.import_onnx(modelgen.resnet18())
    backends = [AclLike(), PoolsNchw()]
    lazy = median_time(lambda: partition_graph(graph, backends, materialize=False), repeat)
    full = median_time(lambda: partition_graph(graph, backends), repeat)
    r = partition_graph(graph, backends)
    return {
        "graph": "ResNet-18",
        "nodes": len(graph.nodes),
        "partition_ms": lazy * 1e3,
        "with_weight_relayout_ms": full * 1e3,
        "partitions": len(r.regions),
        "host_nodes": len(r.report.host_nodes()),
    }


def bench_synthetic(n: int, repeat: int) -> dict:
    graph = synthetic(n)
    backends = [PoolsNchw(), ElementwiseNhwc()]
    t = median_time(lambda: partition_graph(graph, backends), repeat, warmup=0)
    r = partition_graph(graph, backends)
    return {
        "graph": f"synthetic {n // 1000}k",
        "nodes": len(graph.nodes),
        "partition_ms": t * 1e3,
        "partitions": len(r.regions),
        "host_nodes": len(r.report.host_nodes()),
    }


def bench_dispatch(repeat: int) -> dict | None:
    try:
        from accel_testbackend import TestBackend
    except ImportError:
        return None
    from accel.builder import GraphBuilder
    from accel.runtime import create_handle

    b = GraphBuilder(x=(1, 1, 1, 1))
    g = b.done(b.op("nn.relu", b.x["x"]))
    art = accel.compile(g, ["testbackend"], available={"testbackend": TestBackend})
    exe = art.executable()
    x = {"x": np.ones((1, 1, 1, 1), np.float32)}
    name = art.partitions[0][0]
    handle = create_handle(art.backends[0], art.blobs[name], name)
    ins, outs = [np.ones((1, 1, 1, 1), np.float32)], [np.empty((1, 1, 1, 1), np.float32)]
    n = 2000

    def loop_exe():
        for _ in range(n):
            exe.run_positional([x["x"]])

    def loop_handle():
        for _ in range(n):
            handle.run(ins, outs)

    total = median_time(loop_exe, repeat) / n
    native = median_time(loop_handle, repeat) / n
    return {"executable_call_us": total * 1e6, "handle_run_us": native * 1e6, "dispatch_us": (total - native) * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    console = Console()
    rows = [bench_resnet18(args.repeat)]
    rows.append(bench_synthetic(10_000, 3))
    rows.append(bench_synthetic(100_000, 1))
    table = Table(title="partition time")
    for col in ("graph", "nodes", "partition", "partitions", "host nodes"):
        table.add_column(col, justify="left" if col == "graph" else "right")
    for r in rows:
        extra = (
            f" ({r['with_weight_relayout_ms']:.1f} ms with weight re-layout)" if "with_weight_relayout_ms" in r else ""
        )
        table.add_row(r["graph"], str(r["nodes"]), f"{r['partition_ms']:.1f} ms{extra}", str(r["partitions"]),
                      str(r["host_nodes"]))  # fmt: skip
    console.print(table)
    ratio = rows[2]["partition_ms"] / rows[1]["partition_ms"]
    console.print(
        f"100k / 10k partition time: {ratio:.1f}x (linear would be {rows[2]['nodes'] / rows[1]['nodes']:.1f}x)"
    )
    dispatch = bench_dispatch(args.repeat)
    if dispatch is None:
        console.print("dispatch overhead: skipped (accel-testbackend is not installed)")
    else:
        console.print(
            f"dispatch of one external step: {dispatch['executable_call_us']:.1f} µs per Executable call, "
            f"{dispatch['handle_run_us']:.1f} µs in the runtime handle, overhead {dispatch['dispatch_us']:.1f} µs"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"partition": rows, "ratio_100k_10k": ratio, "dispatch": dispatch}, f, indent=1)


if __name__ == "__main__":
    main()
