"""``accel`` run as a user runs it, in a child process: what the cross-package tests share."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def run_accel(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, columns: int | None = None
) -> subprocess.CompletedProcess:
    """``python -m accel ARGS`` with this environment (plus ``env``; ``COLUMNS`` set to ``columns``
    for tables as wide as a test reads them), output captured as text, five minutes at most."""
    full = {**os.environ, **({"COLUMNS": str(columns)} if columns else {}), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "accel", *args], capture_output=True, text=True, cwd=cwd, env=full, timeout=300
    )
