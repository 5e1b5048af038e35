#!/usr/bin/env python3
"""Builds the importers' test corpus: small MNIST models saved the way users save them, each with
the source framework's own outputs on the first MNIST test images beside it.

    tests/python/corpus/make_import_corpus.py [OUT_DIR]        (default: build-corpus/, git-ignored)

Writes OUT_DIR/manifest.json (one entry per model file: the file, how to export it, what the
export must do, the traps it holds) and, per model, FILE and FILE.ref.npy (float32 [N, 10]: the
framework's outputs on the first REF_COUNT test images, preprocessed as the manifest says).

Kinds:
- Keras 3 (JAX backend, CPU) `.keras` zips and `.h5` files from `model.save`: Sequential and
  Functional, BatchNormalization after Conv2D, Dense and pooling, Dropout, Activation layers,
  Rescaling of raw pixels inside the model, a flat 784 input reshaped to 28x28x1, a 28x28 input
  without a channel axis, parallel branches joined by Add and by Concatenate (a concat node);
  BatchNormalization that no linear layer can take (as the first layer, after pooling, before a
  'same' Conv2D: a scale_shift node); several models built in one process so the config's names
  (conv2d_7) differ from the weight paths (layers/conv2d); an optimizer group.
- ONNX from torch.onnx.export (PyTorch from Debian): opsets 9, 11, 13, 17, dynamic batch and a
  fixed batch of 1, x.view(x.size(0), -1) shape arithmetic, BatchNorm1d after Linear (a
  BatchNormalization node), sigmoid outputs, logits outputs, torch.cat branches along channels (a
  Concat node) with BatchNorm2d after pooling (a BatchNormalization node: scale_shift).
- Channels-last ONNX as tf2onnx and keras2onnx write it, built with onnx.helper from a trained
  Keras model's weights ([N, 28, 28, 1] and [1, 28, 28] inputs, Transpose around the convolutions,
  Shape/Gather/Unsqueeze/Concat arithmetic for the Reshape, MatMul + Add), and CNTK-style ONNX
  (convolutions without bias followed by a separate Add of a [C, 1, 1] constant, MatMul + Add, a
  fixed batch of 1, opset 9); their references are the framework that trained the weights.
tensorflow-cpu + tf2onnx are not used: TensorFlow would pull protobuf and numpy versions that break
Debian's onnx 1.12 and torch 1.13 in the same environment, and add ~600 MB to every CI setup.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = pathlib.Path(__file__).resolve().parents[3]

import numpy as np  # noqa: E402

from cnnengine import datasets  # noqa: E402

REF_COUNT = 2000        # test images whose framework outputs are stored
TRAIN_COUNT = 4096      # training images for the few training steps
SCALE = np.float32(1 / 255)
VERSION = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:16]


def mnist():
    tr_x, tr_y = (datasets.read_idx(p) for p in datasets.mnist_files("train"))
    te_x, _ = (datasets.read_idx(p) for p in datasets.mnist_files("test"))
    return tr_x[:TRAIN_COUNT], tr_y[:TRAIN_COUNT].astype(np.int64), te_x[:REF_COUNT]


# --------------------------------------------------------------------------------------------------
# Keras 3

def keras_models(keras):
    """(name, model, input kind) with input kind 'raw' (pixels 0..255, the model rescales) or
    'scaled' (pixels * 1/255 by the user's code); and the model's input shape decides the layout."""
    from keras import layers as L
    out = []

    # Sequential, BN after Conv2D (linear, folded backward), after an activation (carried to the
    # next valid Conv2D through MaxPooling2D), after Dense; Dropout; Rescaling of raw pixels.
    m = keras.Sequential([
        keras.Input((28, 28, 1)), L.Rescaling(1 / 255),
        L.Conv2D(8, 3), L.BatchNormalization(), L.Activation("relu"), L.MaxPooling2D(2),
        L.Conv2D(16, 3, activation="relu"), L.BatchNormalization(), L.MaxPooling2D(2), L.Dropout(0.25),
        L.Conv2D(16, 3, activation="relu"), L.Flatten(), L.Dropout(0.25),
        L.Dense(64), L.BatchNormalization(), L.Activation("relu"), L.Dropout(0.25),
        L.Dense(10, activation="softmax")])
    out.append(("k3_seq_bn_rescaling", m, "raw"))

    # A flat 784 input reshaped to 28x28x1, BN after pooling (carried to the Dense after Flatten),
    # logits output (no softmax).
    m = keras.Sequential([
        keras.Input((784,)), L.Reshape((28, 28, 1)),
        L.Conv2D(8, 5, padding="same", activation="relu"), L.MaxPooling2D(2), L.BatchNormalization(),
        L.Conv2D(12, 3, strides=2), L.Activation("tanh"), L.Flatten(),
        L.Dense(32, activation="relu"), L.Dropout(0.5), L.Dense(10)])
    out.append(("k3_seq_flat784_logits", m, "scaled"))

    # Functional: a 28x28 matrix without channel axis, Rescaling to [-1, 1], a Conv2D without bias
    # and its BN (folded, creating the bias), two branches joined by Add, average pooling, sigmoid.
    i = keras.Input((28, 28))
    x = L.Reshape((28, 28, 1))(i)
    x = L.Rescaling(1 / 127.5, offset=-1.0)(x)
    x = L.Conv2D(8, 3, padding="same", use_bias=False)(x)
    x = L.BatchNormalization()(x)
    x = L.Activation("relu")(x)
    a = L.Conv2D(8, 3, padding="same", activation="relu")(x)
    b = L.Conv2D(8, 1, activation="relu")(x)
    x = L.Add()([a, b])
    x = L.AveragePooling2D(2)(x)
    x = L.Conv2D(16, 3, activation="relu")(x)
    x = L.MaxPooling2D(2)(x)
    x = L.Flatten()(x)
    x = L.Dropout(0.2)(x)
    y = L.Dense(10, activation="sigmoid")(x)
    out.append(("k3_func_28x28_add_sigmoid", keras.Model(i, y), "raw"))

    # An MLP on the flat input with BN after each Dense.
    m = keras.Sequential([
        keras.Input((784,)), L.Dense(64), L.BatchNormalization(), L.Activation("relu"), L.Dropout(0.2),
        L.Dense(32, activation="relu"), L.BatchNormalization(), L.Dense(10, activation="softmax")])
    out.append(("k3_mlp_bn", m, "scaled"))

    # Global average pooling (an avgpool over the whole map), BN carried through it to the Dense.
    i = keras.Input((28, 28, 1))
    x = L.Conv2D(16, 3, strides=2, activation="relu")(i)
    x = L.BatchNormalization()(x)
    x = L.Conv2D(24, 3, activation="relu")(x)
    x = L.BatchNormalization()(x)
    x = L.GlobalAveragePooling2D()(x)
    y = L.Dense(10, activation="softmax")(x)
    out.append(("k3_func_gap", keras.Model(i, y), "scaled"))

    # BN after an activation, before a 'same'-padded Conv2D: no linear layer can take its scale and
    # shift exactly (the padding would see shifted zeros): a scale_shift node.
    m = keras.Sequential([
        keras.Input((28, 28, 1)), L.Conv2D(8, 3, activation="relu"), L.BatchNormalization(),
        L.Conv2D(8, 3, padding="same", activation="relu"), L.MaxPooling2D(2), L.Flatten(),
        L.Dense(10, activation="softmax")])
    out.append(("k3_bn_before_same_conv", m, "scaled"))

    # Parallel branches joined by Concatenate (channels): a concat node.
    i = keras.Input((28, 28, 1))
    a = L.Conv2D(4, 3, padding="same", activation="relu")(i)
    b = L.Conv2D(4, 5, padding="same", activation="relu")(i)
    x = L.Concatenate()([a, b])
    x = L.MaxPooling2D(4)(x)
    x = L.Flatten()(x)
    y = L.Dense(10, activation="softmax")(x)
    out.append(("k3_func_concat", keras.Model(i, y), "scaled"))

    # BN as the first layer (before a 'same' Conv2D: scale_shift on the input; the 1x1 branch takes
    # it into its kernel), two conv branches concatenated, BN after pooling before a 'same' Conv2D
    # (scale_shift), Concatenate with an explicit axis=-1 (Keras' channels-last channel axis).
    i = keras.Input((28, 28, 1))
    x = L.BatchNormalization()(i)
    a = L.Conv2D(6, 3, padding="same", activation="relu")(x)
    b = L.Conv2D(4, 1, activation="relu")(x)
    x = L.Concatenate(axis=-1)([a, b])
    x = L.MaxPooling2D(2)(x)
    x = L.BatchNormalization()(x)
    x = L.Conv2D(8, 3, padding="same", activation="relu")(x)
    x = L.MaxPooling2D(2)(x)
    x = L.Flatten()(x)
    y = L.Dense(10, activation="softmax")(x)
    out.append(("k3_func_bn_first_concat_bn_pool", keras.Model(i, y), "scaled"))
    return out


# Ops the export of these files must contain: the kinds that exercise scale_shift and concat.
EXPECT_OPS = {
    "k3_bn_before_same_conv": ["scale_shift"],
    "k3_func_concat": ["concat"],
    "k3_func_bn_first_concat_bn_pool": ["scale_shift", "concat"],
    "torch_concat_bn_opset13_dynamic.onnx": ["scale_shift", "concat"],
    "torch_concat_bn_opset11_batch1.onnx": ["scale_shift", "concat"],
}


def keras_input(model, kind, images):
    x = images.astype(np.float32)
    if kind == "scaled":
        x = x * SCALE
    shape = tuple(model.inputs[0].shape[1:])
    return x.reshape((len(x),) + shape)


def make_keras(out_dir: pathlib.Path, tr_x, tr_y, te_x, manifest: list, trained: dict):
    import keras
    keras.utils.set_random_seed(0)
    # A first model whose layers take the unsuffixed names, as in a notebook that built others
    # before: the models saved below have config names like conv2d_3 but weight paths layers/conv2d.
    L = keras.layers
    keras.Sequential([keras.Input((8, 8, 1)), L.Rescaling(1.0), L.Conv2D(2, 3), L.BatchNormalization(),
                      L.Activation("relu"), L.MaxPooling2D(2), L.Flatten(), L.Dropout(0.1), L.Dense(2)])
    for name, model, kind in keras_models(keras):
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy" if name != "k3_seq_flat784_logits"
                      else keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(keras_input(model, kind, tr_x), tr_y, batch_size=128, epochs=1, verbose=0)
        ref = np.asarray(model.predict(keras_input(model, kind, te_x), batch_size=500, verbose=0), np.float32)
        trained[name] = model
        for ext in ("keras", "h5"):
            f = out_dir / f"{name}.{ext}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.save(f)
            np.save(out_dir / f"{f.name}.ref.npy", ref)
            entry = {"file": f.name, "kind": "keras", "args": [], "framework": f"Keras {keras.__version__} (jax)",
                     "input": kind}
            if name in EXPECT_OPS:
                entry["expect_ops"] = EXPECT_OPS[name]
            manifest.append(entry)


# --------------------------------------------------------------------------------------------------
# ONNX written by hand the way tf2onnx / keras2onnx / CNTK write it

def _keras_arrays(model):
    """{layer class index: [arrays]} of a Keras model, in layer order (Conv2D and Dense only)."""
    return [(type(lay).__name__, [np.asarray(w) for w in lay.get_weights()]) for lay in model.layers
            if type(lay).__name__ in ("Conv2D", "Dense")]


def tf2onnx_like(model, batch_one: bool, no_channel: bool):
    """An ONNX graph computing the small Keras CNN `model` (Conv2D relu, MaxPooling2D, Flatten,
    Dense softmax) as tf2onnx does: channels-last input, Transpose to NCHW before the Conv, back to
    NHWC before the Reshape (whose target comes from Shape/Gather/Unsqueeze/Concat), MatMul + Add.
    `no_channel`: a [N, 28, 28] input that keras2onnx first reshapes to [N, 28, 28, 1]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    (_, (k1, b1)), (_, (k2, b2)) = _keras_arrays(model)
    inits = [numpy_helper.from_array(k1.transpose(3, 2, 0, 1).copy(), "conv_W"),
             numpy_helper.from_array(b1, "conv_B"), numpy_helper.from_array(k2, "dense_W"),
             numpy_helper.from_array(b2, "dense_B"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
             numpy_helper.from_array(np.array([1, 28, 28, 1] if batch_one else [-1, 28, 28, 1], np.int64), "hw1")]
    batch = 1 if batch_one else "N"
    nodes = []
    src = "input"
    if no_channel:
        nodes.append(helper.make_node("Reshape", ["input", "hw1"], ["input_hw1"], name="reshape_in"))
        src = "input_hw1"
    nodes += [
        helper.make_node("Transpose", [src], ["x_nchw"], perm=[0, 3, 1, 2], name="conv2d__6"),
        helper.make_node("Conv", ["x_nchw", "conv_W", "conv_B"], ["c"], kernel_shape=[3, 3], strides=[1, 1],
                         pads=[0, 0, 0, 0], name="sequential/conv2d/Conv2D"),
        helper.make_node("Relu", ["c"], ["r"], name="sequential/conv2d/Relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                         name="sequential/max_pooling2d/MaxPool"),
        helper.make_node("Transpose", ["p"], ["p_nhwc"], perm=[0, 2, 3, 1], name="sequential/max_pooling2d__12"),
        helper.make_node("Shape", ["p_nhwc"], ["shp"], name="sequential/flatten/Shape"),
        helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0, name="sequential/flatten/strided_slice"),
        helper.make_node("Concat", ["n", "minus_one"], ["target"], axis=0, name="sequential/flatten/Reshape/shape"),
        helper.make_node("Reshape", ["p_nhwc", "target"], ["f"], name="sequential/flatten/Reshape"),
        helper.make_node("MatMul", ["f", "dense_W"], ["mm"], name="sequential/dense/MatMul"),
        helper.make_node("Add", ["mm", "dense_B"], ["logits"], name="sequential/dense/BiasAdd"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1, name="sequential/dense/Softmax"),
    ]
    in_shape = [batch, 28, 28] if no_channel else [batch, 28, 28, 1]
    g = helper.make_graph(nodes, "tf2onnx", [helper.make_tensor_value_info("input", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                          producer_name="keras2onnx" if no_channel else "tf2onnx", producer_version="1.9.3")
    onnx.checker.check_model(m)
    return m


def cntk_like(module):
    """The torch CNN `module` (conv, relu, pool, conv, relu, pool, linear) as CNTK writes it: a fixed
    batch of 1, convolutions without bias followed by Add of a [C, 1, 1] constant, MatMul + Add on
    the flattened map, opset 9."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    sd = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    inits = [numpy_helper.from_array(sd["0.weight"], "W0"),
             numpy_helper.from_array(sd["0.bias"].reshape(-1, 1, 1), "B0"),
             numpy_helper.from_array(sd["3.weight"], "W1"),
             numpy_helper.from_array(sd["3.bias"].reshape(-1, 1, 1), "B1"),
             numpy_helper.from_array(sd["7.weight"].T.copy(), "W2"),
             numpy_helper.from_array(sd["7.bias"].reshape(1, -1), "B2"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "flat")]
    nodes = [
        helper.make_node("Conv", ["Input3", "W0"], ["c0"], kernel_shape=[5, 5], pads=[2, 2, 2, 2], name="Convolution28"),
        helper.make_node("Add", ["c0", "B0"], ["a0"], name="Plus30"),
        helper.make_node("Relu", ["a0"], ["r0"], name="ReLU32"),
        helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2], name="Pooling66"),
        helper.make_node("Conv", ["p0", "W1"], ["c1"], kernel_shape=[3, 3], name="Convolution110"),
        helper.make_node("Add", ["c1", "B1"], ["a1"], name="Plus112"),
        helper.make_node("Relu", ["a1"], ["r1"], name="ReLU114"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="Pooling160"),
        helper.make_node("Reshape", ["p1", "flat"], ["f"], name="Times212_reshape0"),
        helper.make_node("MatMul", ["f", "W2"], ["mm"], name="Times212"),
        helper.make_node("Add", ["mm", "B2"], ["Plus214_Output_0"], name="Plus214"),
    ]
    g = helper.make_graph(nodes, "CNTKGraph",
                          [helper.make_tensor_value_info("Input3", TensorProto.FLOAT, [1, 1, 28, 28])],
                          [helper.make_tensor_value_info("Plus214_Output_0", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)], producer_name="CNTK",
                          producer_version="2.7")
    onnx.checker.check_model(m)
    return m


# --------------------------------------------------------------------------------------------------
# PyTorch -> torch.onnx

def torch_models():
    import torch
    from torch import nn

    class ViewNet(nn.Module):
        """Conv-BN-ReLU (torch folds this BN into the Conv), x.view(x.size(0), -1), Linear,
        BatchNorm1d (exported as a BatchNormalization node), ReLU, Dropout, Linear: logits."""

        def __init__(self, sigmoid=False):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.c2 = nn.Conv2d(8, 16, 3)
            self.fc1, self.bn3 = nn.Linear(16 * 6 * 6, 64), nn.BatchNorm1d(64)
            self.drop = nn.Dropout(0.3)
            self.fc2 = nn.Linear(64, 10)
            self.sigmoid = sigmoid

        def forward(self, x):
            x = torch.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
            x = torch.max_pool2d(torch.relu(self.c2(x)), 2)
            x = x.view(x.size(0), -1)
            x = self.fc2(self.drop(torch.relu(self.bn3(self.fc1(x)))))
            return torch.sigmoid(x) if self.sigmoid else x

    class GapNet(nn.Module):
        """AdaptiveAvgPool2d(1) (exported as GlobalAveragePool) before the classifier."""

        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(1, 8, 3, stride=2), nn.Conv2d(8, 16, 3)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = torch.relu(self.c2(torch.relu(self.c1(x))))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    class CatNet(nn.Module):
        """Two branches joined by torch.cat along channels (a Concat node), max pooling, then
        BatchNorm2d (a BatchNormalization node no Conv precedes: scale_shift), a padded conv."""

        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(1, 3, 5, padding=2)
            self.bn = nn.BatchNorm2d(7)
            self.c = nn.Conv2d(7, 8, 3, padding=1)
            self.fc = nn.Linear(8 * 7 * 7, 10)

        def forward(self, x):
            x = torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], 1)
            x = self.bn(torch.max_pool2d(x, 2))
            x = torch.max_pool2d(torch.relu(self.c(x)), 2)
            return self.fc(torch.flatten(x, 1))

    cntk = nn.Sequential(nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 6 * 6, 10))
    return ViewNet(), ViewNet(sigmoid=True), cntk, GapNet(), CatNet()


def train_torch(module, tr_x, tr_y, steps=32):
    import torch
    torch.manual_seed(0)
    opt = torch.optim.Adam(module.parameters(), 1e-3)
    x = torch.from_numpy(tr_x.astype(np.float32) * SCALE).unsqueeze(1)
    y = torch.from_numpy(tr_y)
    module.train()
    for i in range(steps):
        sl = slice((i * 128) % len(x), (i * 128) % len(x) + 128)
        loss = torch.nn.functional.cross_entropy(module(x[sl]), y[sl])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return module.eval()


def make_onnx(out_dir: pathlib.Path, tr_x, tr_y, te_x, manifest: list, trained: dict):
    import onnx
    import torch
    torch.set_num_threads(2)
    torch.manual_seed(0)
    logits, sig, cntk, gap, cat = (train_torch(m, tr_x, tr_y) for m in torch_models())
    x_te = torch.from_numpy(te_x.astype(np.float32) * SCALE).unsqueeze(1)
    for module, tag in ((logits, "logits"), (sig, "sigmoid")):
        with torch.no_grad():
            ref = module(x_te).numpy().astype(np.float32)
        for opset in (9, 11, 13, 17):
            for dynamic in (True, False):
                if tag == "sigmoid" and opset not in (11, 17):
                    continue
                name = f"torch_{tag}_opset{opset}_{'dynamic' if dynamic else 'batch1'}.onnx"
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.onnx.export(module, torch.zeros(1, 1, 28, 28), str(out_dir / name), opset_version=opset,
                                      input_names=["x"], output_names=["y"],
                                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}} if dynamic else None)
                np.save(out_dir / f"{name}.ref.npy", ref)
                manifest.append({"file": name, "kind": "onnx", "args": [], "input": "scaled",
                                 "framework": f"PyTorch {torch.__version__}"})
    for module, name, opset, dynamic in ((gap, "torch_gap_opset13_dynamic.onnx", 13, True),
                                         (cat, "torch_concat_bn_opset13_dynamic.onnx", 13, True),
                                         (cat, "torch_concat_bn_opset11_batch1.onnx", 11, False)):
        with torch.no_grad():
            ref = module(x_te).numpy().astype(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, torch.zeros(1, 1, 28, 28), str(out_dir / name), opset_version=opset,
                              input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "N"}, "y": {0: "N"}} if dynamic else None)
        np.save(out_dir / f"{name}.ref.npy", ref)
        manifest.append({"file": name, "kind": "onnx", "args": [], "input": "scaled",
                         "framework": f"PyTorch {torch.__version__}"} |
                        ({"expect_ops": EXPECT_OPS[name]} if name in EXPECT_OPS else {}))
    with torch.no_grad():
        ref = cntk(x_te).numpy().astype(np.float32)
    onnx.save(cntk_like(cntk), out_dir / "cntk_style_batch1.onnx")
    np.save(out_dir / "cntk_style_batch1.onnx.ref.npy", ref)
    manifest.append({"file": "cntk_style_batch1.onnx", "kind": "onnx", "args": [], "input": "scaled",
                     "framework": f"PyTorch {torch.__version__} (weights written as CNTK does)"})

    import keras
    from keras import layers as L
    keras.utils.set_random_seed(1)
    for no_channel, batch_one, name in ((False, False, "tf2onnx_style_nhwc.onnx"),
                                        (True, True, "keras2onnx_style_28x28_batch1.onnx")):
        shape = (28, 28) if no_channel else (28, 28, 1)
        layers = [keras.Input(shape)] + ([L.Reshape((28, 28, 1))] if no_channel else []) + [
            L.Conv2D(6, 3, activation="relu"), L.MaxPooling2D(2), L.Flatten(), L.Dense(10, activation="softmax")]
        model = keras.Sequential(layers)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        x = tr_x.astype(np.float32) * SCALE
        model.fit(x.reshape((-1,) + shape), tr_y, batch_size=128, epochs=1, verbose=0)
        ref = np.asarray(model.predict((te_x.astype(np.float32) * SCALE).reshape((-1,) + shape), batch_size=500,
                                       verbose=0), np.float32)
        onnx.save(tf2onnx_like(model, batch_one, no_channel), out_dir / name)
        np.save(out_dir / f"{name}.ref.npy", ref)
        manifest.append({"file": name, "kind": "onnx", "args": [], "input": "scaled",
                         "framework": f"Keras {keras.__version__} (jax), graph written as "
                                      f"{'keras2onnx' if no_channel else 'tf2onnx'} does"})


def entry_files() -> list[str]:
    """The model files main() writes, in manifest order (tests parametrize over these)."""
    names = [f"{n}.{ext}" for n in ("k3_seq_bn_rescaling", "k3_seq_flat784_logits", "k3_func_28x28_add_sigmoid",
                                     "k3_mlp_bn", "k3_func_gap", "k3_bn_before_same_conv", "k3_func_concat",
                                     "k3_func_bn_first_concat_bn_pool")
             for ext in ("keras", "h5")]
    for tag in ("logits", "sigmoid"):
        for opset in (9, 11, 13, 17):
            for dynamic in (True, False):
                if tag == "sigmoid" and opset not in (11, 17):
                    continue
                names.append(f"torch_{tag}_opset{opset}_{'dynamic' if dynamic else 'batch1'}.onnx")
    return names + ["torch_gap_opset13_dynamic.onnx", "torch_concat_bn_opset13_dynamic.onnx",
                    "torch_concat_bn_opset11_batch1.onnx", "cntk_style_batch1.onnx", "tf2onnx_style_nhwc.onnx",
                    "keras2onnx_style_28x28_batch1.onnx"]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir = pathlib.Path(argv[0]) if argv else REPO / "build-corpus"
    out_dir.mkdir(parents=True, exist_ok=True)
    tr_x, tr_y, te_x = mnist()
    manifest: list = []
    trained: dict = {}
    make_keras(out_dir, tr_x, tr_y, te_x, manifest, trained)
    make_onnx(out_dir, tr_x, tr_y, te_x, manifest, trained)
    assert [e["file"] for e in manifest] == entry_files(), "entry_files() is out of step with the generator"
    (out_dir / "manifest.json").write_text(json.dumps({"version": VERSION, "ref_count": REF_COUNT,
                                                       "entries": manifest}, indent=1))
    print(f"wrote {len(manifest)} model files and their references to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
