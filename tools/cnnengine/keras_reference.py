"""A NumPy implementation of the Keras layers the importer handles, computed the way Keras does:
channels-last (NHWC) activations, HWIO conv kernels, Dense kernels [in, out], Flatten in NHWC
order, TensorFlow's 'same' padding. It stands in for Keras (not installed) as the "source
framework" of the Keras importer's check.

It is written independently of keras_import.py on purpose: it reads the HDF5 file and the model
config itself and never converts a layout, so a wrong kernel transpose or a missing NHWC->CHW
permutation of the first Dense layer in the importer shows up as a check failure.
"""
from __future__ import annotations

import json

import numpy as np

F32 = np.float32


# --------------------------------------------------------------------------------------------------
# Reading a Keras HDF5 file (as keras.saving.hdf5_format.load_weights_from_hdf5_group does)

def _text(v) -> str:
    if isinstance(v, (bytes, np.bytes_)):
        return v.decode("utf8")
    return str(v)


def _attr_list(group, name) -> list[str]:
    if name in group.attrs:
        return [_text(v) for v in np.atleast_1d(group.attrs[name])]
    out, k = [], 0
    while f"{name}{k}" in group.attrs:  # Keras splits attributes over 64 KB into name0, name1, ...
        out += [_text(v) for v in np.atleast_1d(group.attrs[f"{name}{k}"])]
        k += 1
    return out


def read_weights(path) -> list[list[np.ndarray]]:
    """Per layer that has weights, in the file's layer order: its arrays in weight_names order."""
    import h5py
    with h5py.File(path, "r") as f:
        g = f["model_weights"] if "model_weights" in f else f
        out = []
        for lname in _attr_list(g, "layer_names"):
            names = _attr_list(g[lname], "weight_names")
            if names:
                out.append([np.asarray(g[lname][w]) for w in names])
        return out


def read_config(path, arch_json: str | None = None) -> dict:
    if arch_json is not None:
        with open(arch_json, encoding="utf8") as fh:
            return json.load(fh)
    import h5py
    with h5py.File(path, "r") as f:
        return json.loads(_text(f.attrs["model_config"]))


def layer_list(model_config: dict) -> list[dict]:
    """The layers in execution order (Sequential, or a Functional model that is a chain)."""
    cfg = model_config["config"]
    if model_config["class_name"] == "Sequential":
        return list(cfg["layers"] if isinstance(cfg, dict) else cfg)
    by_name = {lay["config"]["name"]: lay for lay in cfg["layers"]}
    out_name = cfg["output_layers"][0][0]
    chain = []
    name = out_name
    while True:
        lay = by_name[name]
        chain.append(lay)
        inbound = lay.get("inbound_nodes") or []
        if not inbound:
            break
        name = inbound[0][0][0]
    return chain[::-1]


# --------------------------------------------------------------------------------------------------
# Layers, NHWC

def _same_pads(size, k, s):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def _pads(x, kernel, strides, padding):
    if padding == "valid":
        return (0, 0), (0, 0)
    return _same_pads(x.shape[1], kernel[0], strides[0]), _same_pads(x.shape[2], kernel[1], strides[1])


def conv2d(x, kernel, bias, strides, padding):
    kh, kw, _, o = kernel.shape
    (t, b), (l, r) = _pads(x, (kh, kw), strides, padding)
    xp = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))
    sh, sw = strides
    oh = (xp.shape[1] - kh) // sh + 1
    ow = (xp.shape[2] - kw) // sw + 1
    y = np.zeros((x.shape[0], oh, ow, o), F32)
    for p in range(kh):
        for q in range(kw):
            win = xp[:, p:p + sh * (oh - 1) + 1:sh, q:q + sw * (ow - 1) + 1:sw, :]
            y += np.tensordot(win, kernel[p, q], axes=([3], [0])).astype(F32)
    if bias is not None:
        y += bias
    return y


def pool2d(x, size, strides, padding, kind):
    kh, kw = size
    (t, b), (l, r) = _pads(x, size, strides, padding)
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=fill)
    valid = np.pad(np.ones(x.shape[1:3], F32), ((t, b), (l, r)))
    sh, sw = strides
    oh = (xp.shape[1] - kh) // sh + 1
    ow = (xp.shape[2] - kw) // sw + 1
    acc = np.full((x.shape[0], oh, ow, x.shape[3]), fill, F32)
    count = np.zeros((oh, ow), F32)
    for p in range(kh):
        for q in range(kw):
            win = xp[:, p:p + sh * (oh - 1) + 1:sh, q:q + sw * (ow - 1) + 1:sw, :]
            if kind == "max":
                acc = np.maximum(acc, win)
            else:
                acc = acc + win
                count += valid[p:p + sh * (oh - 1) + 1:sh, q:q + sw * (ow - 1) + 1:sw]
    if kind == "avg":
        acc = acc / count[None, :, :, None]  # TensorFlow's avg_pool counts only positions inside
    return acc.astype(F32)


def activation(x, name):
    if isinstance(name, dict):
        name = name.get("config") if name.get("class_name") == "function" else name.get("class_name", "")
        name = str(name).lower()
    if name in (None, "linear"):
        return x
    if name == "relu":
        return np.maximum(x, F32(0))
    if name == "tanh":
        return np.tanh(x)
    if name == "sigmoid":
        return (F32(1) / (F32(1) + np.exp(-x))).astype(F32)
    if name == "softmax":
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(F32)
    raise NotImplementedError(f"activation {name!r}")


def predict(model_config: dict, weights: list[list[np.ndarray]], x: np.ndarray) -> np.ndarray:
    """Runs the model on `x` (NHWC float32, or [N, K] / [N, H, W] as the model's input is shaped)."""
    x = np.asarray(x, F32)
    pending = list(weights)
    for lay in layer_list(model_config):
        cls, c = lay["class_name"], lay["config"]
        if cls in ("InputLayer", "Dropout"):
            continue
        if x.ndim == 3 and cls in ("Conv2D", "MaxPooling2D", "AveragePooling2D", "ZeroPadding2D"):
            x = x[..., None]  # a [H, W] input is one channel
        if cls == "Conv2D":
            w = pending.pop(0)
            x = conv2d(x, w[0].astype(F32), w[1].astype(F32) if len(w) > 1 else None,
                       tuple(c.get("strides", (1, 1))), c.get("padding", "valid"))
            x = activation(x, c.get("activation", "linear"))
        elif cls == "Dense":
            w = pending.pop(0)
            x = (x @ w[0].astype(F32)).astype(F32)
            if len(w) > 1:
                x = x + w[1].astype(F32)
            x = activation(x, c.get("activation", "linear"))
        elif cls in ("MaxPooling2D", "AveragePooling2D"):
            size = tuple(c.get("pool_size", (2, 2)))
            x = pool2d(x, size, tuple(c.get("strides") or size), c.get("padding", "valid"),
                       "max" if cls == "MaxPooling2D" else "avg")
        elif cls == "ZeroPadding2D":
            (t, b), (l, r) = c["padding"]
            x = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))
        elif cls == "Flatten":
            x = x.reshape(x.shape[0], -1)  # NHWC order, as Keras flattens
        elif cls == "Activation":
            x = activation(x, c["activation"])
        elif cls == "ReLU":
            x = activation(x, "relu")
        elif cls == "Softmax":
            x = activation(x, "softmax")
        else:
            raise NotImplementedError(f"Keras layer {cls}")
    return x
