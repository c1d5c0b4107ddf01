"""The loaded runtime: the thread count is chosen when a blob is loaded, and README.md documents the blob."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from accel_ncnn import NcnnBackend, serializer, support
from accel_sdk.testing import random_inputs
from ncnn_graphs import conv

import accel
from accel.compiler import compile as compile_model
from accel.executor import ReferenceExecutor

README = Path(__file__).resolve().parents[1] / "README.md"


def compiled(graph):
    return compile_model(graph, target={"devices": [{"kind": "ncnn"}]}, available={"ncnn": NcnnBackend})


def test_threads_are_chosen_when_loading(tmp_path):
    graph = conv((1, 16, 24, 24), 32, padding=(1, 1, 1, 1))
    artifact = compiled(graph)
    ((partition, _),) = artifact.partitions
    runtime = NcnnBackend().runtime_module()
    assert runtime.Runtime(artifact.blobs[partition], threads=2).threads == 2
    assert runtime.Runtime(artifact.blobs[partition], threads=1).threads == 1

    path = artifact.save(tmp_path / "conv.accel")
    feed = random_inputs(graph, seed=1)
    want = ReferenceExecutor(graph).run(feed)
    for threads in (1, 2):
        exe = accel.load(path, threads=threads)
        assert exe.threads == threads
        got = exe.run(feed)
        for v in graph.outputs:
            np.testing.assert_allclose(np.asarray(got[v.name]), want[v.name], rtol=1e-4, atol=1e-4)


def test_readme_lists_every_layer():
    """README.md's table is the support table's (support.layer_table()), and it documents the blob's version."""
    text = README.read_text(encoding="utf-8")
    assert support.layer_table() in text, "README.md's layer table is out of date: paste support.layer_table()"
    assert f'magic `"{serializer.MAGIC.decode()}"`, version {serializer.VERSION}' in text


def test_param_text_is_ncnn_text():
    """The blob holds ncnn's own .param: magic line, counts, one layer a line (Split for a shared blob)."""
    graph = conv((1, 4, 6, 6), 4, padding=(1, 1, 1, 1))
    ((partition, _),) = compiled(graph).partitions
    text = serializer.param_text(compiled(graph).blobs[partition]).splitlines()
    assert text[0] == "7767517" and text[1] == "2 2"
    assert text[2] == "Input input_0 0 1 in0 0=6 1=6 2=4"
    assert text[3].startswith("Convolution convolution_1 1 1 in0 t0 0=4 1=3 11=3 ") and text[3].endswith(" 9=1")


def _edited(blob: bytes, old: str, new: str) -> bytes:
    """blob with one parameter of its .param text changed (to a text of the same length)."""
    assert len(old) == len(new) and old.encode() in blob
    return blob.replace(old.encode(), new.encode(), 1)


def test_a_param_whose_numbers_disagree_with_its_shapes_is_refused():
    """ncnn checks a .param's syntax, not its numbers: create walks the layers with the graph inputs' shapes
    and refuses a weight size, a window or a shape that does not fit (a fuzzed blob with such a weight size
    read past its weights in ncnn's GEMM)."""
    import pytest
    from ncnn_graphs import dense

    runtime = NcnnBackend().runtime_module()
    conv_graph = conv((1, 4, 6, 6), 4, padding=(1, 1, 1, 1))
    conv_blob = next(iter(compiled(conv_graph).blobs.values()))
    assert runtime.Runtime(conv_blob).threads >= 1
    for old, new, message in (
        (" 6=144", " 6=128", "weight size does not fit"),  # 4 x 4 x 3 x 3 weights claimed as 128
        (" 0=6 1=6 2=4", " 0=6 1=6 2=3", "not a graph input of the declared shape"),
        (" 3=1 13=1", " 3=2 13=1", "does not have the output's shape"),  # a stride the output does not have
        ("Convolution convolution_1", "Deconvolution convoluti_1", "not one the serializer writes"),
    ):
        with pytest.raises(ValueError, match=message):
            runtime.Runtime(_edited(conv_blob, old, new))
    dense_blob = next(iter(compiled(dense(relu=True)).blobs.values()))
    text = serializer.param_text(dense_blob)
    assert " 2=480" in text  # 10 outputs x 48 features
    with pytest.raises(ValueError, match="weight size does not fit its input"):
        runtime.Runtime(_edited(dense_blob, " 2=480", " 2=470"))
