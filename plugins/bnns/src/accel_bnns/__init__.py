"""accel-bnns: the bnns backend for accel (Apple BNNS's operator contract, computed on this host).

Float32, planar NCHW at the partition boundary, constant weights: convolutions
(any groups) with their bias, relu/sigmoid or batch norm fused, dense layers
with bias and GELU fused, batch matmul, max/avg/global pooling and instance
norm. :mod:`accel_bnns.support` is the support table (patterns, op checks and
their reasons), :mod:`accel_bnns.serializer` the blob, :mod:`accel_bnns.options`
the target options, ``src/runtime.cpp`` the C++ runtime (accel-sdk's graph
runtime, computing through oneDNN). README.md documents the blob format.

accel finds the backend through the entry point in pyproject.toml
(group ``accel.backends``), which names this module; its hook registers
:class:`BnnsBackend`.
"""

from __future__ import annotations

from accel_sdk.backend import PluginBackend

from accel.hookspecs import hookimpl
from accel_bnns import support
from accel_bnns.options import BnnsOptions

__version__ = "0.1.0"


class BnnsBackend(PluginBackend):
    """The bnns backend: its support table, serializer and oneDNN runtime."""

    name = "bnns"
    distribution = "accel-bnns"
    version = __version__
    #: BNNS takes planar tensors: the partitioner hands this backend the model's NCHW tensors as they are.
    layout = "NCHW"
    Options = BnnsOptions
    support = support


@hookimpl
def accel_register_backends(register):
    register(BnnsBackend)


__all__ = ["BnnsBackend", "BnnsOptions", "accel_register_backends"]
