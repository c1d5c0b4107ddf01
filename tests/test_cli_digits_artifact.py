"""`accel run` on an artifact of the embedded digits model scores it on the held-out digits (host only: no plugin needed)."""

from __future__ import annotations

import re

from test_cli import accel_cli


def test_run_scores_a_digits_artifact(tmp_path):
    artifact = tmp_path / "digits.accel"
    proc = accel_cli("compile", "-o", str(artifact))
    assert proc.returncode == 0, proc.stderr
    proc = accel_cli("run", str(artifact))
    assert proc.returncode == 0, proc.stderr
    rows = dict(re.findall(r"│ (this artifact|accel reference executor)\s+│\s+([\d.]+%)", proc.stdout))
    assert set(rows) == {"this artifact", "accel reference executor"}, proc.stdout
    assert rows["this artifact"] == rows["accel reference executor"]
    assert re.search(r"predictions identical on (\d+)/\1 images", proc.stdout), proc.stdout

    # with --input (or --output) it runs as any artifact does
    proc = accel_cli("run", str(artifact), "-o", str(tmp_path / "out.npz"))
    assert proc.returncode == 0, proc.stderr
    assert "this artifact" not in proc.stdout and "probabilities" in proc.stdout
