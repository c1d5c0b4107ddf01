"""accel-sdk: what a backend author builds with.

- C++ headers (:func:`get_include`): ``accel_sdk/blob_reader.hpp``, ``graph_blob.hpp``,
  ``geometry.hpp``, ``tensor.hpp``, ``thread_pool.hpp``, ``quant.hpp`` and ``runtime.hpp``,
  the glue that turns one runtime class into the C table of ``accel/runtime_abi.h``
  and a Python module;
- the Python halves of the blob formats: :mod:`accel_sdk.blob` (``BlobWriter``, which
  writes what ``blob_reader.hpp`` reads) and :mod:`accel_sdk.graph_blob`
  (``GraphBlobWriter``, a partition as a graph of kernels that ``graph_blob.hpp`` reads);
- CMake support (:func:`get_cmake_dir`): ``find_package(accel_sdk CONFIG)`` and
  ``accel_add_runtime(<target> <sources...>)``;
- :mod:`accel_sdk.testing`: the conformance kit a backend's tests subclass.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("accel-sdk")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

_HERE = Path(__file__).resolve().parent


def get_include() -> str:
    """Absolute path of the folder holding ``accel_sdk/*.hpp`` (add it to the include path)."""
    return str(_HERE / "include")


def get_cmake_dir() -> str:
    """Absolute path of the folder holding ``accel_sdkConfig.cmake`` (for ``-Daccel_sdk_DIR=``)."""
    return str(_HERE / "cmake")


__all__ = ["__version__", "get_cmake_dir", "get_include"]
