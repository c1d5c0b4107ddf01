"""Helpers for tests and benchmarks: realistic generated models (``modelgen``).

Nothing here is needed to compile or run a model; ``quantize_qdq`` needs
onnxruntime (the ``test`` extra).
"""

from __future__ import annotations
