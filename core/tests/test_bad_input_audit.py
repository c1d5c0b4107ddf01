"""Bad input by class, through the command line and the Python API: paths that are not
regular files (a pipe, a socket, a folder, a device) never block a read and are never
renamed over; outputs never overwrite the command's own inputs; ``.npy`` inputs are
checked from their header against the model before a byte of data is read; out-of-range
options are usage errors; a convolution's kernel_shape must agree with its weight; a run
that needs more memory than the machine has is refused before it starts. Every case is a
typed error with one line (exit code 2 at the command line) and leaves nothing written.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_builders import model_of
from onnx import TensorProto, helper, numpy_helper

import accel
import accel.cli
from accel import files
from accel.artifact import is_artifact, read_artifact
from accel.errors import AccelError, ArtifactError, InputError, ModelError, SerializationError, TargetError
from accel.frontend.specialize import SpecializedModel
from accel.serialize import load_graph, save_graph
from accel.target import CompositeTarget

F = TensorProto.FLOAT


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """A read that blocks on a pipe fails the test after 20 s instead of hanging the suite."""

    def fail(*_: object) -> None:
        raise TimeoutError("blocked (a read or write on a pipe?)")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def relu_model(name: str = "x", out: str = "y") -> onnx.ModelProto:
    return model_of([helper.make_node("Relu", [name], [out])], {name: ([1, 3, 4, 4], F)}, [out])


@pytest.fixture()
def work(tmp_path: Path) -> dict[str, Path]:
    """A model, its artifact, a matching input, and special files next to them."""
    model = tmp_path / "m.onnx"
    onnx.save(relu_model(), model)
    art = tmp_path / "m.accel"
    accel.compile(model).save(art)
    x = tmp_path / "x.npy"
    np.save(x, np.linspace(-1, 1, 48, dtype=np.float32).reshape(1, 3, 4, 4))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    return {"dir": tmp_path, "model": model, "artifact": art, "x": x, "fifo": fifo}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the ``accel`` command in this process: (exit code, stdout, stderr)."""
    code = 0
    try:
        accel.cli.main([str(a) for a in args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_line(result: tuple[int, str, str], *fragments: str, stdout_empty: bool = True) -> str:
    code, out, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    if stdout_empty:
        assert out == "", f"work was done before the error: {out!r}"
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert msg and "\n" not in msg and isinstance(exc.value, AccelError), msg
    return msg


# -- inputs that are not regular files: refused without blocking --------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "{fifo}"],
        ["run", "{fifo}"],
        ["compile", "{fifo}"],
        ["run", "{model}", "-i", "x={fifo}"],
        ["inspect", "{model}", "--target", "{fifo}"],
        ["compile", "{model}", "--target", "{fifo}", "-o", "{dir}/o.accel"],
    ],
)
def test_a_pipe_given_as_an_input_file_is_refused_without_blocking(
    capsys: pytest.CaptureFixture[str], work: dict[str, Path], args: list[str]
) -> None:
    line = error_line(cli(capsys, *(a.format(**work) for a in args)))
    assert "named pipe (FIFO), not a file" in line and str(work["fifo"]) in line
    assert stat.S_ISFIFO(os.stat(work["fifo"]).st_mode)


def test_a_pipe_named_like_an_artifact(capsys: pytest.CaptureFixture[str], work: dict[str, Path]) -> None:
    fifo = work["dir"] / "p.accel"
    os.mkfifo(fifo)
    for command in ("run", "inspect"):
        error_line(cli(capsys, command, fifo), "artifact", "named pipe")
    assert is_artifact(fifo) is False


def test_a_folder_given_as_an_input_file(capsys: pytest.CaptureFixture[str], work: dict[str, Path]) -> None:
    for args in (["inspect", work["dir"]], ["run", work["dir"]], ["run", work["model"], "-i", f"x={work['dir']}"]):
        error_line(cli(capsys, *args), "is a folder")
    folder = work["dir"] / "f.accel"
    folder.mkdir()
    error_line(cli(capsys, "inspect", folder), "artifact", "is a folder")


