"""Frontends: model formats → IR. :mod:`accel.frontend.onnx` is the ONNX importer."""

from __future__ import annotations

__all__ = ["import_onnx_model"]


def import_onnx_model(model, *, input_shapes=None, base_dir=None):  # type: ignore[no-untyped-def]
    """Shorthand for :func:`accel.frontend.onnx.import_model` (imported lazily: onnx is heavy)."""
    from accel.frontend.onnx import import_model

    return import_model(model, input_shapes=input_shapes, base_dir=base_dir)
