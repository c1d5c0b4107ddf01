"""Pick OpenBLAS's AVX-512 kernels where the CPU has them.

numpy's OpenBLAS classifies some AVX-512 CPUs (AMD EPYC among them) as Haswell
and runs its AVX2 kernels, about half the speed of its AVX-512 ones there. The
choice is read once, when the library loads, from ``OPENBLAS_CORETYPE``, so it
has to be set before numpy is imported. It is set only when the user has not
set it, numpy is not yet loaded, and the CPU reports every AVX-512 subset the
SkylakeX kernels use (on a CPU without them those kernels would crash).
``ACCEL_OPENBLAS_TUNING=0`` turns this off.
"""

from __future__ import annotations

import os
import sys

_SKYLAKEX_FLAGS = {"avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512cd"}


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def tune_openblas() -> str | None:
    """Set ``OPENBLAS_CORETYPE`` if it is safe and useful; return the value chosen."""
    if os.environ.get("ACCEL_OPENBLAS_TUNING", "1") == "0" or "OPENBLAS_CORETYPE" in os.environ:
        return None
    if "numpy" in sys.modules or not sys.platform.startswith("linux"):
        return None
    if cpu_flags() >= _SKYLAKEX_FLAGS:
        os.environ["OPENBLAS_CORETYPE"] = "SKYLAKEX"
        return "SKYLAKEX"
    return None
