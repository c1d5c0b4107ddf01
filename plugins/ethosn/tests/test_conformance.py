"""accel-sdk's conformance kit on the ethosn backend: every composite and op against accel's quantized
reference kernels (bitwise), and refusals with the reason a user reads in `accel inspect`."""

from __future__ import annotations

from accel_ethosn import EthosnBackend, EthosnOptions
from accel_sdk.testing import BackendConformance
from ethosn_cases import convolutions, int8_convolutions, int8_pools_and_moves, pools_and_tables, resize_case
from ethosn_refusals import refusals


class TestConformance(BackendConformance):
    backend = EthosnBackend
    # some cases have no multiply-accumulates: take every region anyway (the default rule inlines cheap ones)
    options = EthosnOptions(min_work=1)
    exact = True

    def cases(self):
        return [pools_and_tables(), int8_pools_and_moves(), resize_case(), convolutions(), int8_convolutions()]

    def refusals(self):
        return refusals()
