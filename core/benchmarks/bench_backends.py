"""Every installed backend next to ONNX Runtime, in one process and one table.

For each installed backend among acl, bnns and ethosn, in the same run:

- ResNet-18 and MobileNetV2 (``accel.testing.modelgen``, 224×224, batch 1) in
  fp32 (acl, bnns) and in QDQ int8 (acl, ethosn; ONNX Runtime's static
  quantizer, ``modelgen.quantize_qdq``), at 1 and 2 threads:
  ``accel.compile(model, backend).executable(threads=n)`` against
  ``accel_sdk.bench.ort_session`` on the same ONNX model (worker threads that
  sleep when idle, ``session.intra_op.allow_spinning=0``; on CPUs without VNNI
  ``session.x64quantprecision=1``, ONNX Runtime's exact int8 kernels);
- the embedded digits model (``accel.models.default_model_path(quantized=True)``)
  compiled for ``ethosn,acl``, per image over the held-out digits, against
  ONNX Runtime on the same QDQ file and accel's reference executor.

Each measurement takes one call of each side per round, the order alternating
from round to round, and reports the median (and the 90th percentile) of
``--repeat`` rounds. Every accel output is checked against the reference
executor: fp32 outputs within 1e-4 of the largest reference value (relative),
QDQ outputs bit-exact; the digits model's head is fp32, so its
probabilities are held to the fp32 bound. The run records the CPU, whether it
has AVX-512 VNNI, oneDNN's version and effective ISA, the versions of what it
ran, and the load average at its start and end.

    python core/benchmarks/bench_backends.py [--repeat N] [--json rows.json] [--update-docs docs/benchmarks.md]

``--update-docs`` rewrites, between ``<!-- bench:backends:start -->`` and
``<!-- bench:backends:end -->``, the table of the machine kind this run is on
(AVX-512 VNNI, AVX2-only, ...) and keeps the other kinds' tables as they are.
Compare the ratios of one run: the machines are shared and noisy.
"""

from __future__ import annotations

# ruff: noqa: I001  (accel is imported before numpy on purpose: see accel/_cpu.py)

import argparse
import ctypes
import datetime
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import accel  # first: lets accel pick OpenBLAS kernels before numpy loads

import numpy as np

BACKENDS = ("acl", "bnns", "ethosn")
#: Which backend runs which form of the networks.
FORMS = {"fp32": ("acl", "bnns"), "qdq": ("acl", "ethosn")}
NETWORKS = {"resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2"}
DIGITS = "digits"
DIGITS_BACKENDS = "ethosn,acl"
#: Largest |accel - reference| / max |reference| accepted for fp32 outputs.
FP32_RTOL = 1e-4

START = "<!-- bench:backends:start -->"
END = "<!-- bench:backends:end -->"
#: Machine kinds with a table each in the docs, in the order they appear: (id, heading).
KINDS = (
    ("avx512-vnni", "AVX-512 VNNI"),
    ("avx512", "AVX-512 without VNNI"),
    ("avx2-vnni", "AVX2 with AVX-VNNI"),
    ("avx2", "AVX2-only"),
)
_BLOCK = re.compile(r"<!-- bench:backends:([\w-]+):start -->\n(.*?)<!-- bench:backends:\1:end -->\n?", re.S)

#: dnnl_cpu_isa_t values (oneDNN's dnnl_types.h).
_ONEDNN_ISAS = {
    0x0: "default",
    0x1: "sse41",
    0x3: "avx",
    0x7: "avx2",
    0xF: "avx2_vnni",
    0x1F: "avx2_vnni_2",
    0x27: "avx512_core",
    0x67: "avx512_core_vnni",
    0xE7: "avx512_core_bf16",
    0x1EF: "avx512_core_fp16",
    0xFEF: "avx512_core_amx",
    0x1FEF: "avx512_core_amx_fp16",
}


# --- the machine -------------------------------------------------------------------------------------------------


