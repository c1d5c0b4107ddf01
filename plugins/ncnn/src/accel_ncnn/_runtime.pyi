"""The compiled runtime (src/runtime.cpp; the module glue comes from accel_sdk/runtime.hpp)."""

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
