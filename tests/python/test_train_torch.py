"""`engine train` against PyTorch autograd and torch.optim, from the same initial weights and the
same batch order (--no-shuffle): every op of format v1 in a small float-input model on the
reference backend (float64 on both sides: losses within 1e-9, weights within float32 rounding),
and whole runs of LeNet-5 on MNIST, whose first-epoch loss curve must agree within 1e-4
(relative) on `reference` (vs torch float64) and `cpu` (vs torch float32)."""
from __future__ import annotations

import numpy as np
import pytest

from cnnengine import model_format as mf

from _train_support import (ENGINE, engine_curve, init_tensors, mnist_subset, run_engine, shared_mnist_available,
                            torch_train, write_idx_floats, write_idx_images, write_idx_labels)

pytestmark = pytest.mark.skipif(ENGINE is None, reason="the engine is not built (build/engine, or $ENGINE_BIN)")
torch = pytest.importorskip("torch")


def node(name, op, inputs, attrs=None, tensors=None):
    n = {"name": name, "op": op, "inputs": inputs}
    if attrs:
        n["attrs"] = attrs
    if tensors:
        n["tensors"] = tensors
    return n


def conv(name, x, out, kernel, stride=(1, 1), padding=(0, 0, 0, 0), bias=True):
    t = {"weight": f"{name}.weight"}
    if bias:
        t["bias"] = f"{name}.bias"
    return node(name, "conv2d", [x], {"out_channels": out, "kernel": list(kernel), "stride": list(stride),
                                      "padding": list(padding)}, t)


def dense(name, x, units):
    return node(name, "dense", [x], {"units": units}, {"weight": f"{name}.weight", "bias": f"{name}.bias"})


# Each graph puts the op under test between parameterised layers and the loss, so its backward
# decides both its own parameters' updates and those of every layer before it.
OP_GRAPHS = {
    "conv2d_stride_padding_tanh": ([2, 7, 6], [
        conv("c", "x", 3, (3, 2), (2, 1), (1, 2, 0, 1)), node("t", "tanh", ["c"]), node("f", "flatten", ["t"]),
        dense("d", "f", 4), node("p", "softmax", ["d"])]),
    "avgpool_excluding_pad_sigmoid": ([1, 7, 7], [
        conv("c", "x", 2, (2, 2), bias=False),
        node("a", "avgpool", ["c"], {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1, 1, 1],
                                     "count_include_pad": False}),
        node("s", "sigmoid", ["a"]), node("f", "flatten", ["s"]), dense("d", "f", 4), node("p", "softmax", ["d"])]),
    "avgpool_including_pad": ([1, 6, 6], [
        conv("c", "x", 2, (3, 3), padding=(1, 1, 1, 1)),
        node("a", "avgpool", ["c"], {"kernel": [2, 3], "stride": [2, 2], "padding": [0, 1, 1, 1],
                                     "count_include_pad": True}),
        node("f", "flatten", ["a"]), dense("d", "f", 4), node("p", "softmax", ["d"])]),
    "maxpool_overlapping_relu": ([2, 6, 5], [
        conv("c", "x", 3, (2, 2)),
        node("m", "maxpool", ["c"], {"kernel": [3, 2], "stride": [2, 1], "padding": [0, 0, 0, 0]}),
        node("r", "relu", ["m"]), node("f", "flatten", ["r"]), dense("d", "f", 4), node("p", "softmax", ["d"])]),
    "dense_relu_inner_softmax": ([9], [
        dense("a", "x", 7), node("r", "relu", ["a"]), dense("b", "r", 5), node("s", "softmax", ["b"]),
        dense("c", "s", 4), node("p", "softmax", ["c"])]),
    "scale_shift_add_concat": ([2, 5, 5], [
        node("ss", "scale_shift", ["x"], tensors={"scale": "ss.scale", "shift": "ss.shift"}),
        conv("a", "ss", 3, (3, 3), padding=(1, 1, 1, 1)), conv("b", "x", 3, (2, 2), padding=(1, 0, 1, 0)),
        node("s", "add", ["a", "b"]), node("t", "tanh", ["s"]), node("cat", "concat", ["t", "a", "t"]),
        node("f", "flatten", ["cat"]), dense("d", "f", 4), node("p", "softmax", ["d"])]),
}


def float_graph(name, shape, nodes):
    return {"format": "cnn-engine-model", "version": 1, "name": name,
            "input": {"name": "x", "dtype": "float32", "shape": shape}, "nodes": nodes, "outputs": [nodes[-1]["name"]]}


