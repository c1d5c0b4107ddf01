"""Train the default model that ships inside accel-core, and write its files.

A small CNN learns scikit-learn's handwritten digits (8x8 images, real data
bundled with scikit-learn, nothing downloaded) in plain numpy: forward and
backward passes of conv / relu / max-pool / dense / softmax cross-entropy, and
Adam. It is exported as an fp32 ONNX model and as a QDQ model quantized with
ONNX Runtime's static quantizer (uint8 activations, int8 per-channel weights;
the classifier head and the softmax stay fp32). The held-out images and labels
go beside them.

Run from anywhere (needs onnxruntime and scikit-learn, the ``test`` extra)::

    python core/tools/make_digits_model.py

Every seed is fixed and every file is written byte-deterministically (ONNX
with deterministic protobuf serialization, the .npz with fixed zip
timestamps), so running it twice on one machine gives identical files.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 0
TEST_FRACTION = 0.25
EPOCHS = 30
BATCH = 32
LR = 2e-3
CALIBRATION_IMAGES = 512
MAX_FILE_BYTES = 300_000
OUT_DIR = Path(__file__).resolve().parents[1] / "src" / "accel" / "models"

# (name, in channels, out channels); every conv is 3x3, stride 1, padding 1.
CONVS = [("conv1", 1, 16), ("conv2", 16, 32), ("conv3", 32, 32)]
HEAD_IN = 32 * 4 * 4  # conv3's output [32, 4, 4], flattened
CLASSES = 10


# ---------------------------------------------------------------- numpy layers


def conv3x3(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Same-padded 3x3 cross-correlation, NCHW/OIHW; returns (output, padded input for backward)."""
    n, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), np.float32)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + h, j : j + wd], w[:, :, i, j], optimize=True)
    return out + b[None, :, None, None], xp


