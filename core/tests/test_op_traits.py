"""Op traits: declared on the op in ``register_op``, read by the passes from the OpDef.

The probes register a throwaway op (``probe.*``) with chosen traits and check
that each pass follows the trait, not the op's name.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accel
from accel.backend import count_work
from accel.builder import GraphBuilder
from accel.ir import Graph, QuantParams, TensorType
from accel.ops.common import same_as_input
from accel.ops.registry import REGISTRY, Layout, OpDef, Qdq, available, register_op
from accel.passes import convert_layout, fold_batch_norm, qdq_to_qnn

SRC = Path(accel.__file__).parent


def undeclared_layout(ops: dict[str, OpDef]) -> list[str]:
    return sorted(name for name, d in ops.items() if not (isinstance(d.layout, Layout) or callable(d.layout)))


def test_every_registered_op_declares_its_layout_behaviour() -> None:
    available()  # loads every op family
    assert len(REGISTRY) > 40
    assert undeclared_layout(REGISTRY) == []


def test_an_op_without_a_layout_trait_is_caught() -> None:
    bare = OpDef("probe.bare", {}, same_as_input, lambda ctx, x: x, (1, 1))
    assert bare.layout is None
    assert undeclared_layout({**REGISTRY, "probe.bare": bare}) == ["probe.bare"]


@pytest.fixture
def probe() -> Iterator[Callable[..., str]]:
    """``probe(name, **traits)`` registers ``probe.<name>``: identity kernel, same-type rule."""
    added: list[str] = []

    def make(name: str, *, num_inputs: int = 1, **traits: Any) -> str:
        full = f"probe.{name}"
        register_op(full, infer=same_as_input, num_inputs=num_inputs, **traits)(lambda ctx, x, *rest: x.copy())
        added.append(full)
        return full

    yield make
    for name in added:
        REGISTRY.pop(name, None)


def _conv_probe_conv(op: str) -> Graph:
    b = GraphBuilder(x=(1, 2, 5, 5))
    w1 = b.const(np.ones((3, 2, 1, 1), np.float32))
    w2 = b.const(np.ones((2, 3, 1, 1), np.float32))
    y = b.op("nn.conv2d", b.x["x"], w1)
    y = b.op(op, y)
    return b.done(b.op("nn.conv2d", y, w2))


def _run(g: Graph) -> np.ndarray:
    (out,) = accel.execute(g, {"x": np.arange(50, dtype=np.float32).reshape(1, 2, 5, 5)}).values()
    return out


def _transposes(g: Graph) -> int:
    return sum(n.op == "transpose" for n in g.nodes)


def test_layout_pass_follows_the_trait_not_the_name(probe: Callable[..., str]) -> None:
    through = convert_layout(_conv_probe_conv(probe("through", layout=Layout.ELEMENTWISE)), "NHWC")
    fixed = convert_layout(_conv_probe_conv(probe("fixed", layout=Layout.FIXED)), "NHWC")
    assert _transposes(through) == 2  # the graph input and output only
    assert _transposes(fixed) == 4  # back to NCHW around the FIXED op, and forth again
    np.testing.assert_array_equal(_run(through), _run(fixed))


def test_an_own_layout_rule_is_checked_against_the_types(probe: Callable[..., str]) -> None:
    # a rule claiming its output keeps the input's order, for an op whose type rule says so: taken
    keep = probe("keep", layout=lambda attrs, t, perm: (attrs, perm))
    assert _transposes(convert_layout(_conv_probe_conv(keep), "NHWC")) == 2
    # a rule that declines: the op runs in the original order
    decline = probe("decline", layout=lambda attrs, t, perm: None)
    assert _transposes(convert_layout(_conv_probe_conv(decline), "NHWC")) == 4
    # a rule promising an order the rebuilt node does not have is not trusted
    wrong = probe("wrong", layout=lambda attrs, t, perm: (attrs, (0, 3, 1, 2)))
    g = _conv_probe_conv(wrong)
    out = convert_layout(g, "NHWC")
    assert _transposes(out) == 4
    np.testing.assert_array_equal(_run(out), _run(g))


def test_work_follows_moves_data_and_work_traits(probe: Callable[..., str]) -> None:
    b = GraphBuilder(x=(2, 3, 4, 4))
    moved = b.op(probe("moves", layout=Layout.ELEMENTWISE, moves_data=True), b.x["x"])
    counted = b.op(probe("counted", layout=Layout.ELEMENTWISE, work=lambda ctx: 7), moved)
    plain = b.op(probe("plain", layout=Layout.ELEMENTWISE), counted)
    g = b.done(plain)
    assert [count_work(n) for n in g.nodes] == [(0, 0), (7, 0), (96, 0)]


def test_work_of_a_pooling_counts_its_window() -> None:
    b = GraphBuilder(x=(1, 2, 8, 8))
    g = b.done(b.op("nn.max_pool2d", b.x["x"], pool_size=(3, 3), strides=(1, 1)))
    assert count_work(g.nodes[0]) == (2 * 6 * 6 * 9, 0)


def _qdq_around(op: str) -> Graph:
    q = QuantParams(0.5, 3)
    b = GraphBuilder(x=TensorType((1, 4), "uint8", q))
    y = b.op("qnn.dequantize", b.x["x"])
    y = b.op(op, y)
    return b.done(b.op("qnn.quantize", y, scale=0.5, zero_point=3, out_dtype="uint8"))


def test_qdq_role_selects_runs_the_op_on_stored_integers(probe: Callable[..., str]) -> None:
    sel = qdq_to_qnn(_qdq_around(probe("sel", layout=Layout.ELEMENTWISE, qdq=Qdq.SELECTS)))
    assert [n.op for n in sel.nodes] == ["probe.sel"]
    assert sel.nodes[0].inputs[0].type.dtype == "uint8"
    other = qdq_to_qnn(_qdq_around(probe("other", layout=Layout.ELEMENTWISE)))
    assert [n.op for n in other.nodes] == ["qnn.dequantize", "probe.other", "qnn.quantize"]


def test_qdq_role_may_depend_on_attributes() -> None:
    def resize(method: str) -> list[str]:
        q = QuantParams(0.5, 3)
        b = GraphBuilder(x=TensorType((1, 1, 2, 2), "uint8", q))
        y = b.op("qnn.dequantize", b.x["x"])
        y = b.op("image.resize2d", y, size=(4, 4), method=method)
        g = b.done(b.op("qnn.quantize", y, scale=0.5, zero_point=3, out_dtype="uint8"))
        return [n.op for n in qdq_to_qnn(g).nodes]

    assert resize("nearest_neighbor") == ["image.resize2d"]
    assert "qnn.dequantize" in resize("linear")


def test_batch_norm_folds_into_any_op_with_channel_axes(probe: Callable[..., str]) -> None:
    def dense_like(name: str, **traits: Any) -> Graph:
        op = probe(name, num_inputs=2, layout=Layout.FIXED, **traits)
        b = GraphBuilder(x=(2, 3))
        w = b.const(np.ones((3, 3), np.float32))
        y = b.op(op, b.x["x"], w)
        p = [b.const(np.full(3, v, np.float32)) for v in (2.0, 1.0, 0.0, 1.0)]
        return b.done(b.op("nn.batch_norm", y, *p, axis=1, epsilon=0.0))

    folded = fold_batch_norm(dense_like("linear", channel_axes=lambda attrs, rank: (rank - 1, 0)))
    assert [n.op for n in folded.nodes] == ["probe.linear", "nn.bias_add"]
    kept = fold_batch_norm(dense_like("opaque"))
    assert [n.op for n in kept.nodes] == ["probe.opaque", "nn.batch_norm"]


@pytest.mark.parametrize(
    ("traits", "needle"),
    [
        ({"qdq": Qdq.LINEAR}, "name a qnn op"),
        ({"qdq": Qdq.SELECTS, "qnn": "qnn.add"}, "name a qnn op"),
        ({"qdq": Qdq.LINEAR, "qnn": "qnn.dense"}, "channel_axes"),
        ({"layout": "elementwise"}, "must be a Layout or a rule"),
        ({"layout": Layout.AXIS}, r"Layout.AXIS ops have the attribute\(s\) axis"),
        ({"layout": Layout.CONV}, "data_layout, kernel_layout"),
    ],
)
def test_register_op_refuses_inconsistent_traits(traits: dict[str, Any], needle: str) -> None:
    with pytest.raises(RuntimeError, match=needle):
        register_op("probe.bad", infer=same_as_input, **{"layout": Layout.FIXED, **traits})
    assert "probe.bad" not in REGISTRY


def _runtime_imports(path: Path) -> set[str]:
    """accel modules a module imports when it is loaded (not those under ``if TYPE_CHECKING``)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("accel"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("accel"))
    return found


