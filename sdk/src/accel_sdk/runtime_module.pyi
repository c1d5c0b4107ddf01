"""The interface of every compiled runtime module accel-sdk's glue (accel_sdk/runtime.hpp) builds.

A plugin's ``_runtime.pyi`` re-exports it:
``from accel_sdk.runtime_module import ABI_VERSION as ABI_VERSION, Runtime as Runtime, __accel_abi__ as __accel_abi__``.
"""

from collections.abc import Sequence

import numpy as np

ABI_VERSION: int
__accel_abi__: object

class Runtime:
    """A loaded blob; one instance may run from several threads at once."""

    def __init__(self, blob: bytes, threads: int = 0) -> None: ...
    @property
    def backend(self) -> str: ...
    @property
    def threads(self) -> int: ...
    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None: ...
