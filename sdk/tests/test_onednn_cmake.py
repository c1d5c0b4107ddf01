"""accel_link_onednn: oneDNN found through the wheels' metadata, a one-line error without them,
and an extension that loads libdnnl.so.3 relative to itself wherever it is installed."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import accel_sdk
import onednn_build
import pytest
from test_sdk_build_errors import configure, error_lines

NEED = (
    'add "onednn-devel-cpu-gomp==2023.2.0" and "onednn-cpu-gomp==2023.2.0" to [build-system].requires, '
    'and "onednn-cpu-gomp==2023.2.0" to [project].dependencies'
)


def hiding(tmp_path: Path, dist: str) -> dict[str, str]:
    """An environment whose Python does not see distribution `dist` (a sitecustomize hides it)."""
    site = tmp_path / "hide"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        textwrap.dedent(
            f"""
            import importlib.metadata as md
            _real = md.distribution
            def distribution(name):
                if name == {dist!r}:
                    raise md.PackageNotFoundError(name)
                return _real(name)
            md.distribution = distribution
            """
        )
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize(
    ("dist", "what"),
    [("onednn-devel-cpu-gomp", "oneDNN's CMake files not found"), ("onednn-cpu-gomp", "libdnnl.so.3 not found")],
)
def test_a_missing_wheel_is_one_line(tmp_path, dist, what):
    onednn_build._require()
    env = hiding(tmp_path, dist)
    proc = configure(onednn_build.SOURCES, tmp_path / "build", f"-Daccel_sdk_DIR={accel_sdk.get_cmake_dir()}", env=env)
    assert proc.returncode != 0
    (line,) = [line for line in error_lines(proc) if "accel-sdk" in line]
    assert line == f"accel-sdk: {what} ({dist} is not installed for {sys.executable}); {NEED}", proc.stderr


def test_installed_extension_loads_libdnnl_relative_to_itself(tmp_path):
    """Installed into another prefix's site-packages, the extension finds <prefix>/lib/libdnnl.so.3, and only there."""
    prefix = tmp_path / "env"
    paths = sysconfig.get_paths(scheme="posix_prefix", vars={"base": str(prefix), "platbase": str(prefix)})
    site = Path(paths["platlib"])
    onednn_build.install(site)
    (module,) = (site / "accel_sdk_onednn_probe").glob("_sdk_onednn_probe*")
    dist = importlib.metadata.distribution("onednn-cpu-gomp")
    lib = next(Path(dist.locate_file(f)).resolve() for f in dist.files or [] if str(f).endswith("libdnnl.so.3"))
    (prefix / "lib").mkdir(parents=True, exist_ok=True)
    code = (
        "import importlib.util as u, sys; s = u.spec_from_file_location('_sdk_onednn_probe', sys.argv[1]); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); print(m.cpu_isa())"
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}

    def load() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, str(module)], capture_output=True, text=True, env=env)

    missing = load()  # nothing at <prefix>/lib yet: the build environment's copy must not be used
    assert missing.returncode != 0 and "libdnnl.so.3" in missing.stderr, missing.stderr
    (prefix / "lib" / "libdnnl.so.3").symlink_to(lib)
    found = load()
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip()
