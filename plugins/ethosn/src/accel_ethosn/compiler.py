"""The ethosn compiler: one partition → a binary command stream.

A partition body (single ops and ``ethosn.*`` composite calls, NHWC) becomes a
:class:`CommandStream`: a tensor table, a weights section and a list of
commands, every intermediate tensor placed in one arena by a memory planner at
compile time. Everything a command needs at run time is decided here:
weights in the layout the runtime packs them from, int32 biases, per-channel
fixed-point multipliers, lookup tables for the elementwise functions of one
8-bit input (requantize, sigmoid, tanh, leaky relu, clip, add/mul of a
constant), and row maps for the ops that only move bytes (reshape, split,
depth-to-space, nearest resize, padding). Tables and maps are computed by
running accel's reference kernels on every possible input value (or on
element indices), so they hold exactly what the reference computes.

The byte format is in :func:`CommandStream.to_bytes` and docs/backends/ethosn.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from accel_sdk.blob import BlobWriter

from accel import quant
from accel.abi import dtype_code
from accel.errors import PartitionError
from accel.executor import ReferenceExecutor, plan_offsets
from accel.ir import CALL_OP, Graph, Node, TensorType, Value
from accel.ops.geometry import conv2d_geometry, pool2d_geometry
from accel.ops.registry import OpContext, get_op, infer_node_types
from accel.pattern import Match, composite_match

MAGIC = b"ETHN"
VERSION = 1
#: Alignment of arena offsets and of constants in the weights section.
ALIGN = 64
NONE = 0xFFFFFFFF

# tensor kinds
INPUT, OUTPUT, ARENA = 0, 1, 2

# opcodes (QUANTIZE, DEQUANTIZE and TRANSPOSE are the conversions the runtime does on the CPU at
# the stream's edges: support.EDGE_OPS)
CONV, FC, MAXPOOL, AVGPOOL, MEAN, LUT, ADD, GATHER, CONCAT, QUANTIZE, DEQUANTIZE, TRANSPOSE = range(1, 13)
OPCODE_NAMES = {
    CONV: "conv",
    FC: "fc",
    MAXPOOL: "maxpool",
    AVGPOOL: "avgpool",
    MEAN: "mean",
    LUT: "lut",
    ADD: "add",
    GATHER: "gather",
    CONCAT: "concat",
    QUANTIZE: "quantize",
    DEQUANTIZE: "dequantize",
    TRANSPOSE: "transpose",
}


@dataclass
class Tensor:
    type: TensorType
    kind: int = ARENA
    slot: int = 0  # input / output position, or arena offset

    @property
    def nbytes(self) -> int:
        return self.type.size * np.dtype(self.type.dtype).itemsize


@dataclass
class Command:
    opcode: int
    ins: list[int]
    outs: list[int]
    consts: list[int] = field(default_factory=list)
    params: list[int] = field(default_factory=list)
    origin: str = ""

    @property
    def name(self) -> str:
        return OPCODE_NAMES[self.opcode]


@dataclass
class CommandStream:
    """A compiled partition: what :meth:`to_bytes` writes and the runtime executes."""

    tensors: list[Tensor]
    constants: list[np.ndarray]
    commands: list[Command]
    n_inputs: int
    n_outputs: int
    arena_size: int = 0
    config: tuple[int, int, int] = (1, 2, 256)  # tops, ple_ratio, sram KiB

    @property
    def weights_size(self) -> int:
        return sum(c.nbytes for c in self.constants)

    def to_bytes(self) -> bytes:
        """The command stream, little-endian:

        header: ``"ETHN"``, u32 version, u8 tops, u8 ple_ratio, u32 sram KiB, u64 arena bytes,
        u32 inputs, u32 outputs; tensors: u32 count, each u8 dtype code, u8 rank, u32 dims[rank],
        u8 kind (0 input, 1 output, 2 arena), u64 slot (input/output position or arena offset);
        constants: u32 count, each u8 dtype code, u64 element count, then an aligned constant
        section (u64 bytes, padding to 64, data); commands: u32 count, each u8 opcode, then
        four counted u32/i32 arrays: input tensor ids, output tensor ids, constant ids, params.
        """
        w = BlobWriter()
        w.magic(MAGIC)
        w.u32(VERSION, "version")
        tops, ple, sram = self.config
        w.u8(tops, "tops")
        w.u8(ple, "ple_ratio")
        w.u32(sram, "sram KiB")
        w.u64(self.arena_size, "arena bytes")
        w.u32(self.n_inputs, "inputs")
        w.u32(self.n_outputs, "outputs")
        w.u32(len(self.tensors), "tensor count")
        for t in self.tensors:
            w.u8(dtype_code(t.type.dtype), "dtype")
            w.u8(t.type.rank, "rank")
            for d in t.type.shape:
                w.u32(int(d), "dimension")
            w.u8(t.kind, "kind")
            w.u64(t.slot, "slot")
        w.u32(len(self.constants), "constant count")
        for c in self.constants:
            w.u8(dtype_code(c.dtype.name), "constant dtype")
            w.u64(c.size, "constant elements")
            w.constant(np.ascontiguousarray(c), align=ALIGN)
        w.u32(len(self.commands), "command count")
        for cmd in self.commands:
            w.u8(cmd.opcode, "opcode")
            w.counted_array("u32", cmd.ins, "inputs")
            w.counted_array("u32", cmd.outs, "outputs")
            w.counted_array("u32", cmd.consts, "constants")
            w.counted_array("i32", cmd.params, "params")
        return w.getvalue()

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for c in self.commands:
            counts[c.name] = counts.get(c.name, 0) + 1
        cmds = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        return (
            f"{len(self.commands)} commands ({cmds}), arena {self.arena_size} bytes, weights {self.weights_size} bytes"
        )


# -- helpers ---------------------------------------------------------------------------------


def _qparams(t: TensorType) -> tuple[np.ndarray, np.ndarray]:
    q = t.quant
    if q is None:
        raise PartitionError(f"ethosn: tensor {t} is not quantized")
    return np.asarray(q.scale, np.float32), np.asarray(q.zero_point, np.int64)


def _range(dtype: str) -> tuple[int, int]:
    return quant.dtype_range(dtype)


def requant_params(in_t: TensorType, out_t: TensorType) -> list[int]:
    """``[in_zp, m, shift, out_zp, lo, hi]`` of a per-tensor requantize from ``in_t`` to ``out_t``."""
    s_in, z_in = _qparams(in_t)
    s_out, z_out = _qparams(out_t)
    m, sh = quant.quantize_multiplier(s_in.astype(np.float64) / s_out.astype(np.float64).reshape(()))
    lo, hi = _range(out_t.dtype)
    return [int(z_in), int(m), int(sh), int(z_out), lo, hi]


def run_kernel(
    op: str,
    attrs: Mapping[str, Any],
    arrays: Sequence[np.ndarray],
    types: Sequence[TensorType],
    consts: Sequence[np.ndarray | None] = (),
) -> list[np.ndarray]:
    """The reference kernel of ``op`` on ``arrays`` typed ``types``."""
    full, out_types = infer_node_types(op, list(types), attrs)
    ctx = OpContext(op, full, tuple(types), tuple(out_types), tuple(consts))
    got = get_op(op).bind(ctx)(*arrays)
    return list(got) if isinstance(got, (tuple, list)) else [got]


def run_op(node: Node, arrays: Sequence[np.ndarray], in_types: Sequence[TensorType] | None = None) -> list[np.ndarray]:
    """``node``'s reference kernel on ``arrays`` (constant inputs taken from the node), typed ``in_types``."""
    types = list(in_types) if in_types is not None else [v.type for v in node.inputs]
    return run_kernel(node.op, node.attrs, arrays, types, [v.const for v in node.inputs])


