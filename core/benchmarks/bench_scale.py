"""Scale benchmark: ``accel inspect``'s work on a chain of 10k and 100k nodes.

The model is ``accel.testing.modelgen.chain`` (residual blocks Conv → Relu →
Sigmoid → Add, four ONNX nodes each), written to an ONNX file. Each stage is
what ``accel inspect model.onnx [--backends testbackend]`` does:

- import: the file read and converted to the IR (``accel.frontend.onnx.import_model``);
- simplify: the standard passes (``accel.passes.simplify``; import + simplify
  is ``accel.import_onnx``);
- partition: ``accel.partition.partition_report`` with no backend (every
  node on the host) or with the test backend (NHWC: conv + relu composites and
  adds offloaded, the sigmoids on the host, so one partition per block and a
  layout transpose at each of its boundaries): the decisions and the report,
  without building the partitioned graph, which ``accel inspect`` does not need;
- report: the text report ``accel inspect`` prints.

Beside them, not in the total: ``partition_graph(..., materialize=False)``,
the same partitioning with the partitioned graph built, as ``accel compile``
needs it.

Each case is measured in ``--repeat`` rounds (5 by default), every case once a
round, each run in a fresh Python process, as the command would. A
measurement of a smaller model averages ``largest / size`` runs in a row (ten
10k runs beside one 100k run), so that every measurement spans about the
same time: a shared machine's speed can drift by half over seconds (the
virtual machines of docs/benchmarks.md do), and one 10k run (under a second)
sees a single state of it where a 100k run (ten seconds) sees their mix. The table shows each case's round of median total
CPU time, and the fastest and slowest rounds. Each run, like the command,
freezes what each stage built (``accel.ir.freeze_after_pauses``). CPU time
(``time.process_time``) and wall time are both given: the
machine is shared, and wall time counts the other jobs' share too. Goals:
< 10 s for 100k nodes, and 100k / 10k ≤ 11 (linear would be 10).

Beside the times, the work itself is counted: after the timed rounds, one
more run of each case counts the Python function calls of the four stages
(``cProfile``; its times are not used). That count does not depend on the
machine, so its 100k / 10k ratio shows how the work grows, apart from how
the memory hierarchy treats a working set of ten times the size.

Then the commands themselves, as a user runs them from the shell: ``accel
compile``, ``accel inspect`` of the ONNX file and ``accel inspect`` of the
artifact, each with ``--backends testbackend``, on the 100k-node branching
graph (``accel.testing.modelgen.branching``: the graph
``core/benchmarks/bench_partition.py`` partitions, written as ONNX), wall time
of each whole process, Python's start-up and exit included; the median of
``--repeat`` rounds, the commands taking turns. Goal: each under 5 s.
``--commands 0`` leaves them out.

Run with ``nox -s bench`` (or ``python core/benchmarks/bench_scale.py``;
``--json out.json`` for the figures). ``--sizes`` measures other sizes: each
larger one is compared with the smallest, and the table gives every case's
CPU time per node, so ``--sizes 10000,30000,100000,200000`` shows where the
cost of a node rises (as the working set outgrows the caches) and that it
stays flat beyond. The goal is checked on the median rounds of the 10k and
100k cases.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STAGES = ("import", "simplify", "partition", "report")


def run_case(path: str, backends: list[str], *, count_calls: bool = False) -> dict:
    """Time the stages on one model file in this process: ``{stage: (cpu s, wall s)}`` plus counts
    (with ``count_calls``, also the Python function calls of the four stages, which the profiler slows)."""
    import cProfile
    import pstats

    from rich.console import Console

    import accel  # noqa: F401  (first: see accel/_cpu.py)
    from accel.frontend.onnx import import_model
    from accel.ir import freeze_after_pauses
    from accel.partition import partition_graph, partition_report
    from accel.passes import simplify
    from accel.render import print_report
    from accel.target import CompositeTarget

    freeze_after_pauses()  # as the accel command does (accel.cli.main)
    instances = CompositeTarget.from_backends(backends).instantiate() if backends else []
    times: dict[str, list[float]] = {}
    profiler = cProfile.Profile() if count_calls else None

    def timed(stage: str, fn):
        if profiler is not None and stage in STAGES:
            profiler.enable()
        c0, w0 = time.process_time(), time.perf_counter()
        result = fn()
        times[stage] = [time.process_time() - c0, time.perf_counter() - w0]
        if profiler is not None:
            profiler.disable()
        return result

    raw = timed("import", lambda: import_model(path))
    graph = timed("simplify", lambda: simplify(raw, in_place=True))
    rep = timed("partition", lambda: partition_report(graph, instances))

    def report() -> None:
        with open(os.devnull, "w") as sink:
            print_report(rep, Console(file=sink, width=120))

    timed("report", report)
    built = timed("partition_graph", lambda: partition_graph(graph, instances, materialize=False))
    if len(built.report.partitions) != len(rep.partitions):
        raise SystemExit("partition_report and partition_graph disagree")
    out = {
        "nodes": len(graph.nodes),
        "partitions": len(rep.partitions),
        "host_nodes": len(rep.host_nodes()),
        "transposes": sum(p.transposes for p in rep.partitions),
        "times": times,
    }
    if profiler is not None:
        out["calls"] = pstats.Stats(profiler).total_calls  # type: ignore[attr-defined]
    return out


def _k(n: int) -> str:
    """``n`` nodes as the tables write it: 10k, 100k, 800."""
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def measure(path: str, backends: list[str], *, count_calls: bool = False) -> dict:
    """:func:`run_case` in a fresh interpreter."""
    cmd = [sys.executable, __file__, "--case", path, "--backends", ",".join(backends)]
    if count_calls:
        cmd.append("--count-calls")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def averaged(runs: list[dict]) -> dict:
    """One measurement of several runs of a case: each stage's CPU and wall time averaged."""
    first = runs[0]
    if any(
        {k: v for k, v in r.items() if k != "times"} != {k: v for k, v in first.items() if k != "times"} for r in runs
    ):
        raise SystemExit("runs of one case disagree")
    times = {s: [sum(r["times"][s][i] for r in runs) / len(runs) for i in (0, 1)] for s in first["times"]}
    out = {**first, "times": times, "runs_averaged": len(runs)}
    out["total"] = [sum(times[s][i] for s in STAGES) for i in (0, 1)]
    return out