def cpu_flags() -> tuple[str, set[str]]:
    """The CPU's model name and feature flags, as /proc/cpuinfo gives them for its first core."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return name, flags
    if found := re.search(r"^model name\s*:\s*(.+)$", text, re.M):
        name = found.group(1).strip()
    if found := re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M):
        flags = set(found.group(1).split())
    return name, flags


def machine_kind(flags: set[str]) -> str:
    """The id of the kind of machine (:data:`KINDS`) a CPU with ``flags`` is."""
    if "avx512_vnni" in flags:
        return "avx512-vnni"
    if "avx512f" in flags:
        return "avx512"
    if "avx_vnni" in flags:
        return "avx2-vnni"
    if "avx2" in flags:
        return "avx2"
    return platform.machine().lower() or "other"


def kind_heading(kind: str) -> str:
    return dict(KINDS).get(kind, kind)


def onednn() -> dict[str, str | None]:
    """oneDNN's version and effective ISA, from the libdnnl.so.3 the plugins run on (None where not found)."""
    lib = None
    candidates = [("libdnnl.so.3", os.RTLD_NOLOAD), (str(Path(sys.prefix) / "lib" / "libdnnl.so.3"), 0)]
    for name, mode in candidates:
        try:
            lib = ctypes.CDLL(name, mode=mode | os.RTLD_LAZY)
            break
        except OSError:
            continue
    if lib is None:
        return {"version": None, "isa": None}

    class Version(ctypes.Structure):
        _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int)]

    lib.dnnl_version.restype = ctypes.POINTER(Version)
    lib.dnnl_get_effective_cpu_isa.restype = ctypes.c_int
    v = lib.dnnl_version().contents
    isa = lib.dnnl_get_effective_cpu_isa()
    return {"version": f"{v.major}.{v.minor}.{v.patch}", "isa": _ONEDNN_ISAS.get(isa, hex(isa))}


def checkout() -> str | None:
    """The short commit of the checkout this script is in, if it is in one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def busy_seconds() -> tuple[float, float, float] | None:
    """(wall clock, CPU seconds of every process on the machine, of this one): to tell others' load apart."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    mine = os.times()
    total = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return time.monotonic(), total, mine.user + mine.system


def others_cores(start: tuple[float, float, float] | None, end: tuple[float, float, float] | None) -> float | None:
    """How many cores other processes kept busy, on average, between two :func:`busy_seconds`."""
    if start is None or end is None or end[0] <= start[0]:
        return None
    return max(0.0, ((end[1] - start[1]) - (end[2] - start[2])) / (end[0] - start[0]))


