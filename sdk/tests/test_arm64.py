"""accel_sdk.arm64: the one-line errors and the command translation (on any machine), then the emulated
aarch64 machine itself: subprocesses and threads under qemu, a plugin cross-built, installed and loaded.

The tests that need the cross compiler and qemu-user skip when they are missing, except in CI (``CI``
set), where they fail: CI installs them (.ci/run). They use the checkout's own .arm64 folder, which
``nox -s arm64`` shares, so a second run finds the machine made.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from accel_sdk import arm64

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "accel-sdk"
TESTBACKEND = ROOT / "tests" / "backends" / "testbackend"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def one_line(message: str) -> str:
    assert "\n" not in message, message
    return message


# -- on any machine ---------------------------------------------------------------------------


@pytest.fixture
def bare(monkeypatch, tmp_path):
    """A machine with none of the tools: an empty PATH, no apt lists, no arm64 C library."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(arm64, "APT_LISTS", tmp_path / "lists")
    monkeypatch.setattr(arm64, "MULTIARCH_LIBDIR", tmp_path / "aarch64-linux-gnu")
    return tmp_path


def _stub(folder: Path, name: str, text: str = "exit 0\n") -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n" + text)
    (folder / name).chmod(0o755)


def test_check_tools_names_everything_missing_and_the_install_command(bare):
    with pytest.raises(arm64.ToolsMissingError) as exc:
        arm64.check_tools()
    message = one_line(str(exc.value))
    for missing in ("aarch64-linux-gnu-g++", "qemu-aarch64", "arm64 architecture", "arm64 C library"):
        assert missing in message
    assert message.endswith(
        "dpkg --add-architecture arm64 && apt-get update && "
        "apt-get install g++-aarch64-linux-gnu qemu-user libarm-compute-dev:arm64"
    )


def test_check_tools_names_only_what_is_missing(bare):
    tools = bare / "empty"
    _stub(tools, "aarch64-linux-gnu-g++")
    _stub(tools, "dpkg", 'test "$1" = --print-foreign-architectures && echo arm64\n')
    (bare / "aarch64-linux-gnu").mkdir()
    (bare / "aarch64-linux-gnu" / "libc.so.6").write_bytes(b"")
    with pytest.raises(arm64.ToolsMissingError) as exc:  # no apt lists for arm64 yet, no qemu
        arm64.check_tools()
    assert one_line(str(exc.value)).startswith("qemu-aarch64, apt's arm64 package lists not found; as root: dpkg")
    (bare / "lists").mkdir()
    (bare / "lists" / "deb.debian.org_debian_dists_bookworm_main_binary-arm64_Packages.lz4").write_bytes(b"")
    _stub(tools, "qemu-aarch64")
    arm64.check_tools()


