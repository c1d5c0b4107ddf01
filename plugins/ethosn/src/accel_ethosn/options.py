"""Target options of the ethosn backend (``{"kind": "ethosn", "options": {...}}`` in a target file).

The NPU configuration a command stream is compiled for, as Arm's Ethos-N
driver stack names it: the variant, its TOPS and PLE ratio, and the size of
its on-chip SRAM. Unknown keys and values are refused with a line naming them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from accel.backend import BackendOptions

#: SRAM of one N78 configuration in KiB, by (tops, ple_ratio): 32 KiB per CE times the CEs it has.
DEFAULT_SRAM_KIB: dict[tuple[int, int], int] = {
    (1, 2): 256,
    (1, 4): 256,
    (2, 2): 512,
    (2, 4): 512,
    (4, 2): 1024,
    (4, 4): 1024,
    (8, 2): 2048,
    (8, 4): 2048,
}


class EthosnOptions(BackendOptions):
    """The NPU configuration: ``variant``, ``tops``, ``ple_ratio`` and ``sram_size`` (KiB, 0 = the configuration's)."""

    variant: Literal["N78"] = Field(default="N78", description="Ethos-N variant (the N78 family)")
    tops: Literal[1, 2, 4, 8] = Field(default=1, description="tera-operations per second of the configuration")
    ple_ratio: Literal[2, 4] = Field(default=2, description="programmable layer engines per compute engine pair")
    sram_size: int = Field(
        default=0,
        ge=0,
        le=64 * 1024,
        description="on-chip SRAM in KiB (0: the configuration's own); arenas larger than it are reported",
    )

    @model_validator(mode="after")
    def _sram_is_a_power_of_two(self) -> EthosnOptions:
        s = self.sram_size
        if s and s & (s - 1):
            raise ValueError(f"sram_size={s} KiB: must be 0 (the configuration's) or a power of two")
        return self

    @property
    def sram_bytes(self) -> int:
        """SRAM in bytes: ``sram_size`` when set, else the configuration's default."""
        kib = self.sram_size or DEFAULT_SRAM_KIB[(self.tops, self.ple_ratio)]
        return kib * 1024