@pytest.mark.parametrize("name", sorted(OP_GRAPHS))
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_every_op_matches_torch_autograd_in_float64(tmp_path, name, optimizer):
    shape, nodes = OP_GRAPHS[name]
    graph = float_graph(name, shape, nodes)
    model_path = tmp_path / "start.json"
    mf.write_model(model_path, graph, init_tensors(graph, seed=1))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((24, *shape)).astype(np.float32)
    y = rng.integers(0, 4, 24).astype(np.uint8)
    data, labels = write_idx_floats(tmp_path / "x.idx", x), write_idx_labels(tmp_path / "y.idx", y)
    lr = 0.3 if optimizer == "sgd" else 0.01
    extra = ["--momentum", "0.9", "--weight-decay", "0.01"] if optimizer == "sgd" else ["--weight-decay", "0.01"]
    out = tmp_path / "out.json"
    run_engine("train", model_path, "--data", data, "--labels", labels, "--backend", "reference", "--batch", 8,
               "--optimizer", optimizer, "--lr", lr, "--lr-decay", 0.1, "--no-shuffle", "--no-plot",
               "--no-checkpoints", "-o", out, *extra)
    want_losses, want = torch_train(model_path, x, y, dtype=torch.float64, batch=8, optimizer=optimizer, lr=lr,
                                    lr_decay=0.1, momentum=0.9 if optimizer == "sgd" else 0.0, weight_decay=0.01)
    got = engine_curve(out)["steps"]["loss"]
    np.testing.assert_allclose(got, want_losses, rtol=1e-9)
    trained = mf.read_model(out).tensors
    for k, w in want.items():
        # The engine rounds its float64 parameters to float32 once, when writing them.
        np.testing.assert_allclose(trained[k], w.astype(np.float32), rtol=0, atol=1e-6 * max(1, np.abs(w).max()),
                                   err_msg=k)
        assert not np.array_equal(trained[k], mf.read_model(model_path).tensors[k]), f"{k} never changed"


LENET = {"format": "cnn-engine-model", "version": 1, "name": "lenet5_small",
         "input": {"name": "image", "dtype": "uint8", "shape": [1, 28, 28],
                   "preprocess": {"scale": 0.003921568859368563, "mean": [0.0], "std": [1.0], "pad": [2, 2, 2, 2]}},
         "nodes": [conv("c1", "image", 6, (5, 5)), node("c1_tanh", "tanh", ["c1"]),
                   node("s2", "avgpool", ["c1_tanh"], {"kernel": [2, 2], "stride": [2, 2], "count_include_pad": True}),
                   conv("c3", "s2", 16, (5, 5)), node("c3_tanh", "tanh", ["c3"]),
                   node("s4", "maxpool", ["c3_tanh"], {"kernel": [2, 2], "stride": [2, 2]}),
                   node("flatten", "flatten", ["s4"]), dense("f5", "flatten", 120), node("f5_relu", "relu", ["f5"]),
                   dense("f6", "f5_relu", 84), node("f6_tanh", "tanh", ["f6"]), dense("f7", "f6_tanh", 10),
                   node("prob", "softmax", ["f7"])],
         "outputs": ["prob"]}


@pytest.mark.skipif(not shared_mnist_available(), reason="../shared/data/mnist/train-*.gz not found")
@pytest.mark.parametrize("backend,dtype,rtol", [("reference", "float64", 1e-9), ("cpu", "float32", 1e-4),
                                                ("custom", "float32", 1e-4), ("cudnn", "float32", 1e-4)])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_lenet_epoch_loss_curve_matches_torch(tmp_path, backend, dtype, rtol, optimizer):
    if backend in ("custom", "cudnn"):  # the GPU trainers: only where `engine backends` says they can run
        line = [l for l in run_engine("backends").stdout.splitlines() if l.startswith(backend + " ")]
        if not line or "not available" in line[0]:
            pytest.skip(f"the {backend} backend (GPU) is not available here")
    images, labels = mnist_subset(640)
    data = write_idx_images(tmp_path / "train-images-idx3-ubyte", images)
    write_idx_labels(tmp_path / "train-labels-idx1-ubyte", labels)
    model_path = tmp_path / "start.json"
    mf.write_model(model_path, LENET, init_tensors(LENET, seed=3))
    lr = 0.1 if optimizer == "sgd" else 0.003
    extra = ["--momentum", "0.9", "--lr-decay", "0.01"] if optimizer == "sgd" else []
    out = tmp_path / "out.json"
    run_engine("train", model_path, "--data", data, "--backend", backend, "--batch", 32, "--optimizer", optimizer,
               "--lr", lr, "--no-shuffle", "--no-plot", "--no-checkpoints", "-o", out, *extra)
    want_losses, want = torch_train(model_path, images[:, None], labels, dtype=getattr(torch, dtype), batch=32,
                                    optimizer=optimizer, lr=lr, momentum=0.9 if optimizer == "sgd" else 0.0,
                                    lr_decay=0.01 if optimizer == "sgd" else 0.0)
    got = engine_curve(out)["steps"]["loss"]
    assert len(got) == 20
    np.testing.assert_allclose(got, want_losses, rtol=rtol)
    assert np.mean(got[-5:]) < 0.9 * np.mean(got[:5]), "the run did not learn: the comparison would prove little"
    trained = mf.read_model(out).tensors
    for k, w in want.items():
        np.testing.assert_allclose(trained[k], w, rtol=0, atol=1e-4 * max(1, np.abs(w).max()), err_msg=k)
