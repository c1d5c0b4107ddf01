"""Typed errors.

Every failure a user can cause (a bad model, an unsupported op, a wrong input)
raises a subclass of :class:`AccelError` whose message is one line the user can
act on. The CLI prints ``error: <message>`` and exits with code 2; ``--debug``
shows the traceback.
"""

from __future__ import annotations


class AccelError(Exception):
    """Base class of every error accel raises on purpose."""

    exit_code = 2


class ModelError(AccelError):
    """The model file cannot be read: empty, truncated, not ONNX, inconsistent."""


class UnsupportedOpError(AccelError):
    """An op (ONNX or IR) that accel does not implement."""


class ExternalDataError(ModelError):
    """External tensor data that is missing or points outside the model's folder."""


class GraphError(AccelError):
    """A graph breaks an IR invariant: a cycle, a duplicate name, a dangling value."""


class TypeInferenceError(GraphError):
    """An op's inputs or attributes do not fit its type rule."""


class InputError(AccelError):
    """A run-time input of the wrong name, shape or dtype."""


class SerializationError(AccelError):
    """A saved graph (JSON + .npy) that cannot be read back."""


class QuantizationError(AccelError, ValueError):
    """A quantization parameter that has no valid fixed-point encoding."""


class PluginError(AccelError):
    """A backend plugin that is broken: fails to import, registers something invalid, raises in a hook."""


class BackendNotFoundError(PluginError):
    """A backend named in a target that is not installed or cannot be used here."""


class AbiMismatchError(PluginError):
    """A backend runtime built against another version of the runtime ABI."""


class TargetError(AccelError):
    """A composite target that is malformed: unknown key, bad option value, duplicate device."""


class PartitionError(AccelError):
    """Partitioning failed (for example, a serializer refused a partition it had claimed)."""


class BackendRuntimeError(AccelError):
    """A backend runtime refused a blob or failed while running it."""


class ArtifactError(AccelError):
    """An .accel artifact that cannot be loaded: corrupt, truncated, tampered with or from another version."""
