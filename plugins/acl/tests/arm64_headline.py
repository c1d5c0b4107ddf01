"""The digits headline across machines: the embedded digits model compiled and scored on an
x86-64 workstation, then run again, unchanged, on an Arm machine (``nox -s arm64`` emulates one).

On the workstation, ``python arm64_headline.py FOLDER`` compiles the model for ``acl`` and for
``ethosn,acl`` into FOLDER and records their predictions on the held-out digits there;
``test_arm64_headline.py``, run on the Arm machine with ``ACCEL_ARM64_HEADLINE=FOLDER``, loads
the same artifacts and compares. The ONNX networks ``test_networks.py`` compiles are written to
FOLDER too, so that the Arm machine needs no ONNX Runtime (which quantizes them).
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np
import onnx

import accel
from accel.models import default_model_path, load_digits_test

#: artifact file -> the backends it is compiled for
ARTIFACTS = {"digits_acl.accel": "acl", "digits_ethosn_acl.accel": "ethosn,acl"}
RECORD = "x86.json"


def predictions(path: Path) -> np.ndarray:
    """The digit the artifact predicts for each held-out image."""
    runner = accel.load(path)
    images, _ = load_digits_test()
    return np.array(
        [int(np.argmax(runner.run({"image": images[i : i + 1]})["probabilities"])) for i in range(len(images))]
    )


def prepare(folder: Path) -> dict[str, dict[str, object]]:
    """Compile, score and record on this (x86) machine: {artifact file: {backends, machine, predictions, accuracy}}."""
    folder.mkdir(parents=True, exist_ok=True)
    _, labels = load_digits_test()
    record: dict[str, dict[str, object]] = {}
    for name, backends in ARTIFACTS.items():
        accel.compile(str(default_model_path(quantized=True)), backends=backends).save(folder / name)
        preds = predictions(folder / name)
        record[name] = {
            "backends": backends,
            "machine": platform.machine(),
            "predictions": preds.tolist(),
            "accuracy": float(np.mean(preds == labels)),
        }
    (folder / RECORD).write_text(json.dumps(record), encoding="utf-8")
    # the networks test_networks.py compiles, made here (ONNX Runtime quantizes the QDQ forms)
    from test_networks import GENERATORS, make_model, model_file

    for name in GENERATORS:
        for quantized in (False, True):
            onnx.save(make_model(name, quantized), folder / model_file(name, quantized))
    return record


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python arm64_headline.py FOLDER")
    for name, r in prepare(Path(sys.argv[1])).items():
        print(f"{name} ({r['backends']}) on {r['machine']}: accuracy {r['accuracy']:.2%}")