def conv3x3_backward(dout: np.ndarray, xp: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients (dx, dw, db) of conv3x3 given the padded input it saw."""
    _, _, h, wd = dout.shape
    dw = np.zeros_like(w)
    dxp = np.zeros_like(xp)
    for i in range(3):
        for j in range(3):
            dw[:, :, i, j] = np.einsum("nohw,nchw->oc", dout, xp[:, :, i : i + h, j : j + wd], optimize=True)
            dxp[:, :, i : i + h, j : j + wd] += np.einsum("nohw,oc->nchw", dout, w[:, :, i, j], optimize=True)
    return dxp[:, :, 1:-1, 1:-1], dw, dout.sum(axis=(0, 2, 3))


def maxpool2(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2x2 stride-2 max pooling; returns (output, one-hot mask of the winners for backward)."""
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    arg = win.argmax(axis=-1)
    mask = np.zeros_like(win)
    np.put_along_axis(mask, arg[..., None], 1.0, axis=-1)
    return np.take_along_axis(win, arg[..., None], axis=-1)[..., 0], mask


def maxpool2_backward(dout: np.ndarray, mask: np.ndarray) -> np.ndarray:
    n, c, h2, w2, _ = mask.shape
    d = mask * dout[..., None]
    return d.reshape(n, c, h2, w2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h2 * 2, w2 * 2)


def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """He-normal weights, zero biases."""
    p: dict[str, np.ndarray] = {}
    for name, cin, cout in CONVS:
        p[f"{name}.weight"] = rng.normal(0, np.sqrt(2.0 / (cin * 9)), (cout, cin, 3, 3)).astype(np.float32)
        p[f"{name}.bias"] = np.zeros(cout, np.float32)
    p["head.weight"] = rng.normal(0, np.sqrt(1.0 / HEAD_IN), (CLASSES, HEAD_IN)).astype(np.float32)
    p["head.bias"] = np.zeros(CLASSES, np.float32)
    return p


def forward(p: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Logits [N, 10] and the activations backward needs."""
    cache: dict[str, np.ndarray] = {}
    h1, cache["xp1"] = conv3x3(x, p["conv1.weight"], p["conv1.bias"])
    a1 = np.maximum(h1, 0)
    h2, cache["xp2"] = conv3x3(a1, p["conv2.weight"], p["conv2.bias"])
    a2 = np.maximum(h2, 0)
    m2, cache["mask"] = maxpool2(a2)
    h3, cache["xp3"] = conv3x3(m2, p["conv3.weight"], p["conv3.bias"])
    a3 = np.maximum(h3, 0)
    flat = a3.reshape(a3.shape[0], -1)
    cache.update(h1=h1, h2=h2, h3=h3, flat=flat)
    return flat @ p["head.weight"].T + p["head.bias"], cache


def backward(p: dict[str, np.ndarray], cache: dict[str, np.ndarray], dlogits: np.ndarray) -> dict[str, np.ndarray]:
    g: dict[str, np.ndarray] = {}
    g["head.weight"] = dlogits.T @ cache["flat"]
    g["head.bias"] = dlogits.sum(axis=0)
    d = (dlogits @ p["head.weight"]).reshape(cache["h3"].shape) * (cache["h3"] > 0)
    d, g["conv3.weight"], g["conv3.bias"] = conv3x3_backward(d, cache["xp3"], p["conv3.weight"])
    d = maxpool2_backward(d, cache["mask"]) * (cache["h2"] > 0)
    d, g["conv2.weight"], g["conv2.bias"] = conv3x3_backward(d, cache["xp2"], p["conv2.weight"])
    d = d * (cache["h1"] > 0)
    _, g["conv1.weight"], g["conv1.bias"] = conv3x3_backward(d, cache["xp1"], p["conv1.weight"])
    return g


def softmax_xent(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    prob = np.exp(z)
    prob /= prob.sum(axis=1, keepdims=True)
    n = labels.shape[0]
    loss = float(-np.log(prob[np.arange(n), labels] + 1e-12).mean())
    prob[np.arange(n), labels] -= 1.0
    return loss, (prob / n).astype(np.float32)


def train(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Mini-batch Adam with a cosine-decayed learning rate."""
    p = init_params(rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    b1, b2, eps = 0.9, 0.999, 1e-8
    steps_per_epoch = -(-len(x) // BATCH)
    total, t = EPOCHS * steps_per_epoch, 0
    for epoch in range(EPOCHS):
        order = rng.permutation(len(x))
        losses = []
        for s in range(0, len(x), BATCH):
            idx = order[s : s + BATCH]
            logits, cache = forward(p, x[idx])
            loss, dlogits = softmax_xent(logits, y[idx])
            losses.append(loss)
            grads = backward(p, cache, dlogits)
            t += 1
            lr = LR * 0.5 * (1 + np.cos(np.pi * (t - 1) / total))
            for k in p:
                m[k] = b1 * m[k] + (1 - b1) * grads[k]
                v[k] = b2 * v[k] + (1 - b2) * grads[k] ** 2
                mhat = m[k] / (1 - b1**t)
                vhat = v[k] / (1 - b2**t)
                p[k] = (p[k] - lr * mhat / (np.sqrt(vhat) + eps)).astype(np.float32)
        if epoch % 5 == 4 or epoch == EPOCHS - 1:
            acc = float((forward(p, x)[0].argmax(axis=1) == y).mean())
            print(f"epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}  train acc {acc:.4f}")
    return p


# ---------------------------------------------------------------- export


def export_onnx(p: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The trained network as an opset-17 ONNX graph: image [1,1,8,8] -> probabilities [1,10]."""
    conv_attrs: dict[str, Any] = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1)
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["conv1_out"], name="conv1", **conv_attrs),
        helper.make_node("Relu", ["conv1_out"], ["relu1_out"], name="relu1"),
        helper.make_node(
            "Conv", ["relu1_out", "conv2.weight", "conv2.bias"], ["conv2_out"], name="conv2", **conv_attrs
        ),
        helper.make_node("Relu", ["conv2_out"], ["relu2_out"], name="relu2"),
        helper.make_node(
            "MaxPool", ["relu2_out"], ["pool_out"], name="pool", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0]
        ),
        helper.make_node("Conv", ["pool_out", "conv3.weight", "conv3.bias"], ["conv3_out"], name="conv3", **conv_attrs),
        helper.make_node("Relu", ["conv3_out"], ["relu3_out"], name="relu3"),
        helper.make_node("Flatten", ["relu3_out"], ["flat_out"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat_out", "head.weight", "head.bias"], ["logits"], name="head", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
    ]
    inits = [numpy_helper.from_array(np.ascontiguousarray(v, np.float32), k) for k, v in sorted(p.items())]
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, CLASSES])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="accel.tools")
    model.ir_version = 8
    model.doc_string = "CNN for scikit-learn's 8x8 handwritten digits; input pixels scaled to [0, 1]."
    onnx.checker.check_model(model, full_check=True)
    return model


def write_onnx(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString(deterministic=True))


def write_npz(path: Path, **arrays: np.ndarray) -> None:
    """Same layout as ``np.savez_compressed`` (deflated .npy members) but with fixed
    zip timestamps, so the file is byte-identical across runs; numpy stamps the time."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def ort_accuracy(model: onnx.ModelProto, x: np.ndarray, y: np.ndarray) -> float:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    pred = np.array([sess.run(None, {"image": img[None]})[0].argmax() for img in x])
    return float((pred == y).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output folder (default: the package's models/)")
    args = parser.parse_args()

    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    # The quantizer lives with the test models; take it from this source tree.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from accel.testing.modelgen import quantize_qdq

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=TEST_FRACTION, random_state=SEED, stratify=y)
    print(f"train {len(x_train)} images, held out {len(x_test)}")

    rng = np.random.default_rng(SEED)
    params = train(x_train, y_train, rng)
    fp32 = export_onnx(params)

    calib = x_train[rng.permutation(len(x_train))[:CALIBRATION_IMAGES]]
    qdq = quantize_qdq(fp32, [img[None] for img in calib], nodes_to_exclude=["head", "softmax"], preprocess=False)

    args.out.mkdir(parents=True, exist_ok=True)
    files = {
        "digits_fp32.onnx": lambda p: write_onnx(fp32, p),
        "digits_qdq.onnx": lambda p: write_onnx(qdq, p),
        "digits_test.npz": lambda p: write_npz(p, images=x_test, labels=y_test),
    }
    for name, write in files.items():
        path = args.out / name
        write(path)
        size = path.stat().st_size
        if size >= MAX_FILE_BYTES:
            raise SystemExit(f"{name} is {size} bytes, over the {MAX_FILE_BYTES}-byte budget")
        print(f"{path}  {size} bytes  sha256 {hashlib.sha256(path.read_bytes()).hexdigest()}")

    print(
        f"held-out accuracy (onnxruntime): fp32 {ort_accuracy(fp32, x_test, y_test):.4f}  "
        f"qdq {ort_accuracy(qdq, x_test, y_test):.4f}"
    )


if __name__ == "__main__":
    main()
