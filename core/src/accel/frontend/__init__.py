"""Frontends: model formats → IR. :mod:`accel.frontend.onnx` is the ONNX importer."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel.ir import Graph

__all__ = ["import_onnx_model"]


def import_onnx_model(
    model: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    base_dir: str | os.PathLike[str] | None = None,
) -> Graph:
    """Shorthand for :func:`accel.frontend.onnx.import_model` (imported lazily: onnx is heavy).

    ``model`` is a path, the bytes of a model, or an ``onnx.ModelProto``.
    """
    from accel.frontend.onnx import import_model

    return import_model(model, input_shapes=input_shapes, base_dir=base_dir)