def lut_of(fn: Callable[[np.ndarray], np.ndarray], in_t: TensorType, out_t: TensorType) -> np.ndarray:
    """The table ``[rows, 256]`` of an elementwise function of one 8-bit tensor (rows: 1 or one per channel).

    ``fn`` maps an array of ``in_t`` to one of ``out_t`` (same shape). Each input
    bit pattern ``v`` is put at every channel of some position and ``fn`` is run
    until all 256 are seen, so the table is what ``fn`` computes.
    """
    shape = tuple(in_t.shape)
    channels = shape[-1] if shape else 1
    positions = max(in_t.size // max(channels, 1), 1)
    table = np.zeros((channels, 256), np.uint8)
    in_dt, out_dt = np.dtype(in_t.dtype), np.dtype(out_t.dtype)
    for start in range(0, 256, positions):
        bits = np.minimum(np.arange(start, start + positions), 255).astype(np.uint8)
        x = np.repeat(bits[:, None], channels, axis=1).reshape(shape).view(in_dt)
        y = np.asarray(fn(np.ascontiguousarray(x)), dtype=out_dt).reshape(positions, channels).view(np.uint8)
        n = min(positions, 256 - start)
        table[:, start : start + n] = y[:n].T
    if np.all(table == table[:1]):
        return np.ascontiguousarray(table[:1])
    return table


def row_map(flat: np.ndarray, out_shape: Sequence[int]) -> tuple[int, np.ndarray]:
    """``(row_len, starts)``: the output in rows of ``row_len`` elements, each copied from ``starts[r]`` (−1: fill).

    ``flat[i]`` is the input element output element ``i`` reads (−1: a fill value).
    The longest trailing block of the output shape that is always contiguous is one row.
    """
    size = flat.size
    candidates = [math.prod(out_shape[k:]) for k in range(len(out_shape))] + [1]
    for length in sorted({c for c in candidates if c >= 1 and size % c == 0}, reverse=True):
        rows = flat.reshape(-1, length)
        first = rows[:, :1]
        step = np.arange(length)[None, :]
        ok = np.where(first >= 0, rows == first + step, rows == -1)
        if ok.all():
            return length, first.reshape(-1).astype(np.int64)
    raise AssertionError("unreachable: rows of one element always qualify")


# -- the compiler ------------------------------------------------------------------------------


class _Compiler:
    def __init__(self, graph: Graph, config: tuple[int, int, int]):
        self.graph = graph
        self.config = config
        self.tensors: list[Tensor] = []
        self.ids: dict[int, int] = {}
        self.constants: list[np.ndarray] = []
        self.commands: list[Command] = []

    # tensors and constants
    def tensor(self, v: Value) -> int:
        t = self.ids.get(id(v))
        if t is None:
            if v.const is not None:
                raise PartitionError(f"ethosn: constant %{v.name} is read by an op that takes no constant there")
            t = self.ids[id(v)] = self.new_tensor(v.type)
        return t

    def new_tensor(self, t: TensorType) -> int:
        if t.dtype not in ("uint8", "int8", "float32"):
            raise PartitionError(f"ethosn: tensor {t} must be uint8, int8 or (at an edge conversion) float32")
        self.tensors.append(Tensor(t))
        return len(self.tensors) - 1

    def const(self, a: np.ndarray) -> int:
        self.constants.append(np.ascontiguousarray(a))
        return len(self.constants) - 1

    def emit(self, opcode: int, ins: list[int], outs: list[int], consts: list[int], params: list[int], origin: str):
        self.commands.append(Command(opcode, ins, outs, consts, [int(p) for p in params], origin))

    # the walk
    def run(self) -> CommandStream:
        g = self.graph
        for k, v in enumerate(g.inputs):
            self.ids[id(v)] = len(self.tensors)
            self.tensors.append(Tensor(v.type, INPUT, k))
            if v.type.dtype not in ("uint8", "int8", "float32"):
                raise PartitionError(f"ethosn: input %{v.name} is {v.type.dtype}, must be uint8, int8 or float32")
        for node in g.nodes:
            if node.op == CALL_OP:
                self.composite(node)
            else:
                self.single(node)
        self.place_outputs()
        arena = plan_arena(self.tensors, self.commands)
        return CommandStream(
            self.tensors, self.constants, self.commands, len(g.inputs), len(g.outputs), arena, self.config
        )

    def place_outputs(self) -> None:
        """Graph outputs are written straight into the caller's buffers; a repeated or input output is copied."""
        seen: set[int] = set()
        for k, v in enumerate(self.graph.outputs):
            t = self.tensor(v)
            tensor = self.tensors[t]
            if tensor.kind != ARENA or t in seen:
                dst = self.new_tensor(v.type)
                self.emit(GATHER, [t], [dst], [self.const(np.zeros(1, np.int32))], [v.type.size, 0], "output copy")
                t = dst
            seen.add(t)
            self.tensors[t].kind, self.tensors[t].slot = OUTPUT, k

    # single ops
    def single(self, node: Node) -> None:
        op = node.op
        if op == "nn.max_pool2d":
            self.max_pool(node)
        elif op in ("qnn.requantize", "clip", "qnn.add", "qnn.mul"):
            x = next(v for v in node.inputs if v.const is None)
            k = node.inputs.index(x)

            def fn(a: np.ndarray, node: Node = node, k: int = k) -> np.ndarray:
                args = [a if i == k else v.const for i, v in enumerate(node.inputs)]
                return run_op(node, args)[0]

            self.lut(node.outputs[0], x, lut_of(fn, x.type, node.outputs[0].type), node.name)
        elif op == "qnn.concatenate":
            self.concat(node)
        elif op in ("reshape", "split", "nn.depth_to_space"):
            self.gather_op(node, node.inputs[0], node.outputs)
        elif op in ("qnn.quantize", "qnn.dequantize"):
            x, y = node.inputs[0], node.outputs[0]
            q = (y if op == "qnn.quantize" else x).type.quant
            if q is None or q.axis is not None:
                raise PartitionError(f"ethosn: {op} {node.name!r} must be per tensor")
            scale_bits = int(np.asarray(q.scale, np.float32).reshape(()).view(np.int32))
            params = [scale_bits, int(np.asarray(q.zero_point).reshape(()))]
            self.emit(
                QUANTIZE if op == "qnn.quantize" else DEQUANTIZE,
                [self.tensor(x)],
                [self.tensor(y)],
                [],
                params,
                node.name,
            )
        elif op == "transpose":
            x = node.inputs[0]
            rank = x.type.rank
            axes = (
                tuple(range(rank - 1, -1, -1))
                if node.attrs["axes"] is None
                else tuple(a % rank for a in node.attrs["axes"])
            )
            self.emit(TRANSPOSE, [self.tensor(x)], [self.tensor(node.outputs[0])], [], list(axes), node.name)
        else:
            raise PartitionError(f"ethosn: the compiler has no command for {op} (node {node.name!r})")

    def lut(self, out: Value, x: Value, table: np.ndarray, origin: str) -> None:
        per_channel = int(table.shape[0] > 1)
        self.emit(LUT, [self.tensor(x)], [self.tensor(out)], [self.const(table)], [per_channel], origin)

    def gather_op(self, node: Node, x: Value, outs: Sequence[Value], fill: int = 0) -> None:
        """Ops that only move elements: the reference kernel run on element indices gives each output's map."""
        idx_t = TensorType(x.type.shape, "int32")
        types = [idx_t] + [v.type for v in node.inputs[1:]]
        iota = np.arange(x.type.size, dtype=np.int32).reshape(x.type.shape)
        maps = run_op(node, [iota], types)
        for out, m in zip(outs, maps, strict=True):
            self.gather(x, out, np.asarray(m).reshape(-1), fill, node.name)

    def gather(self, x: Value | int, out: Value | int, flat: np.ndarray, fill: int, origin: str) -> None:
        src = x if isinstance(x, int) else self.tensor(x)
        dst = out if isinstance(out, int) else self.tensor(out)
        t_out = self.tensors[dst].type
        length, starts = row_map(flat, t_out.shape)
        starts = np.where(starts < 0, -1, starts).astype(np.int32)
        self.emit(GATHER, [src], [dst], [self.const(starts)], [length, fill & 0xFF], origin)

    def concat(self, node: Node) -> None:
        out = node.outputs[0]
        axis = node.attrs["axis"] % out.type.rank
        outer = math.prod(out.type.shape[:axis])
        oq = out.type.quant
        ins: list[int] = []
        inner: list[int] = []
        for v in node.inputs:
            t = self.tensor(v)
            if v.type.quant != oq:
                assert v.type.quant is not None and oq is not None
                r = quant.Requantizer(
                    v.type.quant.scale, v.type.quant.zero_point, oq.scale, oq.zero_point, out.type.dtype
                )
                tmp = self.new_tensor(TensorType(v.type.shape, out.type.dtype, oq))
                vals = np.arange(256, dtype=np.uint8).view(v.type.dtype)
                table = np.asarray(r(vals), dtype=out.type.dtype).view(np.uint8).reshape(1, 256)
                self.emit(LUT, [t], [tmp], [self.const(table)], [0], node.name)
                t = tmp
            ins.append(t)
            inner.append(math.prod(v.type.shape[axis:]))
        self.emit(CONCAT, ins, [self.tensor(out)], [], [outer, *inner], node.name)

    def max_pool(self, node: Node) -> None:
        x, y = node.inputs[0], node.outputs[0]
        g = pool2d_geometry(node.attrs, x.type.shape)
        params = [g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb + g.eb, g.pr + g.er]
        self.emit(MAXPOOL, [self.tensor(x)], [self.tensor(y)], [], params, node.name)

    # composites
    def composite(self, call: Node) -> None:
        name = call.attrs["composite"].split(".", 1)[1]
        m = composite_match(call)
        if name in ("qnn_conv2d", "qnn_conv2d_transpose"):
            self.conv(call, m, transposed=name.endswith("transpose"))
        elif name == "qnn_fc":
            self.fc(call, m)
        elif name == "qnn_avg_pool2d":
            self.avg_pool(call, m)
        elif name == "qnn_mean":
            self.mean(call, m)
        elif name in ("qnn_sigmoid", "qnn_tanh", "qnn_leaky_relu"):
            body = call.body
            assert body is not None
            ex = ReferenceExecutor(body)
            x = call.inputs[0]
            table = lut_of(lambda a: ex.run_positional([a])[0], x.type, call.outputs[0].type)
            self.lut(call.outputs[0], x, table, call.name)
        elif name == "qnn_add":
            self.add(call, m)
        elif name == "qnn_resize":
            self.resize(call, m)
        else:
            raise PartitionError(f"ethosn: the compiler has no command for composite {call.attrs['composite']}")

    def _tail(self, m: Match, linear: Node, channels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """Bias, per-channel (m, shift) and ``[in_zp, out_zp, act_min, act_max]`` of a fused requantize."""
        req = m.node("requantize")
        acc_t = req.inputs[0].type
        out_t = req.outputs[0].type
        s_acc, _ = _qparams(acc_t)
        s_out, z_out = _qparams(out_t)
        real = np.broadcast_to(s_acc.astype(np.float64), (channels,)) / s_out.astype(np.float64).reshape(())
        mult, shift = quant.quantize_multiplier(real)
        bias = np.zeros(channels, np.int32)
        if "bias" in m.bindings:
            b = m.node("bias").inputs[1].const
            assert b is not None
            bias = np.asarray(b, np.int32).reshape(channels)
        lo, hi = _range(out_t.dtype)
        if "relu" in m.bindings:  # relu on the accumulator = clamp at requantize(0) = z_out (requantize is monotone)
            lo = max(lo, int(z_out))
        _, z_in = _qparams(linear.inputs[0].type)
        return bias, np.asarray(mult, np.int32), np.asarray(shift, np.int32), [int(z_in), int(z_out), lo, hi]

    def conv(self, call: Node, m: Match, *, transposed: bool) -> None:
        conv = m.node("conv")
        w = conv.inputs[1].const
        assert w is not None
        x = m.outer(m.value("pad").producer.inputs[0]) if "pad" in m.bindings else m.outer(conv.inputs[0])  # type: ignore[union-attr]
        src = self.tensor(x)
        if transposed:
            src, w, params_geo, groups = self._transposed(conv, src, w)
        else:
            g = conv2d_geometry(conv.attrs, conv.inputs[0].type.shape, conv.inputs[1].type.shape)
            pads = [g.pt, g.pl, g.pb, g.pr]
            if "pad" in m.bindings:
                src, pads = self._explicit_pad(m.node("pad"), src, pads)
            params_geo = [g.kh, g.kw, g.sh, g.sw, *pads]
            groups = g.groups
        channels = int(w.shape[0])
        bias, mult, shift, tail = self._tail(m, conv, channels)
        consts = [self.const(np.asarray(w, np.int8)), self.const(bias), self.const(mult), self.const(shift)]
        out = self.tensor(call.outputs[0])
        self.emit(CONV, [src], [out], consts, [*params_geo, groups, *tail], call.name)

    def _explicit_pad(self, pad: Node, src: int, pads: list[int]) -> tuple[int, list[int]]:
        """A pad op before the convolution: folded into the window when it pads with the zero point, else a gather."""
        from accel.ops.nn import pad_pairs

        pairs = pad_pairs(pad.attrs["pad_width"], 4)
        x_t = pad.inputs[0].type
        _, z = _qparams(x_t)
        value = float(pad.attrs["pad_value"])
        if value == float(z):
            (pt, pb), (pl, pr) = pairs[1], pairs[2]
            return src, [pt, pl, pb, pr]
        idx_t = TensorType(x_t.shape, "int32")
        iota = np.arange(x_t.size, dtype=np.int32).reshape(x_t.shape)
        (flat,) = run_kernel("nn.pad", {**pad.attrs, "pad_value": -1.0}, [iota], [idx_t])
        dst = self.new_tensor(pad.outputs[0].type)
        fill = int(np.asarray(value).astype(x_t.dtype).view(np.uint8))
        self.gather(src, dst, np.asarray(flat).reshape(-1), fill, pad.name)
        return dst, pads

    def _transposed(self, conv: Node, src: int, w: np.ndarray) -> tuple[int, np.ndarray, list[int], int]:
        """A transposed convolution as a stride-1 convolution over the input spread out by the strides
        (the gaps filled with the input zero point, so they add nothing) with the kernel flipped."""
        a = conv.attrs
        x_t = conv.inputs[0].type
        _, h, wd, c = x_t.shape
        layout = a["kernel_layout"]
        wt = np.asarray(w)
        # to [O, kh, kw, I]
        perm = [layout.index(ch) for ch in "OHWI"]
        wt = np.transpose(wt, perm)[:, ::-1, ::-1, :]
        o, kh, kw, _ = wt.shape
        sh, sw = a["strides"]
        pt, pl, pb, pr = (int(p) for p in a["padding"])
        oph, opw = a.get("output_padding", (0, 0))
        _, oh, ow, _ = conv.outputs[0].type.shape
        # spread input with borders: size (h-1)*sh+1 + (kh-1-pt) + (kh-1-pb+oph)
        top, left = kh - 1 - pt, kw - 1 - pl
        bottom, right = kh - 1 - pb + oph, kw - 1 - pr + opw
        crop_t, crop_l = max(-top, 0), max(-left, 0)
        top, left = max(top, 0), max(left, 0)
        hs = (h - 1) * sh + 1 + top + max(bottom, 0)
        ws = (wd - 1) * sw + 1 + left + max(right, 0)
        flat = np.full((hs, ws, c), -1, np.int64)
        idx = np.arange(h * wd * c).reshape(h, wd, c)
        flat[top : top + (h - 1) * sh + 1 : sh, left : left + (wd - 1) * sw + 1 : sw, :] = idx
        # negative borders crop; the output size then follows from the window
        flat = flat[crop_t:, crop_l:, :]
        hs, ws = flat.shape[0], flat.shape[1]
        need_h, need_w = oh + kh - 1, ow + kw - 1
        if hs < need_h or ws < need_w:
            grown = np.full((max(hs, need_h), max(ws, need_w), c), -1, np.int64)
            grown[:hs, :ws] = flat
            flat = grown
        flat = flat[:need_h, :need_w]
        _, z = _qparams(x_t)
        spread_t = TensorType((1, need_h, need_w, c), x_t.dtype, x_t.quant)
        dst = self.new_tensor(spread_t)
        fill = int(np.asarray(int(z)).astype(x_t.dtype).view(np.uint8))
        self.gather(src, dst, flat.reshape(-1), fill, conv.name)
        assert o == conv.outputs[0].type.shape[-1]
        return dst, np.ascontiguousarray(wt), [kh, kw, 1, 1, 0, 0, 0, 0], 1

    def fc(self, call: Node, m: Match) -> None:
        dense = m.node("dense")
        w = dense.inputs[1].const
        assert w is not None
        channels = int(w.shape[0])
        bias, mult, shift, tail = self._tail(m, dense, channels)
        consts = [self.const(np.asarray(w, np.int8)), self.const(bias), self.const(mult), self.const(shift)]
        src = self.tensor(m.outer(dense.inputs[0]))
        self.emit(FC, [src], [self.tensor(call.outputs[0])], consts, tail, call.name)

    def _widen_table(self, m: Match) -> int:
        """The int32 each 8-bit input value is widened to (a cast, or a requantize to int32 with extra bits)."""
        widen = m.node("widen")
        x_t = widen.inputs[0].type
        vals = np.arange(256, dtype=np.uint8).view(x_t.dtype)
        t = TensorType((256,), x_t.dtype, x_t.quant)
        (wide,) = run_kernel(widen.op, widen.attrs, [vals], [t])
        return self.const(np.asarray(wide, np.int32))

    def _narrow(self, m: Match, acc_t: TensorType) -> list[int]:
        narrow = m.node("narrow")
        out_t = narrow.outputs[0].type
        if narrow.op == "cast":
            lo, hi = _range(out_t.dtype)
            return [0, 0, 0, 0, 0, lo, hi]
        return [1, *requant_params(acc_t, out_t)]

    def avg_pool(self, call: Node, m: Match) -> None:
        from accel.ops.nn import _window_counts

        pool = m.node("pool")
        x = m.outer(m.node("widen").inputs[0])
        g = pool2d_geometry(pool.attrs, pool.inputs[0].type.shape)
        include = bool(pool.attrs["count_include_pad"])
        ch = _window_counts(g.h, g.pt, g.pb, g.kh, g.dh, g.sh, g.oh, include)
        cw = _window_counts(g.w, g.pl, g.pr, g.kw, g.dw, g.sw, g.ow, include)
        counts = np.maximum(np.outer(ch, cw), 1).astype(np.int32)
        params = [g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, *self._narrow(m, pool.outputs[0].type)]
        out = self.tensor(call.outputs[0])
        consts = [self._widen_table(m), self.const(counts)]
        self.emit(AVGPOOL, [self.tensor(x)], [out], consts, params, call.name)

    def mean(self, call: Node, m: Match) -> None:
        node = m.node("mean")
        x = m.outer(m.node("widen").inputs[0])
        params = self._narrow(m, node.outputs[0].type)
        out = self.tensor(call.outputs[0])
        self.emit(MEAN, [self.tensor(x)], [out], [self._widen_table(m)], params, call.name)

    def add(self, call: Node, m: Match) -> None:
        add = m.node("add")
        a, b = add.inputs
        out_t = add.outputs[0].type
        s_a, z_a = _qparams(a.type)
        s_b, z_b = _qparams(b.type)
        s_o, z_o = _qparams(out_t)
        (ma, sa), (mb, sb), (mo, so) = quant.add_multipliers(float(s_a), float(s_b), float(s_o))
        lo, hi = _range(out_t.dtype)
        params = [int(z_a), int(z_b), int(ma), int(sa), int(mb), int(sb), int(mo), int(so), int(z_o), lo, hi]
        ins = [self.tensor(m.outer(a)), self.tensor(m.outer(b))]
        self.emit(ADD, ins, [self.tensor(call.outputs[0])], [], params, call.name)

    def resize(self, call: Node, m: Match) -> None:
        node = m.node("resize")
        x = m.outer(node.inputs[0])
        if "requantize" not in m.bindings:
            self.gather_op(node, x, call.outputs)
            return
        mid = self.new_tensor(node.outputs[0].type)
        idx_t = TensorType(x.type.shape, "int32")
        iota = np.arange(x.type.size, dtype=np.int32).reshape(x.type.shape)
        (flat,) = run_op(node, [iota], [idx_t])
        self.gather(x, mid, np.asarray(flat).reshape(-1), 0, node.name)
        req = m.node("requantize")
        table = lut_of(lambda a: run_op(req, [a])[0], req.inputs[0].type, req.outputs[0].type)
        self.emit(LUT, [mid], [self.tensor(call.outputs[0])], [self.const(table)], [0], req.name)


def plan_arena(tensors: list[Tensor], commands: list[Command]) -> int:
    """Place every arena tensor at an aligned offset so that tensors alive at once never overlap.

    A tensor lives from the command that writes it to the last one that reads
    it. Largest first, each goes to the lowest offset clear of every placed
    tensor whose lifetime overlaps (greedy by size, the classic offset
    planner). Returns the arena size in bytes.
    """
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for k, cmd in enumerate(commands):
        for t in (*cmd.ins, *cmd.outs):
            first.setdefault(t, k)
            last[t] = k
    arena = [t for t, tensor in enumerate(tensors) if tensor.kind == ARENA and t in first]
    offsets, total = plan_offsets([(t, first[t], last[t], tensors[t].nbytes) for t in arena], ALIGN)
    for t, offset in offsets.items():
        tensors[t].slot = offset
    return total


def compile_partition(graph: Graph, config: tuple[int, int, int] = (1, 2, 256)) -> CommandStream:
    """One partition body (NHWC, ops and ``ethosn.*`` composites) → its :class:`CommandStream`."""
    return _Compiler(graph, config).run()


def describe(stream: CommandStream) -> list[dict[str, Any]]:
    """The commands as plain data (for ``accel inspect``-style listings and tests)."""
    return [
        {"op": c.name, "inputs": c.ins, "outputs": c.outs, "constants": c.consts, "params": c.params, "from": c.origin}
        for c in stream.commands
    ]