def machine() -> dict[str, Any]:
    import onnxruntime as ort

    from accel_sdk.bench import cpu_has_vnni

    name, flags = cpu_flags()
    return {
        "cpu": name,
        "cores": os.cpu_count(),
        "kind": machine_kind(flags),
        "vnni": cpu_has_vnni(),
        "avx512_vnni": "avx512_vnni" in flags,
        "onednn": onednn(),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "versions": {
            "accel-core": accel.__version__,
            **{f"accel-{b}": version(f"accel-{b}") for b in BACKENDS},
            "onnxruntime": ort.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "checkout": checkout(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    }


# --- measuring ---------------------------------------------------------------------------------------------------


def interleaved(fns: list[Callable[[], object]], repeat: int, warmup: int = 3) -> list[list[float]]:
    """Milliseconds of each function over ``repeat`` rounds, one call of each per round.

    The order turns over from round to round, so that neither side always runs right after
    the other (whose threads may still be going to sleep) and drifting load falls on all alike.
    """
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    gc.collect()
    for r in range(repeat):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            t0 = time.perf_counter()
            fns[i]()
            times[i].append((time.perf_counter() - t0) * 1e3)
    return times


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def check(got: dict[str, np.ndarray], want: dict[str, np.ndarray], exact: bool) -> dict[str, Any]:
    """accel's outputs against the reference executor's: bit-exact if ``exact``, else within :data:`FP32_RTOL`."""
    differ = total = 0
    rel = 0.0
    for name, w in want.items():
        g, w = np.asarray(got[name]), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return {"ok": False, "bit_exact": False, "rel_err": None, "text": f"{name}: {g.dtype}{list(g.shape)}"}
        differ += int(np.count_nonzero(g != w))
        total += w.size
        scale = float(np.max(np.abs(w.astype(np.float64)))) if w.size else 0.0
        err = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) if w.size else 0.0
        rel = max(rel, err / scale if scale > 0 else err)
    if differ == 0:
        return {"ok": True, "bit_exact": True, "rel_err": 0.0, "text": "bit-exact"}
    if exact:
        return {"ok": False, "bit_exact": False, "rel_err": rel, "text": f"NOT bit-exact ({differ} of {total} differ)"}
    ok = rel <= FP32_RTOL
    return {"ok": ok, "bit_exact": False, "rel_err": rel, "text": f"rel. error {rel:.1e}" + ("" if ok else " > 1e-4")}


def summary(accel_ms: list[float], ort_ms: list[float]) -> dict[str, float]:
    a, o = statistics.median(accel_ms), statistics.median(ort_ms)
    a90, o90 = percentile(accel_ms, 90), percentile(ort_ms, 90)
    return {
        "accel_ms": a,
        "ort_ms": o,
        "ratio": a / o,
        "accel_p90_ms": a90,
        "ort_p90_ms": o90,
        "p90_ratio": a90 / o90,
    }


def compiled(data: bytes, backends: str) -> tuple[Any, float, list[str]]:
    """The model compiled for ``backends``: the artifact, the seconds it took, the ops left on the host."""
    t0 = time.perf_counter()
    artifact = accel.compile(data, backends)
    compile_s = time.perf_counter() - t0
    return artifact, compile_s, sorted({n.op for n in artifact.graph.nodes if n.op != "call"})


def loaded(artifact: Any, threads: int) -> tuple[Any, float]:
    """The artifact's executable at ``threads`` threads and the milliseconds loading it took."""
    t0 = time.perf_counter()
    exe = artifact.executable(threads=threads)
    return exe, (time.perf_counter() - t0) * 1e3


def network_rows(
    backend: str, network: str, form: str, model: Any, threads: list[int], repeat: int
) -> list[dict[str, Any]]:
    """One row per thread count: ``model`` compiled for ``backend`` next to ONNX Runtime."""
    from accel.executor import ReferenceExecutor
    from accel.testing import modelgen
    from accel_sdk.bench import ort_session

    data = model.SerializeToString()
    (feeds,) = modelgen.random_inputs(model, 1, seed=1)
    want = ReferenceExecutor(accel.import_onnx(data)).run(feeds)
    artifact, compile_s, host_ops = compiled(data, backend)
    rows = []
    for n in threads:
        exe, load_ms = loaded(artifact, n)
        sess = ort_session(data, n, quantized=form == "qdq")
        verdict = check(exe.run(feeds), want, exact=form == "qdq")
        t_accel, t_ort = interleaved([lambda exe=exe: exe.run(feeds), lambda sess=sess: sess.run(None, feeds)], repeat)
        rows.append(
            {
                "backend": backend,
                "model": network,
                "form": form,
                "label": f"{NETWORKS[network]} {'fp32' if form == 'fp32' else 'QDQ'}",
                "threads": n,
                **summary(t_accel, t_ort),
                "check": verdict,
                "compile_s": compile_s,
                "load_ms": load_ms,
                "partitions": len(artifact.partitions),
                "host_ops": host_ops,
            }
        )
        del exe, sess
    return rows


def digits_rows(threads: list[int], repeat: int, images: int | None) -> list[dict[str, Any]]:
    """The embedded digits model compiled for ethosn,acl, per image, next to ONNX Runtime and the reference."""
    from accel.executor import ReferenceExecutor
    from accel.models import default_model_path, load_digits_test
    from accel_sdk.bench import ort_session

    path = default_model_path(quantized=True)
    data = path.read_bytes()
    pictures = load_digits_test()[0][:images]
    feeds = [{"image": pictures[i : i + 1]} for i in range(len(pictures))]
    reference = ReferenceExecutor(accel.import_onnx(data))
    want = [reference.run(f) for f in feeds]
    artifact, compile_s, host_ops = compiled(data, DIGITS_BACKENDS)
    rows = []
    for n in threads:
        exe, load_ms = loaded(artifact, n)
        sess = ort_session(data, n, quantized=True)
        got = [exe.run(f) for f in feeds]
        verdict = check(
            {"probabilities": np.concatenate([g["probabilities"] for g in got])},
            {"probabilities": np.concatenate([w["probabilities"] for w in want])},
            exact=False,
        )
        same = sum(int(np.argmax(g["probabilities"]) == np.argmax(w["probabilities"])) for g, w in zip(got, want))
        verdict["text"] += f", {same}/{len(feeds)} predictions identical"
        verdict["ok"] = verdict["ok"] and same == len(feeds)

        t_accel, t_ort, t_ref = interleaved(
            [
                lambda exe=exe: [exe.run(f) for f in feeds],
                lambda sess=sess: [sess.run(None, f) for f in feeds],
                lambda: [reference.run(f) for f in feeds],
            ],
            repeat,
            warmup=1,
        )
        per = len(feeds)
        t_accel, t_ort, t_ref = ([t / per for t in ts] for ts in (t_accel, t_ort, t_ref))
        rows.append(
            {
                "backend": DIGITS_BACKENDS,
                "model": DIGITS,
                "form": "qdq",
                "label": "digits QDQ, per image",
                "threads": n,
                **summary(t_accel, t_ort),
                "reference_ms": statistics.median(t_ref),
                "images": per,
                "check": verdict,
                "compile_s": compile_s,
                "load_ms": load_ms,
                "partitions": len(artifact.partitions),
                "host_ops": host_ops,
            }
        )
        del exe, sess
    return rows


def run(args: argparse.Namespace, backends: list[str], log: Callable[[str], None]) -> list[dict[str, Any]]:
    from accel.testing import modelgen

    threads = [int(t) for t in args.threads.split(",")]
    models = [m for m in args.models.split(",") if m]
    rows: list[dict[str, Any]] = []
    for network in (m for m in models if m in NETWORKS):
        make = getattr(modelgen, network)
        fp32 = make(resolution=args.resolution)
        forms = {"fp32": fp32}
        if any(b in backends for b in FORMS["qdq"]):
            log(f"quantizing {NETWORKS[network]} ...")
            forms["qdq"] = modelgen.quantize_qdq(fp32, 4)
        for form, model in forms.items():
            for backend in (b for b in FORMS[form] if b in backends):
                log(f"{backend}: {NETWORKS[network]} {form} ...")
                rows += network_rows(backend, network, form, model, threads, args.repeat)
    if DIGITS in models:
        if all(b in backends for b in DIGITS_BACKENDS.split(",")):
            log(f"{DIGITS_BACKENDS}: digits ...")
            rows += digits_rows(threads, args.repeat, args.digits)
        else:
            log(f"digits: skipped (needs {DIGITS_BACKENDS})")
    # the table's order: fp32 rows first, then QDQ, then the digits model; by backend, then by network
    order = {name: i for i, name in enumerate(NETWORKS)}
    rows.sort(key=lambda r: (r["model"] == DIGITS, r["form"] != "fp32", r["backend"], order.get(r["model"], 0)))
    return rows


# --- reporting ---------------------------------------------------------------------------------------------------


def by_row(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[int, dict[str, Any]]]:
    """Rows grouped by (backend, label), each by thread count, in their order."""
    out: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["backend"], r["label"]), {})[r["threads"]] = r
    return out


