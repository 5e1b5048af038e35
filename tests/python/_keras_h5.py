"""Writes HDF5 files in the exact layout Keras 2.x writes (no TensorFlow needed), for the importer tests.

Follows keras/saving/hdf5_format.py (tf.keras 2.3-2.15) and keras/engine/saving.py (Keras 2.2):
- `model.save('m.h5')`: root attributes `keras_version`, `backend`, `model_config` (JSON as bytes),
  `training_config`; group `model_weights` with attributes `layer_names` (every layer of
  `model.layers`, in model order, as an array of byte strings), `backend`, `keras_version`; one
  group per layer (tf.keras creates them sorted by name, Keras 2.2 in model order) with the
  attribute `weight_names` (e.g. b'conv2d/kernel:0'; empty for layers without weights) and one
  dataset per weight under that name, which, holding a '/', lands in a subgroup:
  `model_weights/conv2d/conv2d/kernel:0`; optimizer state under `optimizer_weights`.
- `model.save_weights('w.h5')`: the same layer groups and attributes on the root.
- attributes over 64,512 bytes are split into `name0`, `name1`, ... (save_attributes_to_hdf5_group).
Weights are in Keras' layouts: Conv2D kernels HWIO, Dense kernels [in, out].
"""
from __future__ import annotations

import json

import h5py
import numpy as np

HDF5_OBJECT_HEADER_LIMIT = 64512


def _init(name):
    return {"class_name": name, "config": {"seed": None} if "Glorot" in name else {}}


def input_layer(shape, name="input_1"):
    return {"class_name": "InputLayer", "config": {"batch_input_shape": [None, *shape], "dtype": "float32",
                                                    "sparse": False, "ragged": False, "name": name}}


def conv2d(name, filters, kernel_size, strides=(1, 1), padding="valid", activation="linear", use_bias=True,
           batch_input_shape=None):
    c = {"name": name, "trainable": True, "dtype": "float32", "filters": filters,
         "kernel_size": list(kernel_size), "strides": list(strides), "padding": padding,
         "data_format": "channels_last", "dilation_rate": [1, 1], "groups": 1, "activation": activation,
         "use_bias": use_bias, "kernel_initializer": _init("GlorotUniform"), "bias_initializer": _init("Zeros"),
         "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
         "kernel_constraint": None, "bias_constraint": None}
    if batch_input_shape is not None:
        c["batch_input_shape"] = [None, *batch_input_shape]
    return {"class_name": "Conv2D", "config": c}


def pool2d(kind, name, pool_size, strides=None, padding="valid"):
    return {"class_name": kind, "config": {"name": name, "trainable": True, "dtype": "float32",
                                           "pool_size": list(pool_size), "padding": padding,
                                           "strides": list(strides or pool_size), "data_format": "channels_last"}}


def zero_padding(name, padding):
    return {"class_name": "ZeroPadding2D", "config": {"name": name, "trainable": True, "dtype": "float32",
                                                      "padding": [list(p) for p in padding],
                                                      "data_format": "channels_last"}}


def flatten(name="flatten", batch_input_shape=None):
    c = {"name": name, "trainable": True, "dtype": "float32", "data_format": "channels_last"}
    if batch_input_shape is not None:
        c["batch_input_shape"] = [None, *batch_input_shape]
    return {"class_name": "Flatten", "config": c}


def dense(name, units, activation="linear", use_bias=True, batch_input_shape=None):
    c = {"name": name, "trainable": True, "dtype": "float32", "units": units, "activation": activation,
         "use_bias": use_bias, "kernel_initializer": _init("GlorotUniform"), "bias_initializer": _init("Zeros"),
         "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
         "kernel_constraint": None, "bias_constraint": None}
    if batch_input_shape is not None:
        c["batch_input_shape"] = [None, *batch_input_shape]
    return {"class_name": "Dense", "config": c}


def activation(name, act):
    return {"class_name": "Activation", "config": {"name": name, "trainable": True, "dtype": "float32",
                                                   "activation": act}}


def dropout(name, rate=0.5):
    return {"class_name": "Dropout", "config": {"name": name, "trainable": True, "dtype": "float32",
                                                "rate": rate, "noise_shape": None, "seed": None}}


def layer(class_name, name, **config):
    return {"class_name": class_name, "config": {"name": name, "trainable": True, "dtype": "float32", **config}}


def sequential(layers, name="sequential", keras22=False):
    """model.get_config() wrapped as model_config: Keras 2.2 has no InputLayer entry (the first
    layer carries batch_input_shape); tf.keras lists the InputLayer first."""
    return {"class_name": "Sequential", "config": {"name": name, "layers": layers}}


def functional(layers, name="model"):
    """A Functional chain: every layer reads the one before it."""
    out = []
    prev = None
    for lay in layers:
        entry = dict(lay)
        entry["name"] = lay["config"]["name"]
        entry["inbound_nodes"] = [] if prev is None else [[[prev, 0, 0, {}]]]
        out.append(entry)
        prev = entry["name"]
    return {"class_name": "Functional",
            "config": {"name": name, "layers": out, "input_layers": [[out[0]["name"], 0, 0]],
                       "output_layers": [[out[-1]["name"], 0, 0]]}}