#: The commands of the end-to-end measurement (``{model}``, ``{artifact}``: the files), and their goal in seconds.
COMMANDS = (
    ("accel compile", ["compile", "{model}", "--backends", "testbackend", "--output", "{artifact}"]),
    ("accel inspect (ONNX)", ["inspect", "{model}", "--backends", "testbackend"]),
    ("accel inspect (artifact)", ["inspect", "{artifact}"]),
)
COMMAND_GOAL = 5.0


def time_commands(n_nodes: int, rounds: int, console: Any) -> list[dict]:
    """Each of :data:`COMMANDS` on the ``n_nodes`` branching graph, in its own process: wall seconds
    of every round (the commands take turns), the median, the fastest and the slowest."""
    import onnx

    from accel.testing import modelgen

    accel_cmd = Path(sys.executable).with_name("accel")
    prefix = [str(accel_cmd)] if accel_cmd.exists() else [sys.executable, "-m", "accel"]
    runs: dict[str, list[float]] = {name: [] for name, _ in COMMANDS}
    with tempfile.TemporaryDirectory(prefix="accel-commands-") as tmp:
        files = {"model": str(Path(tmp) / f"branching{n_nodes}.onnx"), "artifact": str(Path(tmp) / "branching.accel")}
        onnx.save_model(modelgen.branching(n_nodes), files["model"])
        for k in range(rounds):
            for name, args in COMMANDS:
                console.print(f"round {k + 1}/{rounds}: {name}, {_k(n_nodes)} nodes")
                cmd = [*prefix, *(a.format(**files) for a in args)]
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                runs[name].append(time.perf_counter() - t0)
    rows = []
    for name, _ in COMMANDS:
        done = sorted(runs[name])
        rows.append({"command": name, "nodes": n_nodes, "median": done[len(done) // 2], "runs": done})
    return rows


def goal_verdict(cpu_by_size: dict[int, float]) -> str | None:
    """The goal judged on one target's median CPU seconds by size: None without a 100k case."""
    t = cpu_by_size.get(100_000)
    if t is None:
        return None
    if 10_000 not in cpu_by_size:
        return f"{'met' if t < 10 else 'not met'} for the time ({t:.2f} s); no 10k case for the ratio"
    ratio = t / cpu_by_size[10_000]
    return f"{'met' if t < 10 and ratio <= 11 else 'not met'} ({t:.2f} s, {ratio:.1f}x)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="chain sizes in ONNX nodes, comma-separated")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--repeat", type=int, default=5, help="rounds: measurements of each case (the median is shown)")
    ap.add_argument(
        "--commands",
        type=int,
        default=100_000,
        help="nodes of the branching graph the commands run on, end to end (0: not measured)",
    )
    ap.add_argument("--case", help=argparse.SUPPRESS)  # internal: time one model file in this process
    ap.add_argument("--backends", default="", help=argparse.SUPPRESS)
    ap.add_argument("--count-calls", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    if args.case:
        print(json.dumps(run_case(args.case, backends, count_calls=args.count_calls)))
        return

    import onnx
    from rich.console import Console
    from rich.table import Table

    from accel.testing import modelgen

    console = Console(width=max(Console().width, 170))
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    targets: list[list[str]] = [[], ["testbackend"]]
    rounds = max(1, args.repeat)
    rows = []
    with tempfile.TemporaryDirectory(prefix="accel-scale-") as tmp:
        paths = {}
        for n in sizes:
            paths[n] = str(Path(tmp) / f"chain{n}.onnx")
            onnx.save_model(modelgen.chain(n), paths[n])
        measured: dict[tuple[int, int], list[dict]] = {(n, t): [] for n in sizes for t in range(len(targets))}
        for k in range(rounds):  # the cases take turns: a slow spell of the machine falls on
            for n in sizes:  # measurements of all, not on one case's all
                for t, target in enumerate(targets):
                    count = max(1, round(max(sizes) / n))
                    console.print(
                        f"round {k + 1}/{rounds}: {n} nodes, {','.join(target) or 'no backend'}, {count} run(s)"
                    )
                    measured[(n, t)].append(averaged([measure(paths[n], target) for _ in range(count)]))
        for n in sizes:
            for t, target in enumerate(targets):
                console.print(f"counting the work: {n} nodes, {','.join(target) or 'no backend'}")
                calls = measure(paths[n], target, count_calls=True)["calls"]
                done = sorted(measured[(n, t)], key=lambda r: r["total"][0])
                row = dict(done[len(done) // 2])  # the median round
                row.update(size=n, target=",".join(target) or "(none)", runs=[r["total"] for r in done], calls=calls)
                rows.append(row)
    table = Table(
        title=f"accel inspect stages on a Conv/Relu/Sigmoid/Add chain, median of {rounds} rounds "
        f"(a round of {_k(min(sizes))} averages {max(1, round(max(sizes) / min(sizes)))} runs): CPU s (wall s)"
    )
    columns = (
        "ONNX nodes",
        "IR nodes",
        "backends",
        *STAGES,
        "total",
        "µs / node",
        "fastest / slowest",
        "partition_graph",
        "Python calls",
    )
    for col in (*columns, "partitions", "transposes"):
        table.add_column(col, justify="left" if col == "backends" else "right")
    for r in rows:
        cpu, wall = r["total"]
        table.add_row(
            str(r["size"]),
            str(r["nodes"]),
            r["target"],
            *(f"{r['times'][s][0]:.2f} ({r['times'][s][1]:.2f})" for s in STAGES),
            f"{cpu:.2f} ({wall:.2f})",
            f"{cpu / r['size'] * 1e6:.1f}",
            f"{r['runs'][0][0]:.2f} / {r['runs'][-1][0]:.2f}",
            f"{r['times']['partition_graph'][0]:.2f}",
            f"{r['calls'] / 1e6:.2f} M",
            str(r["partitions"]),
            str(r["transposes"]),
        )
    console.print(table)
    # each larger size against the smallest; the goal is read on 100k against 10k
    small = sizes[0]
    case = {(r["size"], r["target"]): r for r in rows}
    ratios: dict[str, dict[str, list[float]]] = {}
    names = [",".join(t) or "(none)" for t in targets]
    for target in names:
        a = case[(small, target)]
        ratios[target] = {}
        for large in sizes[1:]:
            b = case[(large, target)]
            found = [b["total"][0] / a["total"][0], b["total"][1] / a["total"][1], b["calls"] / a["calls"]]
            ratios[target][f"{large}/{small}"] = found
            console.print(
                f"{_k(large)} / {_k(small)}, backends {target}: CPU {found[0]:.1f}x, wall {found[1]:.1f}x, "
                f"Python calls {found[2]:.2f}x (linear would be {large / small:.1f}x)"
            )
    for target in names:
        verdict = goal_verdict({n: case[(n, target)]["total"][0] for n in sizes})
        if verdict is not None:
            console.print(f"goal (100k nodes < 10 s CPU, 100k / 10k <= 11), backends {target}: {verdict}")
    commands = time_commands(args.commands, rounds, console) if args.commands > 0 else []
    if commands:
        table = Table(
            title=f"the commands end to end on the {_k(args.commands)}-node branching graph, --backends testbackend: "
            f"wall s of the whole process, median of {rounds} rounds"
        )
        for col in ("command", "median", "fastest / slowest", f"< {COMMAND_GOAL:g} s at 100k"):
            table.add_column(col, justify="left" if col == "command" else "right")
        for r in commands:
            verdict = ("met" if r["median"] < COMMAND_GOAL else "not met") if r["nodes"] == 100_000 else "-"
            table.add_row(r["command"], f"{r['median']:.2f}", f"{r['runs'][0]:.2f} / {r['runs'][-1]:.2f}", verdict)
        console.print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cases": rows, "ratios": ratios, "commands": commands}, f, indent=1)


if __name__ == "__main__":
    main()