def checks(cells: dict[int, dict[str, Any]]) -> str:
    texts = list(dict.fromkeys(c["check"]["text"] for c in cells.values()))
    return "; ".join(texts) if len(texts) == 1 else "; ".join(f"{n} t: {c['check']['text']}" for n, c in cells.items())


def ms(value: float) -> str:
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def machine_line(info: dict[str, Any], args: argparse.Namespace, load: tuple[float, float]) -> str:
    v = info["versions"]
    dnn = info["onednn"]
    onednn_text = f"oneDNN {dnn['version']} (effective ISA {dnn['isa']})" if dnn["version"] else "oneDNN not found"
    if info["onednn_max_cpu_isa"]:
        onednn_text += f", ONEDNN_MAX_CPU_ISA={info['onednn_max_cpu_isa']}"
    busy = info.get("others_cores")
    others = f", other processes busy on {busy:.2f} cores meanwhile" if busy is not None else ""
    plugins = ", ".join(f"{k} {v[k]}" for k in (f"accel-{b}" for b in BACKENDS) if v.get(k))
    at = f" (checkout {info['checkout']})" if info["checkout"] else ""
    return (
        f"{info['cpu']} ({kind_heading(info['kind'])}), {info['cores']} cores; {onednn_text}; "
        f"onnxruntime {v['onnxruntime']}, numpy {v['numpy']}, accel-core {v['accel-core']}{at}, {plugins}. "
        f"{info['date']}, load average {load[0]:.2f} at the start, {load[1]:.2f} at the end{others}; "
        f"{args.resolution}×{args.resolution}, batch 1, median of {args.repeat} rounds"
    )


