"""``accel ops --backend NAME`` (and ``accel backends --ops``) list what a backend takes from its
support table: every composite with its pattern and constraints, every single op with its constraints,
the constraint being the first line of the check's docstring where it has one."""

from __future__ import annotations

import subprocess

import pytest
from cli_helpers import run_accel

from accel.cli import constraint_text
from accel.plugins import get_backend


def accel_cli(*args: str) -> subprocess.CompletedProcess:
    return run_accel(*args)


def rows(text: str) -> dict[str, list[str]]:
    """Rows of the rich tables printed, by their first cell."""
    found = {}
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            found[cells[0]] = cells
    return found


@pytest.mark.parametrize("name", ["testbackend", "acl"])
def test_every_entry_of_the_support_table_is_listed_with_its_constraint(name: str) -> None:
    backend = get_backend(name)()
    proc = accel_cli("ops", "--backend", name)
    assert proc.returncode == 0, proc.stderr
    table = rows(proc.stdout)
    entries = list(backend.pattern_table())
    checks = dict(backend.op_checks())
    assert proc.stdout.splitlines()[0].startswith(
        f"{name} ({backend.distribution} {backend.version}, {backend.layout} inside its partitions): "
        f"{len(entries)} composite(s), {len(checks)} single op(s)"
    )
    for e in entries:
        row = table[f"{name}.{e.name}"]
        assert row[2] == constraint_text(e.check)
        assert all(op in row[1] for op in e.pattern.ops())
        assert "@" not in row[1]  # the serializer's labels are not for users
    for op, check in checks.items():
        assert table[op] == [op, constraint_text(check)]
    assert len(table) == len(entries) + len(checks)


def test_test_backend_listing() -> None:
    table = rows(accel_cli("ops", "-b", "testbackend").stdout)
    assert table["testbackend.conv2d"][1] == "nn.conv2d(*, const) -> nn.bias_add?(.., const) -> nn.relu?(..)"
    assert table["nn.max_pool2d"][1] == "checked by accel_testbackend.TestBackend.check_pool (no description)"


def test_acl_constraints_are_the_checks_docstrings() -> None:
    from accel_acl import support

    table = rows(accel_cli("ops", "--backend", "acl").stdout)
    for name, _, check in support.PATTERNS:
        if check.__doc__:
            assert table[f"acl.{name}"][2] == check.__doc__.strip().splitlines()[0].strip()
    for op, check in support.OP_CHECKS.items():
        if check.__doc__:
            assert table[op][1] == check.__doc__.strip().splitlines()[0].strip()


def test_name_filters_the_listing() -> None:
    proc = accel_cli("ops", "--backend", "acl", "pool")
    assert proc.returncode == 0, proc.stderr
    table = rows(proc.stdout)
    assert {"acl.avg_pool2d", "acl.l2_pool2d", "nn.max_pool2d", "nn.global_avg_pool2d"} <= set(table)
    assert "acl.conv2d" not in table and "add" not in table
    proc = accel_cli("ops", "--backend", "acl", "frobnicate")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "error: no composite or op of backend 'acl' contains 'frobnicate'; `accel ops -b acl`"


def test_unknown_backend_is_one_line() -> None:
    proc = accel_cli("ops", "--backend", "nosuchnpu")
    assert proc.returncode == 2 and proc.stderr.startswith("error: no installed plugin provides backend 'nosuchnpu'")
    assert len(proc.stderr.splitlines()) == 1


def test_backends_ops_lists_every_usable_backend() -> None:
    proc = accel_cli("backends", "--ops")
    assert proc.returncode == 0, proc.stderr
    for name in ("testbackend", "acl"):
        assert any(line.startswith(f"{name} (accel-{name} ") for line in proc.stdout.splitlines())
    assert "testbackend.conv2d" in rows(proc.stdout)
    assert not any(line.startswith("wrongabi (") for line in proc.stdout.splitlines())


def _documented(node):  # type: ignore[no-untyped-def]
    """Batch 1, float32.

    More that a listing leaves out.
    """


class _Checks:
    def method(self, node):  # type: ignore[no-untyped-def]
        return None


def test_constraint_text() -> None:
    assert constraint_text(_documented) == "Batch 1, float32."
    assert constraint_text(_Checks().method) == f"checked by {__name__}._Checks.method (no description)"
    assert constraint_text(lambda n: None) == f"checked by a lambda in {__name__} (no description)"
    assert constraint_text(None) == "any (no check beyond the op or pattern)"
