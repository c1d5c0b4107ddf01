"""The ``accel`` command.

Errors a user can cause, usage errors included, print one line (``error: ...``)
and exit with code 2; ``--debug`` (anywhere before ``--``) shows the traceback
too, with the same exit code.
"""

from __future__ import annotations

import json
import math
import operator
import os
import stat
import sys
import textwrap
import time
import traceback
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Optional

import numpy as np
import typer
from rich.console import Console, ConsoleDimensions
from rich.progress import track
from rich.table import Table
from rich.text import Text

import accel
from accel.errors import AccelError, InputError
from accel.files import check_output, open_regular, physical_memory, write_output
from accel.ir import freeze_after_pauses
from accel.limits import MAX_THREADS, fmt_bytes
from accel.serialize import read_npy_header

app = typer.Typer(
    name="accel",
    # "\b" keeps click from reflowing the paragraph that follows: the examples stay one per line
    help=(
        "Compile an ONNX model for a host plus accelerator backends, and run it.\n\n"
        "Examples:\n\n"
        "\b\n"
        "  accel run                           # the embedded digits model on its held-out digits\n"
        "  accel backends                      # installed backend plugins and their state\n"
        "  accel ops --backend acl             # what a backend takes: composites, ops, constraints\n"
        "  accel compile model.onnx --backends ethosn,acl   # -> model.accel\n"
        "  accel run model.accel --repeat 20   # run a compiled artifact (or a model, on the host)\n"
        "  accel run model.onnx --input x=x.npy --output out.npz\n"
        "  accel run model.accel --compare onnxruntime=model.onnx   # outputs against ONNX Runtime's\n"
        "  accel inspect model.onnx --backends ethosn,acl --format html > report.html\n"
        "  accel inspect model.onnx            # the imported IR, as text"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

#: Columns of output written to a pipe, a file or a CI log: wide enough that no line is ever cut
#: (a node name, a reason, a headline); a terminal's own width applies on a terminal, COLUMNS anywhere.
PIPE_WIDTH = 10_000


class WideWhenPiped(Console):
    """A console as wide as its terminal, or :data:`PIPE_WIDTH` when its file is not a terminal.

    Rich assumes 80 columns off a terminal and wraps every longer line, one word per line in
    narrow table cells; a log or a file has no width to fit. COLUMNS, when set, still rules.
    """

    @property
    def size(self) -> ConsoleDimensions:
        if self._width is None and not self.is_terminal:
            return ConsoleDimensions(PIPE_WIDTH, self._height or 25)
        return super().size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


# markup off: names, paths and messages come from models and users ("[/x]" is a valid tensor name)
out = WideWhenPiped(highlight=False, markup=False)
err = WideWhenPiped(stderr=True, highlight=False, markup=False)
_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        out.print(f"accel-core {accel.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors (anywhere on the line).")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    _state["debug"] = _state["debug"] or debug


def _load_model(model: Path, input_shapes: dict[str, tuple[int, ...]] | None = None) -> accel.Graph:
    with err.status(Text(f"importing {model.name} ..."), spinner="dots"):
        return accel.import_onnx(model, input_shapes=input_shapes)


@dataclass(frozen=True)
class NpyInput:
    """An ``--input NAME=FILE.npy`` whose header was read and checked; :meth:`read` loads the array.

    The header (shape, dtype, order) is checked before any array memory is taken: the
    file must hold exactly the bytes it declares, and those must fit this machine's
    memory, so a forged header cannot make the loader allocate what the file does not hold.
    """

    name: str
    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool
    offset: int

    @property
    def label(self) -> str:
        return f"--input {self.name}: {self.path!r}"

    def stand_in(self) -> np.ndarray:
        """An array of this shape and dtype that takes no memory (for checks against a model's signature)."""
        return np.broadcast_to(np.zeros((), self.dtype.newbyteorder("=")), self.shape)

    def read(self) -> np.ndarray:
        count = math.prod(self.shape)
        with open_regular(self.path, self.label, InputError) as f:
            f.seek(self.offset)
            data = f.read(count * self.dtype.itemsize)
        if len(data) != count * self.dtype.itemsize:
            raise InputError(f"{self.label} changed while it was read")
        arr = np.frombuffer(data, dtype=self.dtype, count=count)
        arr = arr.reshape(self.shape[::-1]).T if self.fortran else arr.reshape(self.shape)
        # native byte order, C order, aligned and writable: what every runtime reads
        return np.ascontiguousarray(arr, dtype=self.dtype.newbyteorder("="))


def _split_input_spec(spec: str) -> tuple[str, str]:
    """NAME=FILE: split at the first ``=`` after which an existing file is named (an input name
    may contain ``=``, and so may a file name), else at the first ``=``."""
    cuts = [i for i, c in enumerate(spec) if c == "="]
    for i in cuts:
        if i > 0 and os.path.lexists(spec[i + 1 :]):
            return spec[:i], spec[i + 1 :]
    name, _, file = spec.partition("=")
    if not cuts or not name or not file:
        raise InputError(f"--input takes NAME=FILE.npy, got {spec!r}")
    return name, file


def _read_npy_header(name: str, file: str) -> NpyInput:
    if not os.path.lexists(file):
        raise InputError(f"--input {name}: no such file {file!r}")
    label = f"--input {name}: {file!r}"
    with open_regular(file, label, InputError) as f:
        size = os.fstat(f.fileno()).st_size
        try:
            shape, fortran, dtype = read_npy_header(f)
        except (ValueError, EOFError, SyntaxError, TypeError) as exc:
            raise InputError(f"{label} is not a readable .npy array ({exc})") from None
        offset = f.tell()
    if dtype.hasobject or dtype.kind not in "biuf" or dtype.subdtype is not None:
        raise InputError(f"{label} holds a {dtype} array; model inputs are numbers (bool, int, uint, float)")
    declared = math.prod(int(d) for d in shape) * dtype.itemsize
    if declared != size - offset:
        raise InputError(
            f"{label} declares {dtype.name}[{','.join(map(str, shape))}] ({declared} bytes) "
            f"but holds {size - offset} bytes (truncated or not an .npy file)"
        )
    memory = physical_memory()
    if memory is not None and declared > memory:
        raise InputError(f"{label} holds {fmt_bytes(declared)}, more than this machine's memory ({fmt_bytes(memory)})")
    return NpyInput(name, file, tuple(int(d) for d in shape), dtype, bool(fortran), offset)


def _parse_inputs(specs: list[str]) -> dict[str, NpyInput]:
    """``--input`` options: each NAME once, each file a regular .npy file whose header is checked (not yet read)."""
    inputs: dict[str, NpyInput] = {}
    for spec in specs:
        name, file = _split_input_spec(spec)
        if name in inputs:
            raise InputError(f"--input names {name!r} twice (once per model input)")
        inputs[name] = _read_npy_header(name, file)
    return inputs


def _read_inputs(given: dict[str, NpyInput]) -> dict[str, np.ndarray]:
    return {name: spec.read() for name, spec in given.items()}


def _check_given_against_onnx(proto: Any, given: dict[str, NpyInput]) -> None:
    """Names, dtypes and fixed dimensions of ``--input`` arrays against the ONNX model's declared inputs,
    from the .npy headers (before any array is read). Symbolic dimensions take any size."""
    from onnx import helper

    inits = {t.name for t in proto.graph.initializer} | {sp.values.name for sp in proto.graph.sparse_initializer}
    declared = {vi.name: vi for vi in proto.graph.input if vi.name not in inits}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise InputError(f"unknown input(s) {', '.join(map(repr, unknown))}; the model takes {', '.join(declared)}")
    for name, spec in given.items():
        if not declared[name].type.HasField("tensor_type"):
            continue  # a sequence or map: the import refuses it by name
        tt = declared[name].type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
        except (KeyError, ValueError, TypeError):
            continue  # the import names the unsupported type
        dims = (
            [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else None
        )
        fits = spec.dtype.name == dtype and (
            dims is None or (len(dims) == len(spec.shape) and all(d in (None, n) for d, n in zip(dims, spec.shape)))
        )
        if not fits:
            want = "" if dims is None else "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"
            raise InputError(
                f"input {name!r} must be {dtype}{want}, got {spec.dtype.name}[{','.join(map(str, spec.shape))}] "
                f"({spec.path})"
            )


INPUT_SHAPE_HELP = (
    "NAME=D0,D1,... fixes the shape of a model input with symbolic dimensions (repeatable), "
    "e.g. --input-shape data=4,3,224,224. Unset symbolic batch dimensions default to 1."
)
InputShapeOption = Annotated[Optional[list[str]], typer.Option("--input-shape", "-s", help=INPUT_SHAPE_HELP)]


def _parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, dims = spec.rpartition("=")
        if not sep or not name or not dims:
            raise InputError(f"--input-shape takes NAME=D0,D1,... (e.g. data=1,3,224,224), got {spec!r}")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise InputError(
                f"--input-shape {name}: dimensions must be integers separated by commas, got {dims!r}"
            ) from None
        if any(d < 1 for d in shape):
            raise InputError(f"--input-shape {name}: dimensions must be positive, got {dims!r}")
        if name in shapes:
            raise InputError(f"--input-shape names {name!r} twice")
        shapes[name] = shape
    return shapes


def _declared_inputs(model: Path) -> dict[str, tuple[str, list[int | None] | None]] | None:
    """The ONNX model's inputs as declared: ``{name: (dtype, dims or None)}``, None for a symbolic
    dimension; None when the file cannot be read as a model (the import then says why)."""
    import onnx
    from onnx import helper

    try:
        proto = onnx.load_model(str(model), load_external_data=False)
    except Exception:
        return None
    inits = {t.name for t in proto.graph.initializer} | {sp.values.name for sp in proto.graph.sparse_initializer}
    found: dict[str, tuple[str, list[int | None] | None]] = {}
    for vi in proto.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
        except (KeyError, ValueError, TypeError):
            dtype = "?"
        dims = (
            [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else None
        )
        found[vi.name] = (dtype, dims)
    return found


def _check_input_shapes(model: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """``--input-shape`` values against the model's declared inputs, in the option's terms: each names
    an input, with its rank, and agrees with the dimensions the model fixes."""
    if not shapes or _looks_like_artifact(model):
        return
    declared = _declared_inputs(model)
    if declared is None:
        return
    for name, shape in shapes.items():
        given = f"-s/--input-shape {name}={','.join(map(str, shape))}"
        if name not in declared:
            raise InputError(f"{given}: the model has no input {name!r} (its inputs: {', '.join(declared) or 'none'})")
        dtype, dims = declared[name]
        if dims is None:
            continue
        want = f"{dtype}[{','.join('?' if d is None else str(d) for d in dims)}]"
        if len(dims) != len(shape):
            raise InputError(f"{given}: input {name!r} is {want}, rank {len(dims)}; give {len(dims)} dimensions")
        for axis, (d, n) in enumerate(zip(dims, shape)):
            if d is not None and d != n:
                raise InputError(
                    f"{given}: input {name!r} is {want}, fixed at {d} on axis {axis}; "
                    "-s/--input-shape sets the symbolic dimensions (?) only"
                )


def _note_fixed_dims(model: Path, graph: accel.Graph, shapes: dict[str, tuple[int, ...]]) -> None:
    """Say on stderr which symbolic input dimensions the import fixed, to what, and how to choose them."""
    from accel.frontend.onnx import symbolic_input_dims

    types = {v.name: v.type.shape for v in graph.inputs}
    for name, dims in symbolic_input_dims(model).items():
        shape = types.get(name)
        if shape is None:
            continue
        fixed = ", ".join(f"{sym!r} (axis {axis}) = {shape[axis]}" for axis, sym in dims)
        if name in shapes:
            line = f"input {name!r}: symbolic dimension(s) {fixed}, as given"
        else:
            choose = f"{name}={','.join(map(str, shape))}"
            line = f"input {name!r}: symbolic dimension(s) {fixed} by default; choose with -s/--input-shape {choose}"
        err.print(f"note: {line}", markup=False, highlight=False, soft_wrap=True)


#: Most runs ``accel run --repeat`` times.
MAX_REPEAT = 1_000_000

#: Largest total size of the random inputs ``accel run`` makes up (1 GiB).
RANDOM_INPUT_BYTES = 1 << 30


def random_inputs(graph: accel.Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs matching the graph's signature (uniform [0, 1) for floats)."""
    try:
        valid = operator.index(seed) >= 0  # numpy integers too; not 1.5
    except TypeError:
        valid = False
    if not valid:
        raise InputError(f"the seed of random inputs must be an integer >= 0, got {seed!r}")
    total = sum(v.type.nbytes for v in graph.inputs)
    if total > RANDOM_INPUT_BYTES:
        raise InputError(
            f"the model's inputs take {total} bytes, more than random inputs are made for "
            f"({RANDOM_INPUT_BYTES} bytes): give them with --input NAME=FILE.npy"
        )
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


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare the paths they name
        return os.path.realpath(a) == os.path.realpath(b)


def _check_outputs(outputs: list[tuple[Optional[Path], str]], inputs: list[Optional[Path]]) -> None:
    """Refuse output paths that cannot be written (accel.files), or that name one of the command's
    input files or each other (the run would destroy what it reads), before any work is done."""
    named = [(path, option) for path, option in outputs if path is not None]
    for i, (path, option) in enumerate(named):
        label = f"{option} {str(path)!r}"
        check_output(path, label, InputError)
        if path.exists() and stat.S_ISCHR(path.stat().st_mode):
            continue  # a device (/dev/null) may take several outputs, and is nobody's input
        for source in inputs:
            if source is not None and _same_file(path, source):
                raise InputError(f"{label} is the input file {str(source)!r}: give another output name")
        for other, other_option in named[:i]:
            if _same_file(path, other):
                raise InputError(f"{label} is also given to {other_option}: give each output its own file")


def _check_memory(runner: Any) -> None:
    """Refuse to run a model that needs more memory than this machine has, before it runs.

    Allocating that would not fail cleanly: the kernel may kill the process instead. The
    need is the executor's estimate of what one run holds at once (inputs, constants and
    the intermediate values alive together); one tensor alone over the limit is named.
    """
    limit = physical_memory()
    if limit is None:
        return
    graph = runner.graph
    values = [*graph.inputs, *(v for n in graph.walk() for v in n.outputs)]
    big = max(values, key=lambda v: v.type.nbytes, default=None)
    if big is not None and big.type.nbytes > limit:
        raise InputError(
            f"tensor {big.name!r} ({big.type}) takes {big.type.nbytes} bytes, more than this machine's "
            f"memory ({limit} bytes): the model cannot run here"
        )
    need = runner.peak_bytes
    if need > limit:
        raise InputError(
            f"a run of this model holds {fmt_bytes(need)} at once (its inputs, constants and the intermediate "
            f"values alive together), more than this machine's memory ({fmt_bytes(limit)}): it cannot run here"
        )


def _write_npz(f: BinaryIO, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` as an .npz archive (what np.load reads), keyed by name whatever the names are
    (``np.savez`` takes them as keyword arguments, so an output called ``file`` would clash)."""
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(arr), allow_pickle=False)


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    write_output(path, f"--output {str(path)!r}", InputError, lambda f: _write_npz(f, arrays))


def _timing(seconds: list[float]) -> str:
    ms = np.array(seconds) * 1e3
    if len(ms) == 1:
        return f"{ms[0]:.3f} ms"
    return f"mean {ms.mean():.3f} ms, median {np.median(ms):.3f} ms, min {ms.min():.3f} ms over {len(ms)} runs"


def artifact_summary(report: Any) -> str:
    """One short line for a compiled model: partitions per backend and the host-op count.

    The counts are the partition report's, the same figures ``accel compile``
    prints, and the line stays short however many partitions there are.
    """
    host = len(report.host_nodes())
    by_backend = report.by_backend()
    if not by_backend:
        return f"everything on the host, {host} host op(s)"
    parts = ", ".join(
        f"{len(ps)} on {backend} ({sum(len(p.nodes) for p in ps)} ops)" for backend, ps in by_backend.items()
    )
    return f"{len(report.partitions)} partition(s): {parts}; {host} host op(s)"


#: ``accel run --compare`` defaults: float outputs agree when ``|a - b| <= atol + rtol * |b|`` everywhere
#: (``b`` the other runtime's value, as numpy.isclose), uint8/int8 outputs when no value is more
#: than ``max_quantum_diff`` steps apart (a rounding tie may fall either way: one step).
DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-3
DEFAULT_MAX_QUANTUM_DIFF = 1

QUANTIZED_DTYPES = ("uint8", "int8")


@dataclass(frozen=True)
class Tolerance:
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    max_quantum_diff: int = DEFAULT_MAX_QUANTUM_DIFF

    def describe(self) -> str:
        return (
            f"tolerance --atol {self.atol:g} --rtol {self.rtol:g}, uint8/int8 outputs "
            f"--max-quantum-diff {self.max_quantum_diff}"
        )


@dataclass(frozen=True)
class OutputComparison:
    """One output of ``accel run --compare``: its differences and, past the tolerance, why it fails."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    #: Quantized outputs: values one step apart, and further apart.
    one_step: int | None = None
    more_steps: int | None = None
    #: [N, C] float outputs: rows whose top-1 (top-5) classes agree, of N.
    top1: int | None = None
    top5: int | None = None
    rows: int | None = None
    failure: str | None = None


def compare_outputs(
    got: dict[str, np.ndarray], expected: dict[str, np.ndarray], tolerance: Tolerance = Tolerance()
) -> list[OutputComparison]:
    """``got`` (accel's outputs) against ``expected`` (the other runtime's), output by output.

    Outputs are matched by name, else in order when the names differ but the counts agree.
    Differences are measured in float64; NaN equals NaN. A uint8/int8 output is judged by the
    largest step between values, any other by ``|a - b| <= atol + rtol * |b|``.
    """
    if set(got) != set(expected):
        if len(got) != len(expected):
            raise InputError(
                f"the outputs differ: accel gives {', '.join(map(repr, got))}, the other runtime "
                f"{', '.join(map(repr, expected))}"
            )
        expected = dict(zip(got, expected.values()))
    found = []
    for name, a in got.items():
        b = np.asarray(expected[name])
        shape = tuple(int(d) for d in a.shape)
        if a.shape != b.shape:
            found.append(
                OutputComparison(
                    name,
                    a.dtype.name,
                    shape,
                    math.inf,
                    math.inf,
                    failure=f"output {name!r} has shape {list(a.shape)}, the other runtime's {list(b.shape)}",
                )
            )
            continue
        x, y = a.astype(np.float64), b.astype(np.float64)
        diff = np.abs(x - y)
        both_nan = np.isnan(x) & np.isnan(y)
        diff[both_nan] = 0.0
        diff[np.isnan(diff)] = math.inf
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(diff == 0, 0.0, diff / np.abs(y))
        max_abs = float(diff.max()) if diff.size else 0.0
        max_rel = float(rel.max()) if rel.size else 0.0
        if a.dtype.name in QUANTIZED_DTYPES and b.dtype.name == a.dtype.name:
            steps = diff
            failure = None
            if max_abs > tolerance.max_quantum_diff:
                i = int(np.argmax(steps))
                failure = (
                    f"output {name!r} ({a.dtype.name}) differs by {max_abs:.0f} steps at {_index(i, a.shape)} "
                    f"({a.reshape(-1)[i]} vs {b.reshape(-1)[i]}), more than --max-quantum-diff "
                    f"{tolerance.max_quantum_diff}; {int(np.sum(steps > tolerance.max_quantum_diff))} of {a.size} values"
                )
            found.append(
                OutputComparison(
                    name,
                    a.dtype.name,
                    shape,
                    max_abs,
                    max_rel,
                    one_step=int(np.sum(steps == 1)),
                    more_steps=int(np.sum(steps > 1)),
                    failure=failure,
                )
            )
            continue
        allowed = tolerance.atol + tolerance.rtol * np.abs(y)
        excess = diff - allowed
        failure = None
        if excess.size and float(excess.max()) > 0:
            i = int(np.argmax(excess))
            failure = (
                f"output {name!r} differs by {diff.reshape(-1)[i]:.3g} at {_index(i, a.shape)} ({x.reshape(-1)[i]:.6g} vs "
                f"{y.reshape(-1)[i]:.6g}), more than --atol {tolerance.atol:g} + --rtol {tolerance.rtol:g} x "
                f"|{y.reshape(-1)[i]:.6g}| = {allowed.reshape(-1)[i]:.3g}; {int(np.sum(excess > 0))} of {a.size} values"
            )
        top1 = top5 = rows = None
        if a.ndim == 2 and a.dtype.kind == "f" and a.shape[1] >= 2 and a.shape[0] >= 1:
            rows = a.shape[0]
            top1 = int(np.sum(np.argmax(x, axis=1) == np.argmax(y, axis=1)))
            if a.shape[1] > 5:
                tx = np.sort(np.argsort(-x, axis=1, kind="stable")[:, :5], axis=1)
                ty = np.sort(np.argsort(-y, axis=1, kind="stable")[:, :5], axis=1)
                top5 = int(np.sum(np.all(tx == ty, axis=1)))
        found.append(
            OutputComparison(
                name, a.dtype.name, shape, max_abs, max_rel, top1=top1, top5=top5, rows=rows, failure=failure
            )
        )
    return found


def _index(flat: int, shape: tuple[int, ...]) -> list[int]:
    """The position of element ``flat`` of an array of ``shape``, as a list of indices."""
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []


def _comparison_table(verdicts: list[OutputComparison], other: str) -> Table:
    table = Table()
    for col in ("output", "dtype", "shape", "max |diff|", "max rel diff", "agreement", "within tolerance"):
        table.add_column(col, justify="right" if col.startswith("max") else "left")
    for v in verdicts:
        if v.one_step is not None:
            agreement = f"{v.one_step} values 1 step apart, {v.more_steps} more"
        elif v.top1 is not None:
            agreement = f"top-1 {v.top1}/{v.rows}" + (f", top-5 {v.top5}/{v.rows}" if v.top5 is not None else "")
        else:
            agreement = "-"
        table.add_row(
            Text(v.name),
            v.dtype,
            str(list(v.shape)),
            f"{v.max_abs:.3g}",
            f"{v.max_rel:.3g}",
            agreement,
            "yes" if v.failure is None else Text("NO", style="red"),
        )
    return table


def _parse_compare(spec: str, model: Path) -> tuple[str, Path | None]:
    """``--compare``: ("onnxruntime", the ONNX model it runs) or ("reference", None), checked against MODEL."""
    kind, sep, path = spec.partition("=")
    artifact = _looks_like_artifact(model)
    if kind == "reference" and not sep:
        if not artifact:
            raise InputError(
                "--compare reference compares an artifact with the reference executor, which is what runs an "
                "ONNX model already: compare a model with --compare onnxruntime"
            )
        return "reference", None
    if kind != "onnxruntime" or (sep and not path):
        raise InputError(f"--compare takes onnxruntime, onnxruntime=MODEL.onnx or reference, got {spec!r}")
    if not artifact:
        if sep:
            raise InputError(
                "--compare onnxruntime=MODEL.onnx is for an artifact; an ONNX model is compared with onnxruntime "
                "running that model: --compare onnxruntime"
            )
        return "onnxruntime", model
    if not sep:
        raise InputError(
            "--compare onnxruntime on an artifact needs the ONNX model it was compiled from: "
            "--compare onnxruntime=MODEL.onnx (or --compare reference: its host graph on the reference executor)"
        )
    source = Path(path)
    if not source.is_file():
        raise InputError(f"--compare onnxruntime={path}: no such file")
    if _looks_like_artifact(source):
        raise InputError(f"--compare onnxruntime={path} is an artifact; give the ONNX model it was compiled from")
    return "onnxruntime", source


def cpu_has_vnni() -> bool:
    """Whether the CPU multiplies int8 with VNNI (AVX512_VNNI or AVX-VNNI)."""
    from accel._cpu import cpu_flags

    return bool(cpu_flags() & {"avx512_vnni", "avx_vnni"})


def ort_session(model: Path | bytes, *, quantized: bool = False, threads: int | None = None) -> Any:
    """An onnxruntime CPU session to compare with: idle worker threads sleep
    (``session.intra_op.allow_spinning=0``), and a quantized model on a CPU without VNNI runs on
    ONNX Runtime's exact int8 kernels (``session.x64quantprecision=1``; the default ones saturate
    16-bit pair sums there, results the reference kernels would not match)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise InputError("--compare onnxruntime needs ONNX Runtime: pip install onnxruntime") from None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if threads is not None:
        opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if quantized and not cpu_has_vnni():
        opts.add_session_config_entry("session.x64quantprecision", "1")
    source = model if isinstance(model, bytes) else str(model)
    try:
        return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT's own error types: the model is one ORT cannot run
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(
            f"onnxruntime cannot load {source if isinstance(source, str) else 'the model'}: {first}"
        ) from None


def _run_comparison(
    against: tuple[str, Path | None], graph: accel.Graph, inputs: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], str]:
    """The other runtime's outputs on ``inputs``, and its name for the report."""
    kind, source = against
    if kind == "reference":
        from accel.executor import ReferenceExecutor

        with err.status(Text("running the reference executor ..."), spinner="dots"):
            return ReferenceExecutor(graph).run(inputs), "the reference executor (the artifact's host graph)"
    assert source is not None
    import onnxruntime as ort  # (ort_session says how to install it)

    quantized = any(v.type.dtype in QUANTIZED_DTYPES for n in graph.walk() for v in n.outputs)
    with err.status(Text(f"running {source.name} on onnxruntime ..."), spinner="dots"):
        sess = ort_session(source, quantized=quantized)
        names = [i.name for i in sess.get_inputs()]
        missing = [n for n in names if n not in inputs]
        if missing:
            raise InputError(
                f"{source.name} takes input(s) {', '.join(map(repr, missing))} that the run does not: "
                "is it the model the artifact was compiled from?"
            )
        try:
            values = sess.run(None, {n: inputs[n] for n in names})
        except Exception as exc:
            raise InputError(f"onnxruntime cannot run {source.name}: {str(exc).strip().splitlines()[0]}") from None
    outputs = {o.name: np.asarray(v) for o, v in zip(sess.get_outputs(), values)}
    precise = "" if not quantized or cpu_has_vnni() else ", exact int8 kernels"
    return outputs, f"onnxruntime {ort.__version__} (CPU{precise}) running {source.name}"


def _load_runner(
    path: Path, shapes: dict[str, tuple[int, ...]], given: dict[str, NpyInput] | None, threads: int | None = None
) -> tuple[Any, str, dict[str, np.ndarray] | None]:
    """An executor for ``path`` (a compiled artifact, or an ONNX model on the reference executor),
    its headline, and the inputs it runs on (None: random ones for its graph)."""
    from accel.artifact import read_artifact

    if _looks_like_artifact(path):
        if shapes:
            raise InputError(
                "--input-shape applies to a model; an artifact's input shapes were fixed when it was compiled"
            )
        with err.status(Text(f"loading {path.name} ..."), spinner="dots"):
            artifact = read_artifact(path)
            executable = artifact.executable(threads)
        headline = f"{path.name}: {artifact_summary(artifact.report)}"
        if given is None:
            return executable, headline, None
        executable.check_inputs({name: spec.stand_in() for name, spec in given.items()})
        return executable, headline, _read_inputs(given)
    from accel.executor import ReferenceExecutor

    if given is None:
        graph = _load_model(path, shapes)
        _note_fixed_dims(path, graph, shapes)
        return ReferenceExecutor(graph), f"{path.name}: {len(graph.nodes)} ops on the reference executor", None
    # given inputs: symbolic dimensions take their shapes, operands that fix a shape their values
    from accel.frontend.specialize import SpecializedModel

    with err.status(Text(f"importing {path.name} ..."), spinner="dots"):
        model = SpecializedModel(path, input_shapes=shapes)
        _check_given_against_onnx(model.proto, given)
        arrays = _read_inputs(given)
        graph, rest = model.graph_for(arrays)
    executor = ReferenceExecutor(graph)
    _note_fixed_dims(path, graph, {**shapes, **{k: v.shape for k, v in arrays.items()}})
    headline = f"{path.name}: {len(graph.nodes)} ops on the reference executor"
    if model.bound_inputs:
        headline += f", specialized on the values of {', '.join(model.bound_inputs)}"
    return executor, headline, rest


@app.command()
def run(
    model: Annotated[
        Optional[Path],
        typer.Argument(
            help="A compiled .accel artifact, or an ONNX model (run on the host's reference executor). "
            "Default: the embedded quantized digits model, scored on its held-out digits."
        ),
    ] = None,
    input: Annotated[
        Optional[list[str]],
        typer.Option("--input", "-i", help="NAME=FILE.npy, once per model input. Default: random data."),
    ] = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Write the outputs to this .npz file.")
    ] = None,
    repeat: Annotated[
        int, typer.Option("--repeat", "-n", min=1, max=MAX_REPEAT, help="Run this many times and report the timing.")
    ] = 1,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random inputs (0 or more).")] = 0,
    input_shape: InputShapeOption = None,
    threads: Annotated[
        Optional[int],
        typer.Option(
            "--threads",
            "-t",
            min=1,
            max=MAX_THREADS,
            help="Threads the artifact's partitions compute with. Default: ACCEL_NUM_THREADS, else every core.",
        ),
    ] = None,
    compare: Annotated[
        Optional[str],
        typer.Option(
            "--compare",
            "-c",
            help="Compare the outputs with another runtime on the same inputs: 'onnxruntime' (an ONNX model; "
            "an artifact: 'onnxruntime=MODEL.onnx', the model it was compiled from) or 'reference' (an artifact: "
            "its host graph, partitions included, on the reference executor). Exit code 1 past the tolerance.",
        ),
    ] = None,
    atol: Annotated[
        float, typer.Option("--atol", min=0.0, help="--compare: absolute tolerance of float outputs.")
    ] = DEFAULT_ATOL,
    rtol: Annotated[
        float,
        typer.Option(
            "--rtol", min=0.0, help="--compare: relative tolerance of float outputs (|a-b| <= atol + rtol*|b|)."
        ),
    ] = DEFAULT_RTOL,
    max_quantum_diff: Annotated[
        int,
        typer.Option(
            "--max-quantum-diff", min=0, help="--compare: largest difference allowed in uint8/int8 outputs, in steps."
        ),
    ] = DEFAULT_MAX_QUANTUM_DIFF,
) -> None:
    """Run a compiled artifact or a model and print its outputs and timing.

    An ONNX model given --input arrays is imported for them: symbolic dimensions
    take the arrays' shapes, and inputs that fix a shape (a Reshape's shape, a
    Resize's sizes ...) are specialized on their values. An artifact's partitions
    run on as many threads as --threads says (the artifact does not fix it).

    --compare runs a second runtime on the same inputs and prints, per output, the
    largest absolute and relative differences, top-1/top-5 agreement of [N, C]
    scores and, for uint8/int8 outputs, how many values differ by one step and by
    more; past --atol/--rtol (--max-quantum-diff) it says which output and exits 1.
    """
    shapes = _parse_input_shapes(input_shape)
    if threads is not None and (model is None or not _looks_like_artifact(model)):
        raise InputError("--threads applies to a compiled .accel artifact (a model runs on the reference executor)")
    if model is None:
        if input or output or shapes or compare:
            raise InputError(
                "--input/--output/--input-shape/--compare need a MODEL; without one, run scores the embedded "
                "digits model"
            )
        _run_default(repeat)
        return
    against = _parse_compare(compare, model) if compare is not None else None
    _check_input_shapes(model, shapes)
    given = _parse_inputs(input or []) if input else None
    _check_outputs([(output, "--output")], [model, *(Path(g.path) for g in (given or {}).values())])
    runner, headline, inputs = _load_runner(model, shapes, given, threads)
    _check_memory(runner)
    if against is None and given is None and output is None and _is_digits_artifact(model, runner.graph):
        _score_digits_artifact(runner, headline, repeat)
        return
    if inputs is None:
        inputs = random_inputs(runner.graph, seed)
    times = []
    for _ in track(range(repeat), description="running", console=err, transient=True, disable=repeat < 5):
        t0 = time.perf_counter()
        results = runner.run(inputs)
        times.append(time.perf_counter() - t0)
    on = f"; threads: {runner.threads}" if getattr(runner, "handles", None) else ""
    footer = f"inputs: {'given' if input else f'random (seed {seed})'}{on}; time: {_timing(times)}"
    if against is not None:
        # onnxruntime reads every input of the ONNX model, those the import specialized on included
        feed = _read_inputs(given) if given is not None and against[0] == "onnxruntime" else inputs
        expected, label = _run_comparison(against, runner.graph, feed)
        tolerance = Tolerance(atol, rtol, max_quantum_diff)
        verdicts = compare_outputs(results, expected, tolerance)
        out.print(headline)
        out.print(f"compared with {label}; {tolerance.describe()}")
        out.print(_comparison_table(verdicts, against[0]))
        out.print(footer)
        if output is not None:
            _save_npz(output, results)
            out.print(f"wrote {output}")
        failed = [v for v in verdicts if v.failure is not None]
        if failed:
            err.print(
                f"mismatch: {'; '.join(str(v.failure) for v in failed)}", markup=False, highlight=False, soft_wrap=True
            )
            raise typer.Exit(1)
        return
    out.print(headline)
    table = Table()
    for col in ("output", "dtype", "shape", "min", "max", "mean"):
        table.add_column(col, justify="left" if col in ("output", "dtype", "shape") else "right")
    for name, arr in results.items():
        a = arr.astype(np.float64) if arr.size else np.zeros(1)
        table.add_row(name, arr.dtype.name, str(list(arr.shape)), f"{a.min():.6g}", f"{a.max():.6g}", f"{a.mean():.6g}")
    out.print(table)
    out.print(footer)
    if output is not None:
        _save_npz(output, results)
        out.print(f"wrote {output}")


def _looks_like_artifact(path: Path) -> bool:
    from accel.artifact import is_artifact

    return path.suffix == ".accel" or is_artifact(path)


def _is_digits_artifact(path: Path, graph: Any) -> bool:
    """True for an artifact with the embedded digits model's signature (compiled from it, as `accel compile` does by default)."""
    if path.suffix != ".accel":
        return False
    ins, outs = graph.inputs, graph.outputs
    return (
        len(ins) == 1
        and len(outs) == 1
        and (ins[0].name, ins[0].type.dtype, tuple(ins[0].type.shape)) == ("image", "float32", (1, 1, 8, 8))
        and (outs[0].name, outs[0].type.dtype, tuple(outs[0].type.shape)) == ("probabilities", "float32", (1, 10))
    )


def _score_digits_artifact(runner: Any, headline: str, repeat: int) -> None:
    """Score an artifact of the embedded digits model on the held-out digits, next to the reference executor."""
    from accel.executor import ReferenceExecutor
    from accel.models import default_model_path, load_digits_test

    images, labels = load_digits_test()

    def score(run: Any) -> tuple[np.ndarray, float]:
        preds = np.empty(len(images), dtype=np.int64)
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for i in range(len(images)):
                preds[i] = int(np.argmax(run({"image": images[i : i + 1]})["probabilities"]))
            best = min(best, time.perf_counter() - t0)
        return preds, best / len(images) * 1e3

    got, t_art = score(runner.run)
    ref, t_ref = score(ReferenceExecutor(_load_model(default_model_path(quantized=True))).run)
    out.print(headline)
    out.print(f"the embedded digits model's artifact: {len(images)} held-out handwritten digits")
    table = Table()
    table.add_column("runtime")
    table.add_column("accuracy", justify="right")
    table.add_column("time / image", justify="right")
    table.add_row("this artifact", f"{float(np.mean(got == labels)):.2%}", f"{t_art:.3f} ms")
    table.add_row("accel reference executor", f"{float(np.mean(ref == labels)):.2%}", f"{t_ref:.3f} ms")
    out.print(table)
    threads = f"; threads: {runner.threads}" if getattr(runner, "handles", None) else ""
    out.print(f"predictions identical on {int(np.sum(got == ref))}/{len(images)} images{threads}")


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
        # exact uint8 x int8 products on CPUs without VNNI (ORT's default kernels saturate there)
        opts.add_session_config_entry("session.x64quantprecision", "1")
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


BACKENDS_HELP = "Backends in priority order, comma-separated (e.g. ethosn,acl). See `accel backends`."
TARGET_HELP = 'A composite target file: {"host": "cpu", "devices": [{"kind": "ethosn", "options": {...}}, ...]}.'


def _target(backends: Optional[str], target: Optional[Path]) -> Any:
    from accel.compiler import resolve_target

    return resolve_target(backends, str(target) if target is not None else None)


def parse_duration(text: str) -> float:
    """Seconds from ``60``, ``60s``, ``1.5m`` or ``1h``; an :class:`InputError` otherwise."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    t = text.strip().lower()
    scale = units.get(t[-1:])
    number = t[:-1] if scale is not None else t
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise InputError(f"--tune-budget must be a duration such as 60, 60s or 2m, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise InputError(f"--tune-budget must be a duration of zero or more, got {text!r}")
    return value


def _tune_options(tune: bool, budget: Optional[str], threads: Optional[int]) -> Any:
    if not tune:
        if budget is not None or threads is not None:
            raise InputError("--tune-budget and --tune-threads apply with --tune")
        return None
    from accel.tune import TuneOptions

    if threads is not None and threads < 1:
        raise InputError(f"--tune-threads must be at least 1, got {threads}")
    return TuneOptions(budget=parse_duration(budget) if budget is not None else 60.0, threads=threads)


@app.command()
def compile(
    model: Annotated[
        Optional[Path], typer.Argument(help="ONNX model. Default: the embedded quantized digits model.")
    ] = None,
    backends: Annotated[Optional[str], typer.Option("--backends", "-b", help=BACKENDS_HELP)] = None,
    target: Annotated[Optional[Path], typer.Option("--target", "-t", help=TARGET_HELP)] = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="The artifact to write. Default: MODEL's stem + .accel.")
    ] = None,
    report: Annotated[
        Optional[Path], typer.Option("--report", help="Also write the partition report as one HTML page.")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List every host node with its reasons.")] = False,
    input_shape: InputShapeOption = None,
    tune: Annotated[
        bool,
        typer.Option(
            "--tune",
            help="Choose the placement by measuring candidates on this machine (never slower than the plain "
            "priority placement; measurements are cached). See docs/partition.md.",
        ),
    ] = False,
    tune_budget: Annotated[
        Optional[str], typer.Option("--tune-budget", help="Time for --tune's search: 60, 60s, 2m. Default 60s.")
    ] = None,
    tune_threads: Annotated[
        Optional[int],
        typer.Option(
            "--tune-threads",
            help="Threads to measure with, as the artifact will run. Default: ACCEL_NUM_THREADS or every core.",
        ),
    ] = None,
) -> None:
    """Partition a model for a host plus backends and write one .accel artifact.

    Every node goes to the first backend (in --backends order) that takes it;
    the rest runs on the host. The table shows the partitions per backend and
    why the ops left on the host were declined. With --tune, the placement is
    the fastest measured on this machine instead.
    """
    from accel.compiler import compile as compile_model
    from accel.render import print_report, report_to_html

    if model is None:
        from accel.models import default_model_path

        model = default_model_path(quantized=True)
    shapes = _parse_input_shapes(input_shape)
    tgt = _target(backends, target)
    _check_input_shapes(model, shapes)
    tune_options = _tune_options(tune, tune_budget, tune_threads)
    out_path = output if output is not None else Path(model.stem + ".accel")
    # the default output equals MODEL only for an artifact, which the import refuses with its own message
    _check_outputs([(out_path, "--output"), (report, "--report")], [model if output is not None else None, target])
    t0 = time.perf_counter()
    with err.status(Text(f"compiling {model.name} for {tgt.describe()} ..."), spinner="dots") as status:
        shown = [0.0]

        def progress(stage: str, done: int, total: int) -> None:
            # (called once per partition: the line changes at most 20 times a second, as it can be read)
            now = time.perf_counter()
            if now - shown[0] >= 0.05 or done == 0 or done == total:
                shown[0] = now
                status.update(Text(f"compiling {model.name}: {stage} {done}/{total} ..."))

        artifact = compile_model(model, target=tgt, input_shapes=shapes, progress=progress, tune=tune_options)
        html = report_to_html(artifact.report, f"{model.name} on {tgt.describe()}") if report is not None else ""
        artifact.save(out_path)
        if report is not None:
            try:
                _write_text(report, html)
            except AccelError:  # both outputs or neither: the artifact just written (a file) goes
                written = Path(os.path.realpath(out_path))
                if written.is_file():
                    written.unlink()
                raise
    _note_fixed_dims(model, artifact.graph, shapes)
    elapsed = time.perf_counter() - t0
    print_report(artifact.report, out, verbose=verbose)
    if tgt.devices and not artifact.report.partitions:
        err.print(
            f"warning: no node was offloaded to {', '.join(tgt.backend_names())}: the whole model runs on the "
            "host (the table above says why each backend declined)",
            markup=False,
            soft_wrap=True,
        )
    elif tgt.devices:
        warning = offload_warning(artifact.report, artifact.graph)
        if warning is not None:
            err.print(f"warning: {warning}", markup=False, soft_wrap=True)
    if report is not None:
        out.print(f"wrote {report}")
    size = out_path.stat().st_size
    out.print(f"wrote {out_path} ({size / 1e6:.2f} MB) in {elapsed:.2f} s")


#: A compile that offloads less than this share of the model's work warns.
OFFLOAD_WARNING_SHARE = 0.5


def offload_warning(report: Any, graph: accel.Graph, *, reasons: int = 2) -> str | None:
    """One line when less than :data:`OFFLOAD_WARNING_SHARE` of the model's work was offloaded: the
    share, and the reasons that keep the most work on the host. None when most of it was.

    Work is counted in MACs (multiply-accumulates), or in operations for a model without any
    (:func:`accel.backend.count_work`); a host node's share is its own count, and each reason's
    the sum over the host nodes declined with it.
    """
    from accel.backend import count_work
    from accel.render import _si

    by_name = {n.name: n for n in graph.nodes}
    host = [(n, count_work(by_name[n.name]) if n.name in by_name else (0, 0)) for n in report.host_nodes()]
    macs = (sum(p.macs for p in report.partitions), sum(m for _, (_, m) in host))
    work = (sum(p.work for p in report.partitions), sum(w for _, (w, _) in host))
    unit, (done, left), pick = ("MACs", macs, 1) if sum(macs) > 0 else ("work", work, 0)
    total = done + left
    if total == 0 or done >= OFFLOAD_WARNING_SHARE * total:
        return None
    groups: dict[str, list[int]] = {}
    for node, counts in host:
        why = "; ".join(f"{b}: {r}" for b, r in node.reasons.items()) or f"no backend takes {node.op}"
        group = groups.setdefault(why, [0, 0])
        group[0] += 1
        group[1] += counts[pick]
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))
    biggest = [kv for kv in ranked if kv[1][1] > 0][:reasons] or ranked[:reasons]
    listed = "; ".join(
        f"{why} ({count} node{'s' if count > 1 else ''}, {share / total:.1%})" for why, (count, share) in biggest
    )
    what = "MACs are" if unit == "MACs" else "work (operations) is"
    return (
        f"only {done / total:.1%} of the model's {what} offloaded ({_si(done)} of {_si(total)}), "
        f"the host runs the rest; biggest reasons: {listed}"
    )


def _write_text(path: Path, text: str) -> None:
    write_output(path, repr(str(path)), InputError, lambda f: f.write(text.encode("utf-8")))


@app.command()
def inspect(
    model: Annotated[Path, typer.Argument(help="An ONNX model or a compiled .accel artifact.")],
    backends: Annotated[
        Optional[str], typer.Option("--backends", "-b", help=BACKENDS_HELP + " Shows how MODEL would be partitioned.")
    ] = None,
    target: Annotated[Optional[Path], typer.Option("--target", "-t", help=TARGET_HELP)] = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="text, json or html. For a model without --backends: the IR (text) or its graph document (json). "
            "With --backends, or for an artifact: the partition report (html: one self-contained page).",
        ),
    ] = "text",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to this file, not stdout.")] = None,
    raw: Annotated[bool, typer.Option(help="Model IR as imported, before the simplifying passes.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List every host node with its reasons.")] = False,
    input_shape: InputShapeOption = None,
) -> None:
    """Show a model's IR, how it partitions for a target, or what an artifact holds."""
    from accel.artifact import is_artifact, read_artifact
    from accel.render import print_report, report_to_html, report_to_json

    if format not in ("text", "json", "html"):
        raise InputError(f"--format must be text, json or html, got {format!r}")
    _check_outputs([(output, "--output")], [model, target])
    shapes = _parse_input_shapes(input_shape)
    _check_input_shapes(model, shapes)
    if model.suffix == ".accel" or is_artifact(model):
        if backends or target or shapes:
            raise InputError(
                "--backends/--target/--input-shape apply to a model; an artifact was compiled for its own target "
                "and input shapes"
            )
        artifact = read_artifact(model)
        rep, title = artifact.report, f"{model.name} ({artifact.target.describe()})"
    elif backends is None and target is None:
        if format == "html":
            raise InputError("--format html draws a partitioning: give --backends (or --target)")
        with err.status(Text(f"importing {model.name} ..."), spinner="dots"):
            graph = accel.import_onnx(model, optimize=not raw, input_shapes=shapes)
        _note_fixed_dims(model, graph, shapes)
        if format == "text":
            text = str(graph) + "\n"
        else:
            from accel.serialize import graph_to_json

            doc, _ = graph_to_json(graph)
            text = json.dumps(doc, indent=1) + "\n"
        _emit(text, output)
        return
    else:
        from accel.partition import partition_report

        tgt = _target(backends, target)
        instances = tgt.instantiate()
        with err.status(Text(f"partitioning {model.name} for {tgt.describe()} ..."), spinner="dots"):
            graph = accel.import_onnx(model, input_shapes=shapes)
            rep = partition_report(graph, instances)
        _note_fixed_dims(model, graph, shapes)
        title = f"{model.name} on {tgt.describe()}"
    if format == "json":
        _emit(json.dumps(report_to_json(rep), indent=1) + "\n", output)
    elif format == "html":
        _emit(report_to_html(rep, title), output)
    elif output is not None:
        console = WideWhenPiped(record=True, highlight=False, markup=False, file=open(os.devnull, "w"))  # noqa: SIM115
        print_report(rep, console, verbose=verbose)
        _emit(console.export_text(), output)
    else:
        out.print(title)
        print_report(rep, out, verbose=verbose)


def _emit(text: str, output: Optional[Path]) -> None:
    if output is None:
        sys.stdout.write(text)
    else:
        _write_text(output, text)
        err.print(f"wrote {output}")


def constraint_text(check: Any) -> str:
    """What a support-table check requires, for a listing: the first line of its docstring, else
    where to read it (the check's name), else that nothing beyond the op or pattern is required."""
    import inspect as pyinspect

    if check is None:
        return "any (no check beyond the op or pattern)"
    doc = pyinspect.getdoc(check)
    if doc and doc.strip():
        return doc.strip().splitlines()[0].strip()
    func = getattr(check, "__func__", check)
    module = getattr(func, "__module__", None) or "?"
    qualname = getattr(func, "__qualname__", None) or type(check).__name__
    if qualname.endswith("<lambda>"):
        return f"checked by a lambda in {module} (no description)"
    return f"checked by {module}.{qualname} (no description)"


def _pattern_text(pattern: Any) -> str:
    """A pattern as its ops read left to right, without the labels the serializer uses (``@conv``)."""
    import re

    return re.sub(r"@[A-Za-z_][\w.]*", "", repr(pattern))


def print_backend_support(backend_name: str, console: Console, name: str | None = None) -> int:
    """Print a backend's support table: its composites (pattern and check) in priority order and
    its single ops with their checks; ``name`` keeps the entries whose name or ops contain it.
    Returns how many entries were printed."""
    from accel.plugins import get_backend

    cls = get_backend(backend_name)
    backend = cls()
    want = (name or "").lower()
    entries = [
        e
        for e in backend.pattern_table()
        if want in e.name.lower() or any(want in op.lower() for op in e.pattern.ops())
    ]
    single = sorted((op, check) for op, check in backend.op_checks().items() if want in op.lower())
    if name and not entries and not single:
        return 0
    head = f"{cls.name} ({cls.distribution} {cls.version}, {cls.layout} inside its partitions)"
    console.print(
        f"{head}: {len(entries)} composite(s), {len(single)} single op(s)" + (f" matching {name!r}" if name else "")
    )
    if entries:
        table = Table(title=f"{cls.name} composites, first match wins", title_justify="left")
        table.add_column("composite", no_wrap=True)
        table.add_column("pattern (IR ops)")
        table.add_column("constraints")
        for e in entries:
            table.add_row(f"{cls.name}.{e.name}", _pattern_text(e.pattern), constraint_text(e.check))
        console.print(table)
    if single:
        table = Table(title=f"{cls.name} single ops", title_justify="left")
        table.add_column("IR op", no_wrap=True)
        table.add_column("constraints")
        for op, check in single:
            table.add_row(op, constraint_text(check))
        console.print(table)
    return len(entries) + len(single)


@app.command()
def ops(
    name: Annotated[
        Optional[str], typer.Argument(help="Show only ops whose name contains this (case-insensitive).")
    ] = None,
    backend: Annotated[
        Optional[str],
        typer.Option(
            "--backend",
            "-b",
            help="List what this installed backend takes instead: its composites (pattern, constraints) in "
            "priority order and its single IR ops with their constraints, from its support table.",
        ),
    ] = None,
) -> None:
    """List the ONNX ops the importer converts and the IR ops they become, with one-line docs.

    With --backend NAME: what that backend takes, from its support table.
    """
    from accel.frontend.onnx import FOLD_ONLY_OPS, SUPPORTED_OPS
    from accel.ops import available, get_op

    if backend is not None:
        if not print_backend_support(backend, out, name):
            raise InputError(f"no composite or op of backend {backend!r} contains {name!r}; `accel ops -b {backend}`")
        return
    want = (name or "").lower()
    onnx_ops = [op for op in SUPPORTED_OPS if want in op.lower()]
    ir_ops = [op for op in available() if want in op.lower()]
    if not onnx_ops and not ir_ops:
        raise InputError(f"no ONNX or IR op name contains {name!r}; `accel ops` lists them all")
    console = out
    if onnx_ops:
        marked = [f"{op}*" if op in FOLD_ONLY_OPS else op for op in onnx_ops]
        console.print(f"ONNX ops (default domain, opsets 7-28) the importer converts: {len(onnx_ops)}")
        width = min(max(console.width, 60), 120)  # a list of names, laid out as a paragraph
        console.print(
            textwrap.fill(", ".join(marked), width, initial_indent="  ", subsequent_indent="  "), markup=False
        )
        if any(op in FOLD_ONLY_OPS for op in onnx_ops):
            note = (
                "* computed at import: Shape and Size from the static shapes, the others from constant inputs; "
                "when those are graph inputs, accel run --input and accel.execute specialize the model on their values"
            )
            console.print(textwrap.fill(note, width, initial_indent="  ", subsequent_indent="    "), markup=False)
    if ir_ops:
        table = Table(title=f"IR ops: {len(ir_ops)}", title_justify="left")
        table.add_column("op", no_wrap=True)
        table.add_column("what it computes")
        for op in ir_ops:
            doc = " ".join(get_op(op).doc.split())
            first = doc.split(". ")[0].rstrip(".") + "." if doc else ""
            table.add_row(op, first)
        console.print(table)


@app.command()
def backends(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show each broken plugin's full traceback.")] = False,
    ops: Annotated[
        bool,
        typer.Option("--ops", help="Also list each usable backend's composites and single ops with their constraints."),
    ] = False,
) -> None:
    """List the installed backend plugins: version, runtime ABI, the kernel library their runtime was built on, state, and what they support.

    Plugins are found through the `accel.backends` entry point group. Switches:
    ACCEL_DISABLE_PLUGINS=a,b skips plugins; ACCEL_LOAD_PLUGINS=a,b loads only those.
    """
    from accel.backend import ABI_VERSION
    from accel.plugins import statuses

    found = statuses()
    if not found:
        out.print(
            "no backend plugins are installed: everything runs on the host. A backend is a separate "
            "pip-installable package that registers itself under the entry point group accel.backends; "
            "install one and it is listed here"
        )
        return
    table = Table(title=f"backend plugins (this accel-core speaks runtime ABI {ABI_VERSION})")
    for col in ("backend", "distribution", "version", "ABI", "kernels", "state", "patterns", "ops", "layout"):
        table.add_column(col, justify="right" if col in ("ABI", "patterns", "ops") else "left", no_wrap=True)
    for s in found:
        layout = s.backend.layout if s.backend is not None else ""
        abi = "" if s.abi_version is None else str(s.abi_version)
        state = Text(s.state, style="" if s.ok else "red")
        table.add_row(
            s.name, s.distribution, s.version, abi, s.kernel_library, state, str(s.patterns), str(s.ops), layout
        )
    out.print(table)
    for s in found:
        if not s.ok:
            out.print(f"{s.name}: {s.error}", markup=False, soft_wrap=True)
            if verbose and s.traceback:
                out.print(s.traceback, markup=False, soft_wrap=True)
    if not verbose and any(s.traceback for s in found):
        out.print("(accel backends --verbose shows the tracebacks)")
    if ops:
        for s in found:
            if s.ok and s.backend is not None:
                out.print()
                print_backend_support(s.name, out)


def _take_debug(args: list[str]) -> tuple[list[str], bool]:
    """Remove ``--debug`` wherever it stands before a ``--`` (before or after the command)."""
    end = args.index("--") if "--" in args else len(args)
    kept = [a for a in args[:end] if a != "--debug"]
    return kept + args[end:], len(kept) != end


def _usage_line(exc: Exception) -> str:
    """A command-line usage error as one line, pointing at the command's --help."""
    text = " ".join(str(getattr(exc, "format_message", exc.__str__)()).split())
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "accel"
    return f"error: {text} (see `{path} --help`)"


_default_show_warning = warnings.showwarning


def _show_warning(
    message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """accel's own warnings (an artifact tuned on another machine, ...) as one line, as the errors are."""
    if getattr(category, "__module__", "").split(".")[0] == "accel" and not _state.get("debug"):
        err.print(f"note: {message}", markup=False, highlight=False, soft_wrap=True)
    else:
        _default_show_warning(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> Any:
    """Console entry point: one-line errors, exit code 2 for user errors (with or without --debug)."""
    args, debug = _take_debug(list(sys.argv[1:] if argv is None else argv))
    _state["debug"] = debug
    warnings.showwarning = _show_warning
    if argv is None:  # the command itself, a process that compiles once and exits (not a caller's main([...]))
        freeze_after_pauses()
    if not args:
        args = ["--help"]
    try:
        code = app(args=args, prog_name="accel", standalone_mode=False)
    except AccelError as exc:
        if debug:
            traceback.print_exc()
        else:
            err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # click's usage errors (bad option, bad value): one line too
        if debug:
            traceback.print_exc()
        err.print(_usage_line(exc), markup=False, highlight=False, soft_wrap=True)
        sys.exit(int(getattr(exc, "exit_code", 2)))
    except typer.Abort:
        err.print("aborted", markup=False)
        sys.exit(1)
    except MemoryError as exc:  # a model or input larger than this machine can hold: not a bug
        if debug:
            traceback.print_exc()
        err.print(f"error: not enough memory: {exc or 'an allocation failed'}", markup=False, soft_wrap=True)
        sys.exit(2)
    except Exception as exc:  # a bug: still one line unless --debug
        if debug:
            traceback.print_exc()
        else:
            err.print(
                f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
                markup=False,
                soft_wrap=True,
            )
        sys.exit(1)
    # without standalone mode, typer returns the code of an exit instead of exiting (130: Ctrl-C)
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        if code == 130:
            err.print("interrupted", markup=False)
        sys.exit(code)
    return None


if __name__ == "__main__":
    main()
