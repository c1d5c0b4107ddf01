"""accel-acl: the acl backend for accel (Arm Compute Library's operator contract).

What it takes is the support table of TVM's ACL integration, and further
(:mod:`accel_acl.support`; docs/backends/acl.md lists it with every refusal
reason): NHWC, any batch, float32 and uint8/int8, as composites and single ops.
Neighbouring supported layers form one multi-layer subgraph per call. The
serializer writes accel-sdk's graph blob (:mod:`accel_acl.serializer`); the C++
runtime (``src/runtime.cpp``) runs on accel-sdk's graph runtime and computes
through oneDNN, the library that runs on Arm Compute Library's kernels on
AArch64, and requantizes in the sdk's code so quantized results are bit-exact
with :mod:`accel.quant`.

accel finds the backend through the entry point in pyproject.toml (group
``accel.backends``), which names this module; its hook registers
:class:`AclBackend`.
"""

from __future__ import annotations

from accel_sdk.backend import PluginBackend

from accel.backend import CostHints
from accel.hookspecs import hookimpl
from accel_acl import support
from accel_acl.options import AclOptions

__version__ = "0.1.0"


class AclBackend(PluginBackend):
    """The acl backend: its support table, serializer and oneDNN runtime."""

    name = "acl"
    distribution = "accel-acl"
    version = __version__
    #: ACL works on NHWC activations; the partitioner converts at region boundaries.
    layout = "NHWC"
    Options = AclOptions
    cost = CostHints(min_work=1)
    support = support


@hookimpl
def accel_register_backends(register):
    register(AclBackend)


__all__ = ["AclBackend", "AclOptions", "accel_register_backends"]
