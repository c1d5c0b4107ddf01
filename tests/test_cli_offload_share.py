"""``accel compile`` warns when most of the model's work stays on the host, with the share offloaded
and the reasons that keep the most work there (one line on stderr); not when most is offloaded."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
from cli_helpers import run_accel

import accel
from accel.cli import offload_warning
from accel.models import default_model_path


def accel_cli(*args: str) -> subprocess.CompletedProcess:
    return run_accel(*args)


def _model(tmp_path: Path, groups: int) -> Path:
    """A small 1x1 convolution the test backend takes, then a large 3x3 one with ``groups`` groups
    (the test backend takes groups=1 only) and a relu."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.random((16, 3, 1, 1), dtype=np.float32), "w1")
    w2 = numpy_helper.from_array(rng.random((32, 16 // groups, 3, 3), dtype=np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="small"),
        helper.make_node("Conv", ["a", "w2"], ["b"], pads=[1, 1, 1, 1], group=groups, name="big"),
        helper.make_node("Relu", ["b"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w1, w2],
    )
    path = tmp_path / f"groups{groups}.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_compile_that_leaves_most_work_on_the_host_warns(tmp_path: Path) -> None:
    proc = accel_cli("compile", str(_model(tmp_path, 2)), "--backends", "testbackend", "-o", str(tmp_path / "m.accel"))
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, proc.stderr
    # 16x3 MACs a pixel offloaded, 32x8x9 left: 48 / (48 + 2304) of 1024 pixels
    share = 48 / (48 + 2304)
    assert warnings[0].startswith(f"warning: only {share:.1%} of the model's MACs are offloaded (49.2k of 2.41M)")
    assert re.search(r"biggest reasons: testbackend: .*groups=2, groups must = 1 \(1 node, 98\.0%\)", warnings[0])
    assert "no node was offloaded" not in proc.stderr


def test_compile_that_offloads_most_of_the_work_does_not_warn(tmp_path: Path) -> None:
    proc = accel_cli("compile", str(_model(tmp_path, 1)), "--backends", "testbackend", "-o", str(tmp_path / "m.accel"))
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr


def test_share_is_counted_in_operations_without_macs() -> None:
    """The quantized digits model on the test backend offloads nothing (that has its own warning); the
    fp32 one offloads most of its MACs. A model with no MACs at all is counted in operations."""
    artifact = accel.compile(default_model_path(quantized=False), "testbackend")
    assert offload_warning(artifact.report, artifact.graph) is None
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Exp", ["r"], ["e"]),
            helper.make_node("Exp", ["e"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    artifact = accel.compile(model.SerializeToString(), "testbackend")
    assert artifact.report.partitions  # the relu
    warning = offload_warning(artifact.report, artifact.graph)
    assert warning is not None and warning.startswith("only 33.3% of the model's work (operations) is offloaded")
