"""The ``accel`` command.

Errors a user can cause print one line (``error: ...``) and exit with code 2;
``--debug`` (before the command) shows the traceback instead.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import typer
from rich.console import Console
from rich.progress import track
from rich.table import Table

import accel
from accel.errors import AccelError, InputError

app = typer.Typer(
    name="accel",
    help=(
        "Compile an ONNX model for a host plus accelerator backends, and run it.\n\n"
        "Examples:\n\n"
        "  accel run                      # the embedded digits model on its held-out digits\n\n"
        "  accel run model.onnx --repeat 20\n\n"
        "  accel run model.onnx --input x=x.npy --output out.npz\n\n"
        "  accel inspect model.onnx       # the imported IR, as text"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)
_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        out.print(f"accel-core {accel.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    _state["debug"] = debug


def _load_model(model: Path) -> accel.Graph:
    with err.status(f"importing {model.name} ...", spinner="dots"):
        return accel.import_onnx(model)


def _parse_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise InputError(f"--input takes NAME=FILE.npy, got {spec!r}")
        try:
            inputs[name] = np.load(file, allow_pickle=False)
        except FileNotFoundError:
            raise InputError(f"--input {name}: no such file {file!r}") from None
        except (ValueError, OSError, EOFError) as exc:
            raise InputError(f"--input {name}: {file!r} is not a readable .npy array ({exc})") from None
        if not isinstance(inputs[name], np.ndarray):
            raise InputError(f"--input {name}: {file!r} must hold one array (.npy), not an archive")
    return inputs


def random_inputs(graph: accel.Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs matching the graph's signature (uniform [0, 1) for floats)."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for v in graph.inputs:
        t = v.type
        if t.dtype.startswith("float"):
            arrays[v.name] = rng.random(t.shape, dtype=np.float64).astype(t.dtype)
        elif t.dtype == "bool":
            arrays[v.name] = rng.random(t.shape) < 0.5
        else:
            info = np.iinfo(t.dtype)
            lo, hi = max(info.min, -128), min(info.max, 127)
            arrays[v.name] = rng.integers(lo, hi, size=t.shape, endpoint=True).astype(t.dtype)
    return arrays


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}.npz")
    try:
        np.savez(tmp, allow_pickle=False, **arrays)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _timing(seconds: list[float]) -> str:
    ms = np.array(seconds) * 1e3
    if len(ms) == 1:
        return f"{ms[0]:.3f} ms"
    return f"mean {ms.mean():.3f} ms, median {np.median(ms):.3f} ms, min {ms.min():.3f} ms over {len(ms)} runs"


@app.command()
def run(
    model: Annotated[
        Optional[Path],
        typer.Argument(help="ONNX model. Default: the embedded quantized digits model, scored on its held-out digits."),
    ] = None,
    input: Annotated[
        Optional[list[str]],
        typer.Option("--input", "-i", help="NAME=FILE.npy, once per model input. Default: random data."),
    ] = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Write the outputs to this .npz file.")
    ] = None,
    repeat: Annotated[
        int, typer.Option("--repeat", "-n", min=1, help="Run this many times and report the timing.")
    ] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
) -> None:
    """Run a model on the reference executor and print its outputs and timing."""
    if model is None:
        if input or output:
            raise InputError("--input/--output need a MODEL; without one, run scores the embedded digits model")
        _run_default(repeat)
        return
    graph = _load_model(model)
    from accel.executor import ReferenceExecutor

    executor = ReferenceExecutor(graph)
    inputs = _parse_inputs(input or []) if input else random_inputs(graph, seed)
    times = []
    for _ in track(range(repeat), description="running", console=err, transient=True, disable=repeat < 5):
        t0 = time.perf_counter()
        results = executor.run(inputs)
        times.append(time.perf_counter() - t0)
    out.print(f"{model.name}: {len(graph.nodes)} ops on the reference executor")
    table = Table()
    for col in ("output", "dtype", "shape", "min", "max", "mean"):
        table.add_column(col, justify="left" if col in ("output", "dtype", "shape") else "right")
    for name, arr in results.items():
        a = arr.astype(np.float64) if arr.size else np.zeros(1)
        table.add_row(name, arr.dtype.name, str(list(arr.shape)), f"{a.min():.6g}", f"{a.max():.6g}", f"{a.mean():.6g}")
    out.print(table)
    out.print(f"inputs: {'given' if input else f'random (seed {seed})'}; time: {_timing(times)}")
    if output is not None:
        _save_npz(output, results)
        out.print(f"wrote {output}")


def _run_default(repeat: int) -> None:
    from accel.executor import ReferenceExecutor
    from accel.models import default_model_path, load_digits_test

    path = default_model_path(quantized=True)
    graph = _load_model(path)
    images, labels = load_digits_test()
    executor = ReferenceExecutor(graph)
    (in_name,) = [v.name for v in graph.inputs]
    out_name = graph.outputs[0].name
    times = []
    preds = np.empty(len(images), dtype=np.int64)
    for _ in track(range(repeat), description="scoring", console=err, transient=True, disable=repeat < 2):
        t0 = time.perf_counter()
        for i in range(len(images)):
            preds[i] = int(np.argmax(executor.run({in_name: images[i : i + 1]})[out_name]))
        times.append(time.perf_counter() - t0)
    acc = float(np.mean(preds == labels))
    out.print(f"embedded model {path.name} (uint8 QDQ, fp32 head): {len(images)} held-out handwritten digits")
    table = Table()
    table.add_column("runtime")
    table.add_column("accuracy", justify="right")
    table.add_column("time / image", justify="right")
    per_image = min(times) / len(images) * 1e3
    table.add_row("accel reference executor", f"{acc:.2%}", f"{per_image:.3f} ms")
    try:
        import onnxruntime as ort
    except ImportError:
        table.add_row("onnxruntime", "not installed (pip install onnxruntime)", "")
    else:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        t0 = time.perf_counter()
        ort_preds = np.array(
            [int(np.argmax(sess.run(None, {in_name: images[i : i + 1]})[0])) for i in range(len(images))]
        )
        ort_time = (time.perf_counter() - t0) / len(images) * 1e3
        table.add_row("onnxruntime", f"{float(np.mean(ort_preds == labels)):.2%}", f"{ort_time:.3f} ms")
        agree = f"predictions identical on {int(np.sum(ort_preds == preds))}/{len(images)} images"
        out.print(table)
        out.print(agree)
        return
    out.print(table)


@app.command()
def inspect(
    model: Annotated[Path, typer.Argument(help="ONNX model.")],
    format: Annotated[
        str, typer.Option("--format", "-f", help="text (the IR) or json (graph document, no weights).")
    ] = "text",
    raw: Annotated[bool, typer.Option(help="Show the graph as imported, before the simplifying passes.")] = False,
) -> None:
    """Print a model's IR after import (and, unless --raw, after the standard passes)."""
    if format not in ("text", "json"):
        raise InputError(f"--format must be text or json, got {format!r}")
    with err.status(f"importing {model.name} ...", spinner="dots"):
        graph = accel.import_onnx(model, optimize=not raw)
    if format == "text":
        out.print(str(graph), markup=False, soft_wrap=True)
    else:
        from accel.serialize import graph_to_json

        doc, _ = graph_to_json(graph)
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> Any:
    """Console entry point: one-line errors, exit code 2 for user errors."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        return app(args=args, prog_name="accel")
    except AccelError as exc:
        if debug:
            raise
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except Exception as exc:  # a bug: still one line unless --debug
        if debug:
            raise
        err.print(
            f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
            markup=False,
            soft_wrap=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
