"""Frontends: model formats → IR. :mod:`accel.frontend.onnx` is the ONNX importer
(reached through :func:`accel.import_onnx`, which imports it lazily: onnx is heavy)."""