def to_json(model_config, keras_version="2.15.0"):
    """What model.to_json() returns."""
    return json.dumps({**model_config, "keras_version": keras_version, "backend": "tensorflow"})


def _save_attr(group, name, data, fixed=False):
    """keras' save_attributes_to_hdf5_group: chunks an attribute that exceeds the header limit.
    h5py 3 stores a list of byte strings as variable-length strings; h5py 2 (Keras 2.2's time)
    stored fixed-length ones (`fixed`)."""
    if fixed and len(data):
        data = np.asarray(data)
    data_npy = np.asarray(data)
    num_chunks = 1
    chunked = np.array_split(data_npy, num_chunks)
    while any(x.nbytes > HDF5_OBJECT_HEADER_LIMIT for x in chunked):
        num_chunks += 1
        chunked = np.array_split(data_npy, num_chunks)
    if num_chunks > 1:
        for i, chunk in enumerate(chunked):
            group.attrs[f"{name}{i}"] = chunk
    else:
        group.attrs[name] = data


def _weights_group(g, layer_names, weights, keras_version, keras22, chunk_limit=None):
    """layer_names: every layer of model.layers; weights: {layer name: [(weight name, array)]}."""
    global HDF5_OBJECT_HEADER_LIMIT
    saved = HDF5_OBJECT_HEADER_LIMIT
    if chunk_limit is not None:
        HDF5_OBJECT_HEADER_LIMIT = chunk_limit
    try:
        _save_attr(g, "layer_names", [n.encode("utf8") for n in layer_names], keras22)
    finally:
        HDF5_OBJECT_HEADER_LIMIT = saved
    g.attrs["backend"] = b"tensorflow"
    g.attrs["keras_version"] = keras_version.encode("utf8")
    for lname in (layer_names if keras22 else sorted(layer_names)):
        lg = g.create_group(lname)
        ws = weights.get(lname, [])
        names = [n.encode("utf8") for n, _ in ws]
        _save_attr(lg, "weight_names", names, keras22)
        for n, val in zip(names, (v for _, v in ws)):
            d = lg.create_dataset(n, val.shape, dtype=val.dtype)
            d[...] = val


def save_model(path, model_config, weights, *, keras_version="2.15.0", keras22=False, layer_names=None,
               chunk_limit=None):
    """Like model.save(path) in HDF5. `weights`: {layer name: [(weight variable name, array)]};
    `layer_names`: model.layers' names (default: every configured layer but a Sequential's InputLayer)."""
    if layer_names is None:
        layer_names = model_layer_names(model_config)
    with h5py.File(path, "w") as f:
        if keras22:  # Keras 2.2 encodes every string attribute; old h5py stored them fixed-length
            f.attrs["keras_version"] = np.bytes_(keras_version.encode("utf8"))
            f.attrs["backend"] = np.bytes_(b"tensorflow")
            f.attrs["model_config"] = np.bytes_(json.dumps(model_config).encode("utf8"))
        else:
            f.attrs["keras_version"] = keras_version
            f.attrs["backend"] = "tensorflow"
            f.attrs["model_config"] = json.dumps(model_config).encode("utf8")
        training = {"loss": "categorical_crossentropy", "metrics": ["accuracy"],
                     "optimizer_config": {"class_name": "Adam", "config": {"learning_rate": 0.001}}}
        f.attrs["training_config"] = json.dumps(training).encode("utf8")
        _weights_group(f.create_group("model_weights"), layer_names, weights, keras_version, keras22, chunk_limit)
        opt = f.create_group("optimizer_weights")
        opt.attrs["weight_names"] = np.array([b"Adam/iter:0"])
        opt.create_dataset("Adam/iter:0", data=np.int64(100))


def save_weights(path, model_config, weights, *, keras_version="2.15.0", keras22=False, layer_names=None):
    """Like model.save_weights(path) in HDF5."""
    if layer_names is None:
        layer_names = model_layer_names(model_config)
    with h5py.File(path, "w") as f:
        _weights_group(f, layer_names, weights, keras_version, keras22)


def model_layer_names(model_config):
    layers = model_config["config"]["layers"]
    if model_config["class_name"] == "Sequential":
        return [lay["config"]["name"] for lay in layers if lay["class_name"] != "InputLayer"]
    return [lay["config"]["name"] for lay in layers]


# --------------------------------------------------------------------------------------------------
# From PyTorch layouts to Keras layouts (written here, apart from the importer, on purpose)

def conv_kernel_from_oihw(w):
    """OIHW -> HWIO: kernel[p, q, c, o] = w[o, c, p, q]."""
    o, c, kh, kw = w.shape
    out = np.empty((kh, kw, c, o), w.dtype)
    for p in range(kh):
        for q in range(kw):
            out[p, q] = w[:, :, p, q].T
    return out


def dense_kernel_after_flatten(w, c, h, wd):
    """A torch Linear weight [U, C*H*W] (CHW inputs) -> the Keras Dense kernel [H*W*C, U] that
    reads Keras' NHWC flatten: row (i*W + j)*C + k holds column (k*H + i)*W + j."""
    units = w.shape[0]
    out = np.empty((h * wd * c, units), w.dtype)
    for i in range(h):
        for j in range(wd):
            for k in range(c):
                out[(i * wd + j) * c + k] = w[:, (k * h + i) * wd + j]
    return out