def markdown(rows: list[dict[str, Any]], threads: list[int], line: str, kind: str) -> str:
    """The docs' block for this machine kind: heading, machine line, table."""
    head = ["backend", "model"]
    for n in threads:
        t = f"{n} thread{'s' if n != 1 else ''}"
        head += [f"{t}: accel / ORT", "ratio"]
    head.append("outputs vs reference")
    lines = [
        f"### {kind_heading(kind)}",
        "",
        f"{line}; ratio = accel / ONNX Runtime. Generated by `core/benchmarks/bench_backends.py`.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for (backend, label), cells in by_row(rows).items():
        out = [backend, label]
        for n in threads:
            c = cells.get(n)
            out += [f"{ms(c['accel_ms'])} / {ms(c['ort_ms'])} ms", f"{c['ratio']:.2f}×"] if c else ["—", "—"]
        text = checks(cells)
        ref = [c["reference_ms"] for c in cells.values() if "reference_ms" in c]
        if ref:
            text += f"; reference executor {ms(statistics.median(ref))} ms"
        out.append(text)
        lines.append("| " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


def update_section(text: str, kind: str, block: str) -> str:
    """``text`` with ``kind``'s block between the backends markers replaced by ``block`` (added if absent).

    The blocks of other kinds stay as they are; the blocks are kept in :data:`KINDS` order, then any other
    kinds in the order they had. Text between the markers outside a kind's block is not kept.
    """
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {START} ... {END} section")
    inner = text[start + len(START) : end]
    blocks = {m.group(1): m.group(2) for m in _BLOCK.finditer(inner)}
    blocks[kind] = block if block.endswith("\n") else block + "\n"
    known = [k for k, _ in KINDS]
    order = [k for k in known if k in blocks] + [k for k in blocks if k not in known]
    body = "\n".join(f"<!-- bench:backends:{k}:start -->\n{blocks[k]}<!-- bench:backends:{k}:end -->\n" for k in order)
    return text[: start + len(START)] + "\n" + body + text[end:]


def print_table(rows: list[dict[str, Any]], threads: list[int], line: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=240)
    table = Table(title="accel backends next to ONNX Runtime (median of interleaved rounds; ratio = accel / ORT)")
    table.add_column("backend")
    table.add_column("model")
    for n in threads:
        for col in ("accel ms", "ORT ms", "ratio", "p90 ratio"):
            table.add_column(f"{n}t {col}", justify="right")
    table.add_column("compile s", justify="right")
    table.add_column("outputs vs reference")
    for (backend, label), cells in by_row(rows).items():
        out = [backend, label]
        for n in threads:
            c = cells.get(n)
            out += (
                [ms(c["accel_ms"]), ms(c["ort_ms"]), f"{c['ratio']:.2f}x", f"{c['p90_ratio']:.2f}x"] if c else ["-"] * 4
            )
        text = checks(cells)
        ref = [c["reference_ms"] for c in cells.values() if "reference_ms" in c]
        if ref:
            text += f"; reference {ms(statistics.median(ref))} ms"
        compile_s = next(iter(cells.values()))["compile_s"]
        out += [f"{compile_s:.2f}", text if all(c["check"]["ok"] for c in cells.values()) else f"[red]{text}[/]"]
        table.add_row(*out)
    console.print(table)
    console.print(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=100, help="rounds per measurement (default 100)")
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="resnet18,mobilenet_v2,digits", help="of resnet18, mobilenet_v2, digits")
    ap.add_argument("--backends", help=f"of {','.join(BACKENDS)} (default: the installed ones)")
    ap.add_argument("--digits", type=int, default=None, help="held-out digits per round (default: all)")
    ap.add_argument("--json", help="write the machine and the rows to this file")
    ap.add_argument("--update-docs", metavar="MD", help="rewrite this run's machine-kind table in this file")
    args = ap.parse_args(argv)
    unknown = set(args.models.split(",")) - {*NETWORKS, DIGITS, ""}
    if unknown:
        ap.error(f"unknown models {sorted(unknown)}; choose from {[*NETWORKS, DIGITS]}")
    load_start, busy_start = os.getloadavg()[0], busy_seconds()

    from accel import plugins

    installed = [b for b in BACKENDS if b in plugins.available_backends()]
    wanted = args.backends.split(",") if args.backends else list(BACKENDS)
    backends = [b for b in installed if b in wanted]
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    log(f"backends: {', '.join(backends) or 'none'} (installed: {', '.join(installed) or 'none'})")
    rows = run(args, backends, log)
    info = machine()  # after the runs: oneDNN is loaded by then
    load = (load_start, os.getloadavg()[0])
    info["load_average"] = {"start": load[0], "end": load[1]}
    info["others_cores"] = others_cores(busy_start, busy_seconds())
    threads = [int(t) for t in args.threads.split(",")]
    line = machine_line(info, args, load)
    print_table(rows, threads, line)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")
    if args.update_docs:
        doc = Path(args.update_docs)
        doc.write_text(update_section(doc.read_text(), info["kind"], markdown(rows, threads, line, info["kind"])))
        log(f"{doc}: the {kind_heading(info['kind'])} table rewritten")
    return 0 if all(r["check"]["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
