"""accel-ncnn: the ncnn backend for accel.

Float32, NCHW, batch 1, run by the ncnn library (built from its pinned source
distribution and linked into the runtime): convolutions with their bias and
fused ReLU or clip (``ncnn.conv2d``: Convolution, ConvolutionDepthWise), inner
products (``ncnn.dense``), pools, ReLU, Clip, Sigmoid, LRN, Softmax, Concat,
add (BinaryOp), reshapes and batch norms. :mod:`accel_ncnn.support` is the
support table (what it takes, with every reason it refuses),
:mod:`accel_ncnn.serializer` writes a partition as ncnn's own .param and .bin
inside a versioned blob, :mod:`accel_ncnn.options` holds the target options, and
the C++ runtime (``src/runtime.cpp``) loads it once into one ``ncnn::Net``.

accel finds the backend through the entry point in pyproject.toml (group
``accel.backends``), which names this module; its hook registers
:class:`NcnnBackend`.
"""

from __future__ import annotations

from accel_sdk.backend import PluginBackend

from accel.hookspecs import hookimpl
from accel_ncnn import support
from accel_ncnn.options import NcnnOptions

__version__ = "0.1.0"


class NcnnBackend(PluginBackend):
    """The ncnn backend: made of its support table, serializer and compiled runtime.

    PluginBackend turns ``support.PATTERNS`` and ``support.OP_CHECKS`` into accel's
    pattern table and op checks, and imports ``accel_ncnn._runtime`` once idle
    OpenMP threads are set to sleep (``accel_sdk.openmp.import_runtime``).
    """

    name = "ncnn"
    distribution = "accel-ncnn"
    version = __version__
    #: ncnn's Mat is channels-first: the partitioner hands this backend NCHW activations, OIHW weights.
    layout = "NCHW"
    Options = NcnnOptions
    support = support


@hookimpl
def accel_register_backends(register):
    register(NcnnBackend)


__all__ = ["NcnnBackend", "NcnnOptions", "accel_register_backends"]
