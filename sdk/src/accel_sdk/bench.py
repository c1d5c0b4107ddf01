"""What a backend's benchmark needs to stand next to ONNX Runtime fairly, in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["cpu_has_vnni", "ort_session"]


def cpu_has_vnni() -> bool:
    """Whether the CPU multiplies int8 with VNNI (AVX512_VNNI or AVX-VNNI), as /proc/cpuinfo says."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def ort_session(model: bytes, threads: int, *, quantized: bool = False) -> Any:
    """An onnxruntime CPU session to time a backend against, in the same process.

    ``threads`` intra-op threads, one inter-op; worker threads sleep when idle
    (``session.intra_op.allow_spinning=0``: spinning ones would take the cores from the
    backend's own threads between calls). For a quantized model on a CPU without VNNI,
    ONNX Runtime's exact int8 kernels (``session.x64quantprecision=1``): its default
    ones saturate 16-bit pair sums there, which a bit-exact backend would be timed
    against unfairly.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if quantized and not cpu_has_vnni():
        opts.add_session_config_entry("session.x64quantprecision", "1")
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