def test_the_command_says_what_to_install_in_one_line(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # none of the tools
    proc = subprocess.run([str(SCRIPT), "arm64", "check"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert arm64.INSTALL_COMMAND in lines[0] and "qemu-aarch64" in lines[0]


def test_run_without_a_command_is_one_line(tmp_path):
    proc = subprocess.run([str(SCRIPT), "arm64", "run"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        "error: run: no command given (e.g. accel-sdk arm64 run -- python -c 'import platform')"
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "-c", "pass"], ["<bin>/python", "-c", "pass"]),
        (["python3", "x.py"], ["<bin>/python", "x.py"]),
        (["python3.11", "-V"], ["<bin>/python", "-V"]),
        (["pytest", "tests", "-q"], ["<bin>/python", "-m", "pytest", "tests", "-q"]),
        (
            ["accel", "run", "m.accel", "-i", "x=x.npy"],
            ["<bin>/python", "-m", "accel", "run", "m.accel", "-i", "x=x.npy"],
        ),
        (["accel-sdk", "new", "npu"], ["<bin>/python", "-m", "accel_sdk.cli", "new", "npu"]),
        (["sh", "-c", "python -V"], ["sh", "-c", "python -V"]),
        (["./script.sh", "python"], ["./script.sh", "python"]),
    ],
)
def test_commands_are_translated_for_the_machine(tmp_path, argv, expected):
    got = arm64.command_for(argv, tmp_path)
    assert got == [part.replace("<bin>", str(tmp_path)) for part in expected]


def test_no_command_is_an_error():
    with pytest.raises(arm64.Arm64Error) as exc:
        arm64.command_for([], Path("bin"))
    assert one_line(str(exc.value)).startswith("run: no command given")


def test_a_plugins_tests_include_its_arm64_files(tmp_path):
    (tmp_path / "tests").mkdir()
    for name in ("test_ops.py", "test_arm64_headline.py", "arm64_helpers.py"):
        (tmp_path / "tests" / name).write_text("")
    assert arm64.plugin_test_command(tmp_path) == [
        "pytest",
        str(tmp_path / "tests"),
        str(tmp_path / "tests" / "test_arm64_headline.py"),
        "-q",
        "-p",
        "no:cacheprovider",
    ]


def test_platform_tags_reach_the_machines_glibc():
    tags = arm64.platform_tags("2.36")
    assert tags[0] == "manylinux2014_aarch64" and tags[-1] == "linux_aarch64"
    assert "manylinux_2_17_aarch64" in tags and "manylinux_2_36_aarch64" in tags
    assert "manylinux_2_37_aarch64" not in tags and "manylinux_2_16_aarch64" not in tags


def test_the_site_holds_the_dependencies_of_core_and_sdk_and_pytest():
    import tomllib

    wanted = arm64.requirements(ROOT)
    core = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert wanted[: len(core)] == core
    assert "typer>=0.12" in wanted and wanted[-1] == "pytest>=8"
    assert not [r for r in wanted if r.startswith("accel")]


def test_find_checkout(tmp_path):
    assert arm64.find_checkout(ROOT / "sdk" / "tests") == ROOT
    with pytest.raises(arm64.Arm64Error) as exc:
        arm64.find_checkout(tmp_path)
    assert one_line(str(exc.value)).endswith(
        "is not inside an accel checkout (a folder with core/ and sdk/); run there or pass --checkout"
    )


def test_a_folder_without_a_project_is_not_built(tmp_path):
    with pytest.raises(arm64.Arm64Error) as exc:
        arm64.cross_build(tmp_path, tmp_path / "wheels")
    assert "no pyproject.toml with a [project] name" in one_line(str(exc.value))


def test_a_failed_step_names_itself_the_tools_error_and_the_log(tmp_path):
    log = tmp_path / "prepare.log"
    fails = [
        "sh",
        "-c",
        "echo 'Reading package lists...'; echo 'E: Unable to locate package python3.11-minimal:arm64' >&2; exit 100",
    ]
    with pytest.raises(arm64.StepError) as exc:
        arm64._step(fails, "prepare", "apt-get download of the arm64 python3.11 packages", log)
    assert one_line(str(exc.value)) == (
        "prepare: apt-get download of the arm64 python3.11 packages failed "
        f"(E: Unable to locate package python3.11-minimal:arm64); log: {log}"
    )
    assert "Reading package lists" in log.read_text()
    cmake = [
        "sh",
        "-c",
        "echo '-- Configuring'; echo 'CMake Error at CMakeLists.txt:9 (message):'; echo; echo '  no ACL'; exit 1",
    ]
    with pytest.raises(arm64.StepError) as exc:
        arm64._step(cmake, "build accel-acl", "cross-compiling for aarch64", log)
    assert "(CMake Error at CMakeLists.txt:9 (message): no ACL)" in one_line(str(exc.value))
    with pytest.raises(arm64.StepError) as exc:
        arm64._step([str(tmp_path / "no-such-tool")], "prepare", "unpacking", log)
    assert "no-such-tool: No such file or directory; log:" in one_line(str(exc.value))


# -- on the emulated machine --------------------------------------------------------------------


@pytest.fixture(scope="module")
def machine() -> arm64.Machine:
    try:
        arm64.check_tools()
    except arm64.ToolsMissingError as exc:
        if in_ci():
            pytest.fail(f"CI={os.environ.get('CI')} and {exc}")
        pytest.skip(str(exc))
    return arm64.prepare(ROOT)


def on_machine(machine: arm64.Machine, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = machine.env({**os.environ, "COLUMNS": "200"})
    return subprocess.run(
        arm64.command_for(argv, machine.bin), env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_sys_executable_starts_the_emulated_machine_again(machine, tmp_path):
    code = (
        "import platform, subprocess, sys; print(platform.machine(), sys.executable); "
        "r = subprocess.run([sys.executable, '-c', 'import platform; print(platform.machine())'], "
        "capture_output=True, text=True); print(r.stdout.strip(), r.returncode)"
    )
    proc = on_machine(machine, "python", "-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == [f"aarch64 {machine.python}", "aarch64 0"]


def test_threads_run_and_files_are_shared(machine, tmp_path):
    code = (
        "import threading; out = []; "
        "ts = [threading.Thread(target=lambda i=i: out.append(sum(range(i * 1000)))) for i in range(4)]; "
        "[t.start() for t in ts]; [t.join() for t in ts]; "
        "open('threads.txt', 'w').write(str(sorted(out)))"
    )
    proc = on_machine(machine, "python", "-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "threads.txt").read_text() == str(sorted(sum(range(i * 1000)) for i in range(4)))


def test_this_checkouts_accel_runs_there(machine, tmp_path):
    import accel

    proc = on_machine(machine, "accel", "--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert accel.__version__ in proc.stdout


def test_a_plugin_cross_built_here_loads_there(machine, tmp_path):
    wheel = arm64.cross_build(TESTBACKEND, tmp_path, machine)
    assert wheel.parent == tmp_path and wheel.name.endswith("-cp311-cp311-linux_aarch64.whl")
    machines = arm64._elf_machines(wheel)
    assert machines and set(machines.values()) == {arm64.ELF_AARCH64}, machines
    again = arm64.cross_build(TESTBACKEND, None, machine)  # the same sources: the kept wheel
    assert again.parent.parent.parent == machine.cache / "wheels" and again.read_bytes() == wheel.read_bytes()
    arm64.install([wheel], machine)
    code = "import platform, accel_testbackend._runtime as r; print(platform.machine(), r.__file__)"
    proc = on_machine(machine, "python", "-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("aarch64 ") and proc.stdout.strip().endswith(".cpython-311-aarch64-linux-gnu.so")
    # loaded by accel there: its runtime speaks the core's ABI
    listing = on_machine(machine, "accel", "backends", cwd=tmp_path)
    row = next((line for line in listing.stdout.splitlines() if "│ testbackend " in line), "")
    assert "│ ok " in row, listing.stdout