def test_types_registry_and_printer_do_not_import_each_other() -> None:
    assert _runtime_imports(SRC / "tensor_types.py") == {"accel.errors"}
    assert "accel.ir" not in _runtime_imports(SRC / "ops" / "registry.py")
    assert "accel.ir" not in _runtime_imports(SRC / "printer.py")
    # still importable from where they were public
    from accel.ir import MAX_ELEMENTS, freeze_attrs  # noqa: F401
    from accel.ir import QuantParams as Q
    from accel.ir import TensorType as T
    from accel.tensor_types import QuantParams, TensorType

    assert T is TensorType and Q is QuantParams


def trait_rows() -> list[str]:
    """The rows docs/ops.md's trait table must have, from the registry."""
    from accel.ops.common import input_work, pool_work

    work_names = {pool_work: "window", input_work: "input"}
    rows = []
    for name in available():
        d = REGISTRY[name]
        layout = d.layout.value if isinstance(d.layout, Layout) else "own rule"
        if d.moves_data:
            work = "none"
        elif d.work is not None:
            work = work_names.get(d.work, d.work.__name__)
        else:
            work = "MACs" if d.macs is not None else "outputs"
        qdq = d.qdq.value if isinstance(d.qdq, Qdq) else "by attributes"
        if d.qnn is not None:
            qdq += f" → `{d.qnn}`"
        if qdq == "none":
            qdq = ""
        rows.append(f"| `{name}` | {layout} | {work} | {'yes' if d.channel_axes else ''} | {qdq} |")
    return rows


def test_docs_trait_table_matches_the_registry() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "ops.md").read_text()
    section = doc.split("\n## Traits\n", 1)[1].split("\n## ", 1)[0]
    rows = section.split("| op | layout | work | channel axes | qdq role |", 1)[1]
    table = [line for line in rows.splitlines() if line.startswith("| `")]
    want = trait_rows()
    missing = [r for r in want if r not in table]
    assert missing == [], "docs/ops.md's trait table needs these rows:\n" + "\n".join(missing)
    assert len(table) == len(want), "docs/ops.md's trait table has rows for ops that are not registered"
