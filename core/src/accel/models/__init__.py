"""The default model shipped with accel-core: a small CNN for 8x8 handwritten digits.

``digits_fp32.onnx`` and its QDQ-quantized twin ``digits_qdq.onnx`` (uint8
activations, int8 per-channel weights, fp32 classifier head and softmax) take
``image`` float32 ``[1, 1, 8, 8]`` (pixels in [0, 1]) and give
``probabilities`` ``[1, 10]``. ``digits_test.npz`` holds the held-out images
and labels. They let the CLI, the demos and the tests run a real, trained model
with no download; ``core/tools/make_digits_model.py`` regenerates them.
"""

from __future__ import annotations

import io
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = ["MODELS_DIR", "default_model_path", "load_digits_test"]

FP32_MODEL = "digits_fp32.onnx"
QDQ_MODEL = "digits_qdq.onnx"
TEST_DATA = "digits_test.npz"

# accel-core installs as plain files (never zipped), so the package folder is a real path.
MODELS_DIR = Path(str(resources.files(__name__)))


def default_model_path(quantized: bool = True) -> Path:
    """Path of the shipped digits model: the QDQ one by default, else the fp32 one."""
    return MODELS_DIR / (QDQ_MODEL if quantized else FP32_MODEL)


def load_digits_test() -> tuple[np.ndarray, np.ndarray]:
    """The held-out digits: images float32 ``[N, 1, 8, 8]`` in [0, 1], labels int64 ``[N]``."""
    data = resources.files(__name__).joinpath(TEST_DATA).read_bytes()
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return npz["images"], npz["labels"]
