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


def _lname(lay) -> str:
    return lay["config"].get("name") or lay.get("name")


def _sources(node) -> list[str]:
    """Layer names one call reads: Keras 2 [[name, 0, 0, {}], ...]; Keras 3 {"args": [...]} whose
    __keras_tensor__ leaves carry keras_history [name, 0, 0]."""
    if isinstance(node, list):
        return [e[0] for e in node]
    found = []

    def walk(x):
        if isinstance(x, dict):
            if x.get("class_name") == "__keras_tensor__":
                found.append(x["config"]["keras_history"][0])
            else:
                for v in x.values():
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(node.get("args", []))
    return found


def layer_graph(model_config: dict) -> tuple[list[dict], dict[str, list[str]], str]:
    """(layers in config order, name -> input layer names, output layer name)."""
    cfg = model_config["config"]
    if model_config["class_name"] == "Sequential":
        layers = list(cfg["layers"] if isinstance(cfg, dict) else cfg)
        inputs, prev = {}, None
        for lay in layers:
            inputs[_lname(lay)] = [prev] if prev else []
            prev = _lname(lay)
        return layers, inputs, prev
    layers = list(cfg["layers"])
    inputs = {_lname(lay): (_sources(lay["inbound_nodes"][0]) if lay.get("inbound_nodes") else [])
              for lay in layers}
    outs = cfg["output_layers"]
    return layers, inputs, outs[0] if isinstance(outs[0], str) else outs[0][0]


def layer_list(model_config: dict) -> list[dict]:
    """The layers in config order (Sequential, or a Functional model)."""
    return layer_graph(model_config)[0]


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


def predict(model_config: dict, weights, x: np.ndarray) -> np.ndarray:
    """Runs the model on `x` (NHWC float32, or [N, K] / [N, H, W] as the model's input is shaped).
    `weights`: {layer name: arrays in Keras' order}, or a list consumed in layer order."""
    x = np.asarray(x, F32)
    pending = list(weights) if isinstance(weights, list) else None
    layers, inputs, out_name = layer_graph(model_config)
    values: dict[str, np.ndarray] = {}
    # Functional models list layers so that each comes after its inputs; repeat until all ran.
    todo = list(layers)
    while todo:
        lay = next(l_ for l_ in todo if all(s in values for s in inputs[_lname(l_)]))
        todo.remove(lay)
        cls, c, name = lay["class_name"], lay["config"], _lname(lay)
        srcs = inputs[name]
        args = [values[s] for s in srcs] if srcs else [x]
        v = args[0]

        def w():
            return [a.astype(F32) for a in (pending.pop(0) if pending is not None else weights[name])]
        if v.ndim == 3 and cls in ("Conv2D", "MaxPooling2D", "AveragePooling2D", "ZeroPadding2D", "GlobalAveragePooling2D",
                                   "GlobalMaxPooling2D",
                                   "BatchNormalization", "Rescaling"):
            v = v[..., None]  # a [H, W] input is one channel
        if cls in ("InputLayer", "Dropout"):
            pass
        elif cls == "Conv2D":
            k = w()
            v = conv2d(v, k[0], k[1] if len(k) > 1 else None, tuple(c.get("strides", (1, 1))), c.get("padding", "valid"))
            v = activation(v, c.get("activation", "linear"))
        elif cls == "Dense":
            k = w()
            v = (v @ k[0]).astype(F32)
            if len(k) > 1:
                v = v + k[1]
            v = activation(v, c.get("activation", "linear"))
        elif cls in ("MaxPooling2D", "AveragePooling2D"):
            size = tuple(c.get("pool_size", (2, 2)))
            v = pool2d(v, size, tuple(c.get("strides") or size), c.get("padding", "valid"),
                       "max" if cls == "MaxPooling2D" else "avg")
        elif cls in ("GlobalAveragePooling2D", "GlobalMaxPooling2D"):
            v = (v.mean(axis=(1, 2), keepdims=True) if cls == "GlobalAveragePooling2D"
                 else v.max(axis=(1, 2), keepdims=True)).astype(F32)
            if not c.get("keepdims", False):
                v = v.reshape(v.shape[0], -1)
        elif cls == "ZeroPadding2D":
            (t, b), (l, r) = c["padding"]
            v = np.pad(v, ((0, 0), (t, b), (l, r), (0, 0)))
        elif cls == "Flatten":
            v = v.reshape(v.shape[0], -1)  # NHWC order, as Keras flattens
        elif cls == "Reshape":
            v = v.reshape((v.shape[0],) + tuple(c["target_shape"]))
        elif cls == "BatchNormalization":
            k = w()
            names = (["gamma"] if c.get("scale", True) else []) + (["beta"] if c.get("center", True) else []) + \
                ["mean", "var"]
            p = dict(zip(names, k))
            # keras.ops.batch_normalization: (x - mean) * rsqrt(var + eps) * gamma + beta
            inv = F32(1) / np.sqrt(p["var"] + F32(c.get("epsilon", 1e-3)))
            v = ((v - p["mean"]) * (inv * p.get("gamma", F32(1))) + p.get("beta", F32(0))).astype(F32)
        elif cls == "Rescaling":
            v = (v * np.asarray(c.get("scale", 1.0), F32) + np.asarray(c.get("offset", 0.0), F32)).astype(F32)
        elif cls == "Add":
            v = args[0]
            for other in args[1:]:
                v = (v + other).astype(F32)
        elif cls == "Concatenate":
            v = np.concatenate(args, axis=c.get("axis", -1)).astype(F32)
        elif cls == "Activation":
            v = activation(v, c["activation"])
        elif cls == "ReLU":
            v = activation(v, "relu")
        elif cls == "Softmax":
            v = activation(v, "softmax")
        else:
            raise NotImplementedError(f"Keras layer {cls}")
        values[name] = v
    return values[out_name]
