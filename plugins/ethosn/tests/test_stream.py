"""The command stream: the compiler's arena plan, and corrupted streams refused at create (never a crash)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from accel_ethosn import EthosnBackend, EthosnOptions, _runtime
from accel_ethosn.compiler import ARENA, CONV, DEQUANTIZE, GATHER, QUANTIZE, TRANSPOSE, compile_partition
from ethosn_cases import int8_pools_and_moves
from ethosn_graphs import qconv

from accel.builder import GraphBuilder
from accel.partition import partition_graph


def _stream():
    (region,) = partition_graph(int8_pools_and_moves().graph, [EthosnBackend(EthosnOptions(min_work=1))]).regions
    assert region.body is not None
    return compile_partition(region.body)


def test_arena_plan_keeps_live_tensors_apart():
    s = _stream()
    live: dict[int, tuple[int, int]] = {}
    for k, cmd in enumerate(s.commands):
        for t in (*cmd.ins, *cmd.outs):
            a, _ = live.get(t, (k, k))
            live[t] = (a, k)
    arena = [t for t, tensor in enumerate(s.tensors) if tensor.kind == ARENA]
    assert arena, "the case has intermediates"
    for i in arena:
        for j in arena:
            if i < j and not (live[i][1] < live[j][0] or live[j][1] < live[i][0]):
                a, b = s.tensors[i], s.tensors[j]
                assert a.slot + a.nbytes <= b.slot or b.slot + b.nbytes <= a.slot, f"tensors {i} and {j} overlap"
            assert s.tensors[i].slot % 64 == 0
    assert s.arena_size >= max(s.tensors[t].slot + s.tensors[t].nbytes for t in arena)
    assert s.arena_size < sum(s.tensors[t].nbytes for t in arena) + 64 * len(arena)  # reuse happened
    _runtime.Runtime(s.to_bytes())


def _refused(blob: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _runtime.Runtime(blob)


def test_corrupted_streams_are_refused():
    s = _stream()
    good = s.to_bytes()
    _refused(good[:4] + struct.pack("<I", 2) + good[8:], "version")
    _refused(good[:-7], "needs")
    _refused(good[:30] + struct.pack("<I", 0xFFFFFFFF) + good[34:], "tensor count")

    s = _stream()
    t = next(t for t in s.tensors if t.kind == ARENA)
    t.slot = s.arena_size
    _refused(s.to_bytes(), "outside the arena")

    s = _stream()
    s.commands[0].ins[0] = 9999
    _refused(s.to_bytes(), "out of range")

    s = _stream()
    s.commands[0], s.commands[-1] = s.commands[-1], s.commands[0]
    _refused(s.to_bytes(), "before it is written")

    s = _stream()
    s.commands[-1].consts = [12345] * len(s.commands[-1].consts) or [12345]
    _refused(s.to_bytes(), "constant id")

    s = _stream()
    gather = next(c for c in s.commands if c.opcode == GATHER)
    s.constants[gather.consts[0]] = np.full_like(s.constants[gather.consts[0]], 1 << 30)
    _refused(s.to_bytes(), "reads past the input")

    s = _stream()
    s.commands[0].params = s.commands[0].params[:-1]
    _refused(s.to_bytes(), "parameters")


@pytest.mark.parametrize("kib", [0, 3, 1000, 128 * 1024, 0xFFFFFFFF])
def test_sram_size_outside_the_options_is_refused(kib):
    """The header's SRAM size is one EthosnOptions allows: a power of two, 1 KiB to 64 MiB."""
    s = _stream()
    s.config = (1, 2, kib)
    _refused(s.to_bytes(), rf"sram KiB={kib}, must be (in \[1, 65536\]|a power of two)")


@pytest.mark.parametrize("kib", [1, 256, 2048, 64 * 1024])
def test_sram_sizes_the_options_allow_load(kib):
    s = _stream()
    s.config = (1, 2, kib)
    _runtime.Runtime(s.to_bytes())


def _edge_stream():
    """A float32 input quantized, laid out in NHWC, convolved and dequantized: the edge commands around a conv."""
    b = GraphBuilder(x=(1, 4, 8, 8))
    y = b.op("qnn.quantize", b.x["x"], scale=0.05, zero_point=128, out_dtype="uint8")
    y = qconv(b, y, 4, rng=np.random.default_rng(3))
    g = b.done(b.op("qnn.dequantize", y))
    (region,) = partition_graph(g, [EthosnBackend()]).regions
    assert region.body is not None
    return compile_partition(region.body)


def test_edge_conversions_are_checked_at_create():
    s = _edge_stream()
    assert [c.name for c in s.commands][:2] == ["transpose", "quantize"] and s.commands[-1].name == "dequantize"
    _runtime.Runtime(s.to_bytes())

    s = _edge_stream()
    quantize = next(c for c in s.commands if c.opcode == QUANTIZE)
    quantize.params[0] = int(np.float32(-1.0).view(np.int32))
    _refused(s.to_bytes(), "quantize: the scale must be finite and > 0")

    s = _edge_stream()
    dequantize = next(c for c in s.commands if c.opcode == DEQUANTIZE)
    dequantize.params[1] = 300
    _refused(s.to_bytes(), "dequantize zero point=300")

    s = _edge_stream()
    transpose = next(c for c in s.commands if c.opcode == TRANSPOSE)
    transpose.params = [0, 2, 2, 1]
    _refused(s.to_bytes(), "not a permutation")

    s = _edge_stream()  # the NPU's commands read and write 8-bit tensors only
    conv = next(c for c in s.commands if c.opcode == CONV)
    conv.ins[0] = next(c for c in s.commands if c.opcode == TRANSPOSE).outs[0]
    _refused(s.to_bytes(), "only an edge conversion reads or writes float32")