def test_python_api_refuses_special_files(work: dict[str, Path]) -> None:
    fifo = work["fifo"]
    for call, error in (
        (accel.import_onnx, ModelError),
        (read_artifact, ArtifactError),
        (CompositeTarget.from_file, TargetError),
        (load_graph, SerializationError),
    ):
        with pytest.raises(error) as exc:
            call(fifo)
        assert "named pipe" in one_line(exc)
    with pytest.raises(ModelError, match="a folder on its path is a file"):
        accel.import_onnx(work["model"] / "inner.onnx")


def test_a_path_swapped_for_a_pipe_after_the_check_is_refused_through_its_descriptor(
    work: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_stat = os.stat

    def stat_sees_a_file(path, *a, **k):  # type: ignore[no-untyped-def]
        return real_stat(work["model"]) if Path(path) == work["fifo"] else real_stat(path, *a, **k)

    monkeypatch.setattr(os, "stat", stat_sees_a_file)
    with pytest.raises(ModelError, match="named pipe"):
        accel.import_onnx(work["fifo"])


def test_files_over_their_budget_are_refused_before_reading(work: dict[str, Path], monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import accel.frontend.onnx as frontend
    import accel.target as target

    monkeypatch.setattr(frontend, "MAX_MODEL_FILE_BYTES", 10)
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(work["model"])
    assert "more than the 10 bytes a protobuf message can hold" in one_line(exc)
    big = work["dir"] / "t.json"
    big.write_text('{"devices": []}' + " " * 100)
    monkeypatch.setattr(target, "MAX_TARGET_FILE_BYTES", 64)
    with pytest.raises(TargetError, match="more than the 64 bytes"):
        CompositeTarget.from_file(big)


# -- outputs: never renamed over anything but a regular file -------------------------------


@pytest.fixture()
def sock() -> Iterator[Path]:
    """A listening unix socket (in a short folder: socket paths are limited to ~100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="acc") as folder:
        path = Path(folder) / "s"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        try:
            yield path
        finally:
            server.close()


@pytest.mark.parametrize(
    "args,option",
    [
        (["run", "{model}", "-o", "{out}"], "--output"),
        (["run", "{artifact}", "-i", "x={x}", "-o", "{out}"], "--output"),
        (["compile", "{model}", "-o", "{out}"], "--output"),
        (["compile", "{model}", "-o", "{dir}/c.accel", "--report", "{out}"], "--report"),
        (["inspect", "{model}", "-o", "{out}"], "--output"),
        (["inspect", "{artifact}", "--format", "html", "-o", "{out}"], "--output"),
    ],
)
@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_output_onto_a_pipe_or_socket_is_refused_first(
    capsys: pytest.CaptureFixture[str], work: dict[str, Path], sock: Path, args: list[str], option: str, kind: str
) -> None:
    out = work["fifo"] if kind == "fifo" else sock
    before = sorted(work["dir"].iterdir())
    line = error_line(cli(capsys, *(a.format(**work, out=out) for a in args)))
    assert line.startswith(f"error: {option} '{out}' is a ") and ("named pipe" in line or "socket" in line)
    check = stat.S_ISFIFO if kind == "fifo" else stat.S_ISSOCK
    assert check(os.lstat(out).st_mode), "the special file was replaced"
    assert sorted(work["dir"].iterdir()) == before, "something was written"


def test_python_api_writers_refuse_special_files(work: dict[str, Path]) -> None:
    art = accel.compile(work["model"])
    with pytest.raises(ArtifactError) as exc:
        art.save(work["fifo"])
    assert "named pipe" in one_line(exc)
    with pytest.raises(ArtifactError, match="is a folder"):
        art.save(work["dir"])
    with pytest.raises(SerializationError, match="named pipe"):
        save_graph(accel.import_onnx(work["model"]), work["fifo"])
    assert stat.S_ISFIFO(os.lstat(work["fifo"]).st_mode)
    assert not [p for p in work["dir"].iterdir() if p.name.startswith(".")], "a temporary file was left behind"


def test_destination_turned_into_a_pipe_while_writing_is_not_renamed_over(work: dict[str, Path]) -> None:
    target = work["dir"] / "late.bin"

    def write(f) -> None:  # type: ignore[no-untyped-def]
        f.write(b"data")
        os.mkfifo(target)  # appears after the check, before the rename

    with pytest.raises(InputError, match="became a named pipe"):
        files.write_output(target, "'late.bin'", InputError, write)
    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert sorted(p.name for p in work["dir"].iterdir() if p.name.startswith(".")) == []


def _char_device(path: str) -> Path:
    p = Path(path)
    if not (p.exists() and stat.S_ISCHR(os.stat(p).st_mode)):
        pytest.skip(f"{path} is not a character device here")
    return p


def test_dev_null_is_written_in_place(capsys: pytest.CaptureFixture[str], work: dict[str, Path]) -> None:
    null = _char_device("/dev/null")
    rdev = os.stat(null).st_rdev
    for args in (
        ["run", work["model"], "-o", null],
        ["compile", work["model"], "-o", null, "--report", null],
        ["inspect", work["artifact"], "--format", "json", "-o", null],
    ):
        code, out, err = cli(capsys, *args)
        assert code == 0, err
        assert "wrote /dev/null" in out + err
    st = os.stat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev


def test_a_full_device_is_a_write_error_and_stays_a_device(capsys: pytest.CaptureFixture[str], work) -> None:  # type: ignore[no-untyped-def]
    full = _char_device("/dev/full")
    rdev = os.stat(full).st_rdev
    line = error_line(cli(capsys, "run", work["model"], "-o", full), stdout_empty=False)
    assert "cannot write '/dev/full'" in line
    st = os.stat(full)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev


def test_a_symlinked_output_replaces_the_file_it_names(capsys: pytest.CaptureFixture[str], work) -> None:  # type: ignore[no-untyped-def]
    real = work["dir"] / "real.npz"
    real.write_bytes(b"old")
    link = work["dir"] / "link.npz"
    link.symlink_to(real)
    code, _, err = cli(capsys, "run", work["model"], "-i", f"x={work['x']}", "-o", link)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    with np.load(real) as npz:
        np.testing.assert_array_equal(npz["y"], np.maximum(np.load(work["x"]), 0))


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["compile", "{model}", "-o", "{model}"], "--output '{model}' is the input file"),
        (["compile", "{model}", "--target", "{dir}/t.json", "-o", "{dir}/t.json"], "is the input file"),
        (["run", "{model}", "-i", "x={x}", "-o", "{x}"], "--output '{x}' is the input file"),
        (["run", "{artifact}", "-o", "{artifact}"], "is the input file"),
        (["inspect", "{model}", "-o", "{model}"], "is the input file"),
        (["compile", "{model}", "-o", "{dir}/a.accel", "--report", "{dir}/a.accel"], "is also given to --output"),
    ],
)
def test_an_output_never_overwrites_an_input(
    capsys: pytest.CaptureFixture[str], work: dict[str, Path], args: list[str], fragment: str
) -> None:
    (work["dir"] / "t.json").write_text('{"devices": []}')
    contents = {p: p.read_bytes() for p in work["dir"].iterdir() if p.is_file()}
    error_line(cli(capsys, *(a.format(**work) for a in args)), fragment.format(**work))
    assert {p: p.read_bytes() for p in work["dir"].iterdir() if p.is_file()} == contents


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_folder(capsys: pytest.CaptureFixture[str], work: dict[str, Path]) -> None:
    folder = work["dir"] / "ro"
    folder.mkdir(mode=0o555)
    error_line(cli(capsys, "run", work["model"], "-o", folder / "o.npz"), "is not writable")


# -- .npy inputs: the header is checked before any data is read -----------------------------


def _npy_header(path: Path, shape: tuple[int, ...], descr: str = "<f4", data: bytes = b"", fortran=False) -> Path:  # type: ignore[no-untyped-def]
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": fortran, "shape": shape})
        f.write(data)
    return path


@pytest.fixture()
def no_data_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self) -> None:  # type: ignore[no-untyped-def]
        raise AssertionError(f"array data of {self.path} was read before the header was checked")

    monkeypatch.setattr(accel.cli.NpyInput, "read", refuse)


@pytest.mark.parametrize(
    "shape,descr,fragments",
    [
        ((1 << 20, 1 << 20, 64), "<f4", ["declares float32[1048576,1048576,64]", "holds 64 bytes"]),
        ((1, 3, 4, 4), "<f4", ["declares float32[1,3,4,4] (192 bytes) but holds 64 bytes"]),
        ((1, 3, 4), "|O", ["object", "model inputs are numbers"]),
        ((2,), "<U4", ["model inputs are numbers"]),
        ((2,), "<c8", ["complex64", "model inputs are numbers"]),
    ],
)
def test_npy_header_refused_before_any_data_is_read(
    capsys: pytest.CaptureFixture[str], work: dict[str, Path], no_data_read: None, shape, descr, fragments
) -> None:  # type: ignore[no-untyped-def]
    bad = _npy_header(work["dir"] / "bad.npy", shape, descr, b"\0" * 64)
    for model in (work["model"], work["artifact"]):
        error_line(cli(capsys, "run", model, "-i", f"x={bad}"), "--input x", *fragments)


@pytest.mark.parametrize("model_key", ["model", "artifact"])
@pytest.mark.parametrize(
    "array,expect",
    [
        (np.zeros((1, 3, 5, 5), np.float32), "input 'x' must be float32[1,3,4,4], got float32[1,3,5,5]"),
        (np.zeros((1, 3, 4, 4), np.int64), "input 'x' must be float32[1,3,4,4], got int64[1,3,4,4]"),
        (np.zeros((3, 4, 4), np.float32), "input 'x' must be float32[1,3,4,4], got float32[3,4,4]"),
    ],
)
def test_npy_of_the_wrong_shape_or_dtype_is_refused_from_its_header(
    capsys: pytest.CaptureFixture[str], work: dict[str, Path], no_data_read: None, model_key, array, expect
) -> None:  # type: ignore[no-untyped-def]
    path = work["dir"] / "wrong.npy"
    np.save(path, array)
    error_line(cli(capsys, "run", work[model_key], "-i", f"x={path}", "-o", work["dir"] / "o.npz"), expect)
    assert not (work["dir"] / "o.npz").exists()


@pytest.mark.parametrize("model_key", ["model", "artifact"])
def test_npy_in_any_valid_layout_runs(capsys: pytest.CaptureFixture[str], work, model_key) -> None:  # type: ignore[no-untyped-def]
    x = np.load(work["x"])
    want = np.maximum(x, 0)
    for variant in (x.astype(">f4"), np.asfortranarray(x)):
        path = work["dir"] / "v.npy"
        np.save(path, variant)
        out = work["dir"] / "o.npz"
        code, _, err = cli(capsys, "run", work[model_key], "-i", f"x={path}", "-o", out)
        assert code == 0, err
        with np.load(out) as npz:
            np.testing.assert_array_equal(npz["y"], want)


def test_npy_over_memory_is_refused_from_its_header(capsys, work, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(accel.cli, "physical_memory", lambda: 100)
    error_line(cli(capsys, "run", work["model"], "-i", f"x={work['x']}"), "holds 192 bytes, more than this machine's")


@pytest.mark.parametrize(
    "specs,fragment",
    [
        (["x={x}", "x={x}"], "--input names 'x' twice"),
        (["x={x}", "z={x}"], "unknown input(s) 'z'; the model takes x"),
        (["x"], "--input takes NAME=FILE.npy"),
        (["={x}"], "--input takes NAME=FILE.npy"),
        (["x={dir}/nope.npy"], "no such file"),
        (["x={dir}/archive.npz"], "is not a readable .npy array"),
    ],
)
def test_input_option_errors(capsys: pytest.CaptureFixture[str], work: dict[str, Path], specs, fragment) -> None:  # type: ignore[no-untyped-def]
    np.savez(work["dir"] / "archive.npz", x=np.zeros(3))
    args = [a for s in specs for a in ("-i", s.format(**work))]
    for model in (work["model"], work["artifact"]):
        error_line(cli(capsys, "run", model, *args), fragment)


def test_input_names_and_file_names_with_equals_signs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = tmp_path / "eq.onnx"
    onnx.save(relu_model(name="a=b", out="file"), model)
    data = tmp_path / "c=d.npy"
    np.save(data, np.full((1, 3, 4, 4), -2.0, np.float32))
    out = tmp_path / "o.npz"
    code, _, err = cli(capsys, "run", model, "-i", f"a=b={data}", "-o", out)
    assert code == 0, err
    with np.load(out) as npz:  # an output called "file" (np.savez's own parameter name) is written too
        assert list(npz) == ["file"] and not npz["file"].any()


# -- options and models ---------------------------------------------------------------------


def test_negative_seed_is_a_usage_error(capsys: pytest.CaptureFixture[str], work: dict[str, Path]) -> None:
    error_line(cli(capsys, "run", work["model"], "--seed", "-1"), "--seed", "greater than or equal to 0")
    graph = accel.import_onnx(work["model"])
    for seed in (-1, 1.5, "3"):
        with pytest.raises(InputError, match=">= 0"):
            accel.cli.random_inputs(graph, seed=seed)  # type: ignore[arg-type]
    a, b = accel.cli.random_inputs(graph, seed=np.int64(3)), accel.cli.random_inputs(graph, seed=3)
    np.testing.assert_array_equal(a["x"], b["x"])


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_kernel_shape_disagreeing_with_the_weight(op: str) -> None:
    w = np.ones((3, 3, 3, 3), np.float32)
    node = helper.make_node(op, ["x", "w"], ["y"], name="conv7", kernel_shape=[5, 5])
    m = model_of([node], {"x": ([1, 3, 8, 8], F)}, ["y"], {"w": w})
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(m)
    line = one_line(exc)
    assert "conv7" in line and "kernel_shape [5, 5] disagrees with the weight 'w' of shape [3, 3, 3, 3]" in line
    node = helper.make_node(op, ["x", "w"], ["y"], kernel_shape=[3, 3])
    accel.import_onnx(model_of([node], {"x": ([1, 3, 8, 8], F)}, ["y"], {"w": w}))  # agreeing: fine


def test_qlinear_conv_kernel_shape_disagreeing_with_the_weight() -> None:
    u8 = TensorProto.UINT8
    inits = [
        numpy_helper.from_array(np.ones((2, 1, 3, 3), np.int8), "w"),
        numpy_helper.from_array(np.array(0.1, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.uint8), "zu"),
        numpy_helper.from_array(np.array(0, np.int8), "zi"),
    ]
    node = helper.make_node(
        "QLinearConv", ["x", "s", "zu", "w", "s", "zi", "s", "zu"], ["y"], name="qc", kernel_shape=[1, 1]
    )
    graph = helper.make_graph(
        [node],
        "q",
        [helper.make_tensor_value_info("x", u8, [1, 1, 6, 6])],
        [helper.make_tensor_value_info("y", u8, None)],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match=r"qc.*kernel_shape \[1, 1\] disagrees"):
        accel.import_onnx(m)


def test_a_model_with_no_nodes_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    m = model_of([], {"x": ([1, 3], F)}, ["x"])
    path = tmp_path / "empty_graph.onnx"
    onnx.save(m, path)
    for command in ("inspect", "run", "compile"):
        code, _, err = cli(capsys, command, path, *(["-o", tmp_path / "e.accel"] if command == "compile" else []))
        assert code == 0, err


def test_run_needing_more_memory_than_the_machine_has_is_refused_before_running(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a chain whose intermediate values are alive together: each tensor fits, the run does not
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["x"], ["b"])]
    nodes.append(helper.make_node("Add", ["a", "b"], ["y"]))
    path = tmp_path / "wide.onnx"
    onnx.save(model_of(nodes, {"x": ([1, 256], F)}, ["y"]), path)
    graph = accel.import_onnx(path)
    from accel.executor import ReferenceExecutor

    peak = ReferenceExecutor(graph).peak_bytes
    assert peak == 4 * 1024  # x, a, b and y are alive together after the Add
    ran: list[bool] = []
    monkeypatch.setattr(ReferenceExecutor, "run", lambda *a, **k: ran.append(True))
    monkeypatch.setattr(accel.cli, "physical_memory", lambda: peak - 1)
    line = error_line(cli(capsys, "run", path))
    assert "holds 4 KiB at once" in line and ran == []


def test_repeat_over_its_maximum_is_a_usage_error(capsys: pytest.CaptureFixture[str], work: dict[str, Path]) -> None:
    error_line(cli(capsys, "run", work["model"], "--repeat", str(10**30)), "--repeat", "less than or equal to 1000000")


@pytest.mark.parametrize("inputs", [None, [np.zeros((1, 3, 4, 4), np.float32)], "x"])
def test_inputs_that_are_not_a_mapping(work: dict[str, Path], inputs) -> None:  # type: ignore[no-untyped-def]
    graph = accel.import_onnx(work["model"])
    for model in (graph, work["model"]):
        with pytest.raises(InputError) as exc:
            accel.execute(model, inputs)
        assert "inputs must be a mapping {name: array}" in one_line(exc)
    with pytest.raises(InputError, match="mapping"):
        accel.load(work["artifact"]).run(inputs)


@pytest.mark.parametrize("field,offset", [("file size", 24), ("stored size", 20)])
def test_artifact_member_size_edited_in_the_zip_directory(work: dict[str, Path], field: str, offset: int) -> None:
    import struct

    from accel.artifact import artifact_from_bytes

    data = bytearray(work["artifact"].read_bytes())
    struct.pack_into("<I", data, data.rfind(b"PK\x01\x02") + offset, 0xFFFFFFF0)  # the last member's entry
    with pytest.raises(ArtifactError) as exc:
        artifact_from_bytes(bytes(data), where="a.accel")
    line = one_line(exc)
    assert "declares" in line and "4294967280" in line and "compressed" not in line


def test_paths_with_a_nul_byte_in_the_python_api(work: dict[str, Path]) -> None:
    bad = str(work["dir"] / "a\0b")
    for call, error in (
        (lambda: accel.import_onnx(bad), ModelError),
        (lambda: accel.load(bad), ArtifactError),
        (lambda: accel.compile(work["model"]).save(bad), ArtifactError),
        (lambda: CompositeTarget.from_file(bad), TargetError),
    ):
        with pytest.raises(error) as exc:
            call()
        assert "is not a valid path" in one_line(exc)


def test_ctrl_c_exits_130_with_one_line(
    capsys: pytest.CaptureFixture[str], work: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(accel.cli, "random_inputs", interrupted)
    code, _, err = cli(capsys, "run", work["model"])
    assert code == 130 and err.strip() == "interrupted" and "Traceback" not in err


def test_names_and_paths_that_look_like_rich_markup_are_printed_as_they_are(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "[bold]"
    folder.mkdir()
    model = folder / "[red]m.onnx"
    onnx.save(relu_model(name="[/x]", out="[/]y"), model)
    code, out, err = cli(capsys, "run", model)
    assert code == 0, err
    assert "│ [/]y " in out and f"{model.name}: 1 ops" in out
    artifact = folder / "[x]a.accel"
    code, out, err = cli(capsys, "compile", model, "-o", artifact)
    assert code == 0, err
    assert f"wrote {artifact} (" in " ".join(out.split())
    for args in (["run", artifact], ["inspect", artifact]):
        code, out, err = cli(capsys, *args)
        assert code == 0 and "MarkupError" not in err, err


@pytest.mark.parametrize("shape", [(1.5, 3, 4, 4), "1344", (1, 3, 4, "4"), 7])
def test_input_shapes_must_be_integers(work: dict[str, Path], shape) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ModelError) as exc:
        accel.import_onnx(work["model"], input_shapes={"x": shape})
    assert "must be a tuple of integers" in one_line(exc)
    with pytest.raises(ModelError, match="must be a tuple of integers"):
        SpecializedModel(work["model"], input_shapes={"x": shape}).run({"x": np.zeros((1, 3, 4, 4), np.float32)})
    accel.import_onnx(work["model"], input_shapes={"x": (np.int64(1), 3, 4, 4)})  # numpy integers are integers


def test_a_report_that_cannot_be_written_leaves_no_artifact(capsys: pytest.CaptureFixture[str], work) -> None:  # type: ignore[no-untyped-def]
    full = _char_device("/dev/full")
    out = work["dir"] / "m.accel"
    line = error_line(cli(capsys, "compile", work["model"], "-o", out, "--report", full))
    assert "cannot write '/dev/full'" in line
    assert not out.exists()
    code, _, err = cli(capsys, "compile", work["model"], "-o", out, "--report", work["dir"] / "m.html")
    assert code == 0, err
    assert out.is_file() and (work["dir"] / "m.html").is_file()
