"""`tools/export keras`: Keras HDF5 files (Keras 2.2 to 2.15, `model.save` / `model.save_weights`
in the .h5 format) to format v1, without TensorFlow: the file is read with h5py.

Three kinds of input:
- a full-model file: the architecture is the root attribute `model_config` (JSON), the weights are
  under the group `model_weights`;
- a weights-only file (`layer_names` on the root) with the architecture as Keras' own JSON
  (`model.to_json()`, given with --arch);
- a weights-only file with the architecture given as an existing format-v1 graph (--like), the
  Keras layers with weights matched to the graph's conv2d/dense nodes by order and shape.

Weights are found the way Keras' `load_weights_from_hdf5_group` finds them: the group's
`layer_names` attribute (or its chunks `layer_names0`, `layer_names1`, ... for long lists) lists the
layers in model order; each layer group's `weight_names` attribute lists its datasets, whose names
hold a '/' and so live in subgroups (`model_weights/conv2d/conv2d/kernel:0`); the layers that have
weights are matched to the architecture's layers with weights by position.

Layout conversions: Conv2D kernels are HWIO, the engine's OIHW; Dense kernels are [in, out], the
engine's [out, in]; Keras flattens channels-last maps in (h, w, c) order and the engine in (c, h, w)
order, so the columns of the first Dense weight after a Flatten are permuted (this is the classic
reason an engine disagrees with the notebook). Keras' 'same' padding puts the odd extra row/column
at the bottom/right. The check runs keras_reference (an independent NumPy NHWC implementation of
the layers) next to the exported graph.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import pathlib
import re
import zipfile

import numpy as np

from . import import_common as ic
from .export_core import graph_object
from .export_args import add_common_args
from .import_common import ImportFailure
from .importers import keras_layers as kl
from .importers.keras_layers import IDENTITY_LAYERS, SUPPORTED_LAYERS, kernel_bias
from .importers.layout import nhwc_to_chw_rows, same_pads
from .model_format import topological_order, validate

# --------------------------------------------------------------------------------------------------
# The file

def _text(v) -> str:
    if isinstance(v, (bytes, np.bytes_)):
        return v.decode("utf8")
    return str(v)


def _attr_strings(obj, name: str) -> list[str] | None:
    """A string-list attribute as Keras' load_attributes_from_hdf5_group reads it (chunked or not)."""
    if name in obj.attrs:
        return [_text(v) for v in np.atleast_1d(obj.attrs[name])]
    if f"{name}0" not in obj.attrs:
        return None
    out, k = [], 0
    while f"{name}{k}" in obj.attrs:
        out += [_text(v) for v in np.atleast_1d(obj.attrs[f"{name}{k}"])]
        k += 1
    return out


class KerasFile:
    """The parts of a Keras file the importer needs: the architecture (`config`, Keras' JSON) and
    the weights (`layers`: per layer that has weights, (layer name, {weight name: array}, weight
    names in Keras' variable order)).

    A `.keras` file (Keras 3's zip) is read by `_read_keras_zip`; anything else as HDF5."""

    def __init__(self, path, arch: str | None = None):
        self.path = pathlib.Path(path)
        self.layers: list[tuple[str, dict[str, np.ndarray], list[str]]] = []
        self.config = None
        self.config_origin = None
        self.keras3_zip = False
        if zipfile.is_zipfile(self.path):
            self._read_keras_zip()
            return
        self._read_h5(arch)

    def _read_keras_zip(self):
        """Keras 3 `model.save('m.keras')`: config.json, metadata.json, model.weights.h5. The weights
        are stored under `layers/<class in snake_case>[_N]/vars/<i>`, the N counting earlier layers
        of the same class in `model.layers` (keras/src/saving/saving_lib.py, _save_container_state):
        names derived from each layer's class and position, not the config's layer names (which
        differ, e.g. conv2d_12, when a notebook built several models). The weights are therefore
        assigned to the config's layers by that same scheme (`keras3_weight_paths`); an `optimizer`
        group beside `layers` is training state and ignored."""
        import h5py
        where = str(self.path)
        self.keras3_zip = True
        self.kind = "Keras 3 .keras zip"
        try:
            with zipfile.ZipFile(self.path) as z:
                names = set(z.namelist())
                for need in ("config.json", "model.weights.h5"):
                    if need not in names:
                        raise ImportFailure(f"{where}: a .keras zip without {need} (it holds {', '.join(sorted(names))})")
                self.config = json.loads(z.read("config.json").decode("utf8"))
                meta = json.loads(z.read("metadata.json").decode("utf8")) if "metadata.json" in names else {}
                weights_bytes = z.read("model.weights.h5")
        except (zipfile.BadZipFile, ValueError, KeyError) as e:
            raise ImportFailure(f"{where}: not a readable .keras zip ({e})") from None
        self.keras_version = str(meta.get("keras_version", "3 (no metadata.json)"))
        self.config_origin = f"{self.path.name}: config.json"
        try:
            f = h5py.File(io.BytesIO(weights_bytes), "r")
        except OSError as e:
            raise ImportFailure(f"{where}: model.weights.h5 is not readable HDF5 ({e})") from None
        with f:
            stored: dict[str, list[np.ndarray]] = {}
            if "layers" in f:
                for key, grp in f["layers"].items():
                    vars_ = grp["vars"] if "vars" in grp else {}
                    if any(k for k in grp.keys() if k != "vars"):
                        raise ImportFailure(f"{where}: weights group 'layers/{key}' holds nested layers "
                                            f"({', '.join(k for k in grp.keys() if k != 'vars')}): nested "
                                            "models and layers with sublayers are not supported")
                    stored[key] = [np.asarray(vars_[k]) for k in sorted(vars_.keys(), key=int)]
        layers = _layer_list(self.config, self.config_origin)[1]
        used = set()
        for lay, path in zip(layers, keras3_weight_paths(self.config, layers)):
            lname = _layer_name(lay)
            arrays = stored.get(path, [])
            used.add(path)
            if arrays:
                names = [f"{path}/vars/{i}" for i in range(len(arrays))]
                self.layers.append((lname, dict(zip(names, arrays)), names))
        left = sorted(k for k in stored if k not in used and stored[k])
        if left:
            raise ImportFailure(f"{where}: model.weights.h5 holds weights for {', '.join('layers/' + k for k in left)}, "
                                "which no layer of config.json uses")

    def _read_h5(self, arch):
        import h5py
        path = self.path
        try:
            f = h5py.File(self.path, "r")
        except OSError as e:
            raise ImportFailure(f"{path}: not a readable HDF5 file ({e})") from None
        with f:
            if "model_weights" in f:
                group, self.kind = f["model_weights"], "full model"
            elif _attr_strings(f, "layer_names") is not None:
                group, self.kind = f, "weights only"
            elif "layers" in f and "vars" in f:
                raise ImportFailure(f"{path}: a Keras 3 weights file (model.save_weights('*.weights.h5')); "
                                    "export the whole model (model.save('m.keras')) and import that")
            else:
                raise ImportFailure(f"{path}: not a Keras HDF5 file: it has neither a 'model_weights' group "
                                    "(model.save) nor a 'layer_names' attribute (model.save_weights)")
            self.keras_version = _text(group.attrs.get("keras_version", f.attrs.get("keras_version", "unknown")))
            for lname in _attr_strings(group, "layer_names"):
                if lname not in group:
                    raise ImportFailure(f"{path}: layer_names lists '{lname}' but the file has no group of that name")
                # Keras 3 writes an empty float64 array for a layer without weights.
                names = [n for n in (_attr_strings(group[lname], "weight_names") or []) if n]
                if not names:
                    continue
                arrays = {}
                for wn in names:
                    if wn not in group[lname]:
                        raise ImportFailure(f"{path}: layer '{lname}' lists weight '{wn}' but has no such dataset")
                    arrays[wn] = np.asarray(group[lname][wn])
                self.layers.append((lname, arrays, names))
            if arch is not None:
                try:
                    self.config = json.loads(pathlib.Path(arch).read_text(encoding="utf8"))
                except (OSError, ValueError) as e:
                    raise ImportFailure(f"--arch {arch}: cannot read Keras architecture JSON: {e}") from None
                self.config_origin = f"--arch {arch}"
            elif "model_config" in f.attrs:
                try:
                    self.config = json.loads(_text(f.attrs["model_config"]))
                except ValueError as e:
                    raise ImportFailure(f"{path}: the model_config attribute is not JSON: {e}") from None
                self.config_origin = f"{self.path.name}: model_config"

    def weights_list(self) -> list[list[np.ndarray]]:
        return [[arrays[n] for n in names] for _, arrays, names in self.layers]


# --------------------------------------------------------------------------------------------------
# The architecture

def _layer_name(lay: dict) -> str:
    return lay.get("config", {}).get("name") or lay.get("name") or lay.get("class_name", "?")


def _endpoints(v) -> list[str]:
    """input_layers / output_layers: Keras 2 [[name, 0, 0], ...]; Keras 3 [name, 0, 0] for one."""
    if not v:
        return []
    if isinstance(v[0], str):
        return [v[0]]
    return [e[0] for e in v]


def _inbound_sources(node, lname: str, where: str) -> list[str]:
    """The layers one call of a layer reads, in argument order (Keras 2 and Keras 3 serializations)."""
    if isinstance(node, dict):  # Keras 3: {"args": [...], "kwargs": {...}} with __keras_tensor__ leaves
        out = []

        def walk(x):
            if isinstance(x, dict):
                if x.get("class_name") == "__keras_tensor__":
                    out.append(x["config"]["keras_history"][0])
                else:
                    for v in x.values():
                        walk(v)
            elif isinstance(x, (list, tuple)):
                for v in x:
                    walk(v)
        walk(node.get("args", []))
        kw = []
        walk_target = node.get("kwargs", {})
        before = len(out)
        walk(walk_target)
        kw = out[before:]
        if kw:
            raise ImportFailure(f"{where}: layer '{lname}' takes tensors as keyword arguments ({', '.join(kw)}); "
                                "not supported")
        return out
    if isinstance(node, list):  # Keras 2: [[layer, node index, tensor index, kwargs], ...]
        return [e[0] for e in node]
    raise ImportFailure(f"{where}: layer '{lname}' has an inbound node of unknown form {node!r:.80}")


def _layer_list(model_config: dict, where: str) -> tuple[str, list[dict]]:
    if not isinstance(model_config, dict) or "class_name" not in model_config or "config" not in model_config:
        raise ImportFailure(f"{where}: not a Keras model config (expected {{\"class_name\": ..., \"config\": ...}})")
    cls, cfg = model_config["class_name"], model_config["config"]
    if cls == "Sequential":
        # Keras 2.2.3+, tf.keras and Keras 3: {"name": ..., "layers": [...]}; older Keras 2: the list itself.
        layers = cfg["layers"] if isinstance(cfg, dict) else cfg
        name = cfg.get("name", "sequential") if isinstance(cfg, dict) else "sequential"
        return name, list(layers)
    if cls in ("Model", "Functional"):
        return cfg.get("name", "model"), list(cfg["layers"])
    raise ImportFailure(f"{where}: model class {cls!r} is not supported (Sequential or Functional; a subclassed "
                        "model has no architecture in the file)")


def _graph(model_config: dict, where: str) -> tuple[list[dict], dict[str, list[str]], str, str | None]:
    """(layers in an order where each comes after its inputs, layer name -> input layer names,
    output layer name, the InputLayer's name or None when a Sequential model has none)."""
    cls = model_config["class_name"]
    _, layers = _layer_list(model_config, where)
    for lay in layers:
        if lay.get("class_name") in ("Sequential", "Functional", "Model"):
            raise ImportFailure(f"{where}: layer '{_layer_name(lay)}' is a nested {lay['class_name']} model; "
                                "nested models are not supported (rebuild the model flat)")
    if cls == "Sequential":
        names = [_layer_name(lay) for lay in layers]
        inbound, prev = {}, None
        for n in names:
            inbound[n] = [prev] if prev is not None else []
            prev = n
        first_input = names[0] if layers and layers[0].get("class_name") == "InputLayer" else None
        return layers, inbound, names[-1], first_input
    cfg = model_config["config"]
    by_name = {_layer_name(lay): lay for lay in layers}
    ins, outs = _endpoints(cfg.get("input_layers")), _endpoints(cfg.get("output_layers"))
    if len(ins) != 1 or len(outs) != 1:
        raise ImportFailure(f"{where}: a Functional model with {len(ins)} inputs and {len(outs)} outputs; "
                            "only one of each is supported")
    inbound = {}
    for name, lay in by_name.items():
        nodes = lay.get("inbound_nodes") or []
        if len(nodes) > 1:
            raise ImportFailure(f"{where}: layer '{name}' is called {len(nodes)} times "
                                "(shared layers are not supported)")
        srcs = _inbound_sources(nodes[0], name, where) if nodes else []
        for s_ in srcs:
            if s_ not in by_name:
                raise ImportFailure(f"{where}: layer '{name}' reads unknown layer '{s_}'")
        inbound[name] = srcs
    # Topological order, keeping the config's order among independent layers.
    order, done = [], set()
    pending = list(by_name)
    while pending:
        progressed = False
        for n in list(pending):
            if all(s_ in done for s_ in inbound[n]):
                order.append(by_name[n])
                done.add(n)
                pending.remove(n)
                progressed = True
        if not progressed:
            raise ImportFailure(f"{where}: the layers form a cycle ({', '.join(pending)})")
    return order, inbound, outs[0], ins[0]


def keras3_weight_paths(model_config: dict, layers: list[dict]) -> list[str | None]:
    """The `layers/<name>` group of each of `layers` (the config's list) in a Keras 3 weights file:
    Keras names each entry of `model.layers` by its class in snake_case, with `_1`, `_2`, ... for
    later layers of the same class (saving_lib._get_unique_name). Sequential.layers leaves out the
    InputLayer, Functional.layers keeps it."""
    used: dict[str, int] = {}
    out = []
    for lay in layers:
        cls = lay.get("class_name", "")
        if model_config["class_name"] == "Sequential" and cls == "InputLayer":
            out.append(None)
            continue
        snake = re.sub(r"\W+", "", cls)
        snake = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", snake)
        snake = re.sub("([a-z])([A-Z])", r"\1_\2", snake).lower()
        if snake in used:
            used[snake] += 1
            out.append(f"{snake}_{used[snake]}")
        else:
            used[snake] = 0
            out.append(snake)
    return out


def _input_shape(layers: list[dict], model_config: dict, where: str) -> tuple[int, ...]:
    first = layers[0]["config"] if layers else {}
    shape = first.get("batch_input_shape") or first.get("batch_shape")
    if shape is None and isinstance(model_config.get("config"), dict):
        shape = model_config["config"].get("build_input_shape")
    if shape is None:
        raise ImportFailure(f"{where}: no input shape in the architecture (no InputLayer, no batch_input_shape)")
    per = list(shape[1:])
    if any(d is None for d in per) or not 1 <= len(per) <= 3:
        raise ImportFailure(f"{where}: input shape {shape} must have 1 to 3 known dimensions after the batch")
    return tuple(int(d) for d in per)


def _leading_rescaling(layers, inbound, input_layer) -> dict | None:
    """The Rescaling layer that the model input reaches through no-op layers and Reshapes only."""
    consumers: dict[str, list[str]] = {}
    for lay in layers:
        for s_ in inbound[_layer_name(lay)]:
            consumers.setdefault(s_, []).append(_layer_name(lay))
    by_name = {_layer_name(lay): lay for lay in layers}
    cur = input_layer if input_layer is not None else None
    nxt = [_layer_name(layers[0])] if cur is None else consumers.get(cur, [])
    while len(nxt) == 1:
        lay = by_name[nxt[0]]
        if lay["class_name"] == "Rescaling":
            return lay
        if lay["class_name"] not in IDENTITY_LAYERS + ("Reshape",):
            return None
        nxt = consumers.get(nxt[0], [])
    return None


def _weights_by_layer(kf: KerasFile, config_layers: list[dict]) -> dict:
    """Layer name -> the file's weights for it: by layer name when the file's names are the config's
    (model.save), else by position among the layers that have weights (a weights-only file with a
    renamed architecture)."""
    weighted_classes = ("Conv2D", "Dense", "BatchNormalization")
    config_names = [_layer_name(lay) for lay in config_layers]
    file_names = [w[0] for w in kf.layers]
    if set(file_names) <= set(config_names):
        return {w[0]: w for w in kf.layers}
    slots = [_layer_name(lay) for lay in config_layers if lay.get("class_name") in weighted_classes]
    if len(slots) != len(kf.layers):
        raise ImportFailure(f"{kf.path} holds weights for {len(kf.layers)} layers, the architecture uses "
                            f"{len(slots)} ({', '.join(file_names)} vs {', '.join(slots)})")
    return dict(zip(slots, kf.layers))


def _model_shapes(in_shape: tuple[int, ...]) -> tuple[tuple, tuple]:
    """(the Keras input shape as (H, W, C) or (K,), the model's input in the engine's [C, H, W] or [K])."""
    if len(in_shape) == 3:
        return in_shape, (in_shape[2], in_shape[0], in_shape[1])
    if len(in_shape) == 2:
        return in_shape + (1,), (1,) + in_shape  # a [H, W] matrix is one channel
    return in_shape, in_shape


def _layer_input(b: kl.KerasBuild, lay: dict, srcs: list[str], values: dict, consumers: dict) -> kl.KerasLayer:
    """The layer with its input values, a pending affine applied where the layer cannot take it."""
    cls, c = lay.get("class_name"), lay.get("config", {})
    lname = _layer_name(lay)
    where = f"layer '{lname}' ({cls})"
    ins = [values[s_] for s_ in srcs]
    alone = all(consumers.get(s_, 0) == 1 for s_ in srcs)
    if len(ins) != 1 and cls not in kl.MULTI_INPUT:
        raise ImportFailure(f"{where}: reads {len(ins)} tensors; only Add and Concatenate take several")
    v = ins[0] if ins else None
    if cls not in kl.MULTI_INPUT:
        v = dataclasses.replace(v, sole=v.sole and alone)
    if v is not None and v.aff is not None and cls not in kl.TAKES_AFFINE:
        # No linear layer ahead takes the scale and shift exactly: a scale_shift node applies them.
        v = b.materialize_aff(v)
    if v is not None and v.pad is not None and cls not in ("Conv2D", "AveragePooling2D") + kl.IDENTITY_LAYERS:
        raise ImportFailure(f"{where}: a ZeroPadding2D can only precede Conv2D or AveragePooling2D here")
    if cls in kl.CONV_LIKE and len(v.k) != 3:
        raise ImportFailure(f"{where}: needs a [H, W, C] input, gets {list(v.k)}")
    return kl.KerasLayer(lay, cls, c, lname, where, srcs, ins, v)


def _output(b: kl.KerasBuild, out: kl.Value) -> kl.Value:
    if out.pad is not None:
        raise ImportFailure("the model ends with a ZeroPadding2D layer")
    out = b.materialize_aff(out)
    if out.hwc is not None:
        raise ImportFailure("the model's output is a flattened channels-last map, whose element order the "
                            "engine (which flattens channels first) does not reproduce")
    if len(out.k) == 1 and len(out.e) == 3:
        out = b.flat_value(out)
    if out.fv == b.spec["name"] or not b.nodes:
        raise ImportFailure("the model has no layers to export")
    return out


def _fold_rescaling(pre: dict, rescale_fold) -> None:
    """The model computes ((u * S - M) / STD) * r + o from the user's preprocessing (S, M, STD):
    with one scale r that is (u * S*r - (M*r - o*STD)) / STD, the same float32 arithmetic for the
    usual Rescaling(1/255) on raw pixels (S = 1, M = 0, STD = 1)."""
    r, o = rescale_fold
    m, sd = np.asarray(pre["mean"], np.float64), np.asarray(pre["std"], np.float64)
    if np.all(r == r[0]):
        pre["scale"] = float(np.float32(pre["scale"] * r[0]))
        pre["mean"] = [float(x) for x in m * r[0] - o * sd]
    else:
        pre["std"] = [float(x) for x in sd / r]
        pre["mean"] = [float(x) for x in m - o * sd / r]


def graph_from_config(kf: KerasFile, args, like, *, name: str, labels, description: str | None):
    """(graph, tensors, user_spec, user_pad, keras_input_rank, weights by layer name) from the file's
    architecture and weights. `user_spec` is the preprocessing the user's own code applies before the
    Keras model (the graph's input spec also holds what a leading Rescaling layer does)."""
    where_model = kf.config_origin
    layers, inbound, out_layer, input_layer = _graph(kf.config, where_model)
    if not layers:
        raise ImportFailure(f"{where_model}: the model has no layers")
    config_layers = _layer_list(kf.config, where_model)[1]
    in_shape = _input_shape(config_layers if input_layer is None else
                            [lay for lay in layers if _layer_name(lay) == input_layer], kf.config, where_model)
    k_in, model_chw = _model_shapes(in_shape)
    rescale_layer = _leading_rescaling(layers, inbound, input_layer)
    # A model that rescales its own input is fed raw pixel values (0..255) by its users.
    spec, user_pad = ic.input_spec(args, like, model_chw, "the Keras model",
                                   default_scale=1.0 if rescale_layer is not None else None)
    user_spec = json.loads(json.dumps(spec))
    consumers: dict[str, int] = {}
    for s_ in [s_ for lay in layers for s_ in inbound[_layer_name(lay)]] + [out_layer]:
        consumers[s_] = consumers.get(s_, 0) + 1
    by_layer = _weights_by_layer(kf, config_layers)
    b = kl.KerasBuild(kf.path, by_layer, spec, user_pad, rescale_layer)
    if input_layer is None:  # a Sequential model whose first layer states the input shape
        input_layer = "<input>"
        inbound[_layer_name(layers[0])] = [input_layer]
        consumers[input_layer] = 1
    values = {input_layer: kl.Value(spec["name"], k_in, tuple(spec["shape"]) if len(in_shape) == 1 else model_chw)}
    for lay in layers:
        c = lay.get("config", {})
        if c.get("data_format", "channels_last") != "channels_last":
            raise ImportFailure(f"layer '{_layer_name(lay)}' ({lay.get('class_name')}): data_format "
                                f"{c['data_format']!r}; only channels_last is supported")
        if lay.get("class_name") == "InputLayer":
            continue
        layer = _layer_input(b, lay, inbound[_layer_name(lay)], values, consumers)
        if layer.cls not in kl.HANDLERS:
            raise ImportFailure(f"{layer.where}: no format-v1 op for this layer (supported: {kl.SUPPORTED_LAYERS})")
        values[layer.lname] = kl.HANDLERS[layer.cls](b, layer)
    out = _output(b, values[out_layer])
    unused = [w[0] for w in kf.layers if w[0] not in b.used_weights]
    if unused:
        raise ImportFailure(f"{kf.path} holds weights for {len(kf.layers)} layers, the architecture uses "
                            f"{len(b.used_weights)} ({', '.join(unused)} left over)")
    pre = spec["preprocess"]
    if b.rescale_fold is not None:
        _fold_rescaling(pre, b.rescale_fold)
    if any(b.input_pad):
        pre["pad"] = b.input_pad
        pre["pad_value"] = 0.0
    graph = graph_object(name, description, spec, labels, b.nodes, [out.fv])
    weights_by_name = {lname: [w[1][n] for n in w[2]] for lname, w in by_layer.items()}
    return graph, b.tensors, user_spec, user_pad, len(in_shape), weights_by_name


# --------------------------------------------------------------------------------------------------
# Weights-only file + --like graph

def _flatten_before(graph: dict, shapes: dict, node: dict):
    """The [C, H, W] shape flattened on the way to `node`'s input through elementwise nodes, if any."""
    producers = {n["name"]: n for n in graph["nodes"]}
    v = node["inputs"][0]
    while v in producers:
        p = producers[v]
        if p["op"] == "flatten":
            s = shapes[p["inputs"][0]]
            return s if len(s) == 3 else None
        if p["op"] not in ("relu", "tanh", "sigmoid", "softmax"):
            return None
        v = p["inputs"][0]
    return None


def graph_from_like(kf: KerasFile, like, *, name: str, labels, description: str | None):
    """`like`'s graph with its conv2d/dense tensors taken from the Keras file, in order."""
    graph = json.loads(json.dumps(like.graph))
    shapes = validate(graph, None, where=str(like.path))
    order = topological_order(graph["nodes"], graph["input"]["name"])
    slots = [graph["nodes"][i] for i in order if graph["nodes"][i]["op"] in ("conv2d", "dense")]
    if len(slots) != len(kf.layers):
        raise ImportFailure(f"{kf.path} holds weights for {len(kf.layers)} layer(s) "
                            f"({', '.join(w[0] for w in kf.layers)}) but {like.path} has {len(slots)} "
                            f"conv2d/dense node(s) ({', '.join(n['name'] for n in slots)})")
    tensors = {}
    for node, (lname, arrays, names) in zip(slots, kf.layers):
        kernel, bias = kernel_bias(lname, arrays, names, str(kf.path))
        roles = node.get("tensors", {})
        want = tuple(like.tensors[roles["weight"]].shape)
        where = f"Keras layer '{lname}' for node '{node['name']}' ({node['op']})"
        if node["op"] == "conv2d":
            if kernel.ndim != 4:
                raise ImportFailure(f"{where}: kernel has shape {list(kernel.shape)}, a conv2d needs a 4-D HWIO kernel")
            weight = kernel.transpose(3, 2, 0, 1)
        else:
            if kernel.ndim != 2:
                raise ImportFailure(f"{where}: kernel has shape {list(kernel.shape)}, a dense node needs [in, out]")
            flat = _flatten_before(graph, shapes, node)
            if flat is not None and kernel.shape[0] == flat[0] * flat[1] * flat[2]:
                c, h, w = flat
                kernel = kernel[nhwc_to_chw_rows(h, w, c)]
            weight = kernel.T
        if weight.shape != want:
            raise ImportFailure(f"{where}: kernel {list(kernel.shape)} converts to {list(weight.shape)}, "
                                f"the node needs {list(want)}")
        if ("bias" in roles) != (bias is not None):
            raise ImportFailure(f"{where}: the node {'has' if 'bias' in roles else 'has no'} bias, the Keras layer "
                                f"{'has none' if bias is None else 'has one'}")
        tensors[roles["weight"]] = np.ascontiguousarray(weight, np.float32)
        if bias is not None:
            if tuple(bias.shape) != tuple(like.tensors[roles["bias"]].shape):
                raise ImportFailure(f"{where}: bias has shape {list(bias.shape)}, the node needs "
                                    f"{list(like.tensors[roles['bias']].shape)}")
            tensors[roles["bias"]] = np.ascontiguousarray(bias, np.float32)
    graph["name"] = name
    if description is not None:
        graph["description"] = description
    if labels is not None:
        graph["labels"] = list(labels)
    return graph, tensors


def keras_config_for_graph(graph: dict) -> tuple[dict, list[int], int] | None:
    """A Keras Sequential config computing `graph` with Keras' weights (HWIO, [in, out], NHWC
    flatten), for the reference to run the Keras file's own arrays: (config, user pad, input rank).
    None when the graph is not a chain of layers Keras has."""
    shapes = validate(graph, None, where=graph.get("name", "graph"))
    inp = graph["input"]
    pad = list(inp.get("preprocess", {}).get("pad", [0, 0, 0, 0]))
    order = topological_order(graph["nodes"], inp["name"])
    nodes = [graph["nodes"][i] for i in order]
    layers = []
    cur = inp["name"]
    c, h, w = shapes[inp["name"]]
    rank = 3
    if nodes and nodes[0]["op"] == "flatten" and nodes[0]["inputs"] == [inp["name"]]:
        if any(pad):
            return None
        rank, cur = 1, nodes[0]["name"]
        nodes = nodes[1:]
        layers.append({"class_name": "InputLayer", "config": {"batch_input_shape": [None, c * h * w], "name": "input"}})
    else:
        layers.append({"class_name": "InputLayer", "config": {"batch_input_shape": [None, h, w, c], "name": "input"}})
    for n in nodes:
        if n["inputs"] != [cur]:
            return None
        op, a = n["op"], n.get("attrs", {})
        x = shapes[cur]
        if op in ("conv2d", "avgpool", "maxpool"):
            k = a["kernel"]
            s = a.get("stride", [1, 1] if op == "conv2d" else k)
            p = list(a.get("padding", [0, 0, 0, 0]))
            same = list(same_pads(x[1], k[0], s[0]) + same_pads(x[2], k[1], s[1]))
            if not any(p):
                mode = "valid"
            elif p == same and (op != "avgpool" or not a["count_include_pad"]):
                mode = "same"
            elif op == "maxpool" or (op == "avgpool" and not a["count_include_pad"]):
                return None
            else:
                layers.append({"class_name": "ZeroPadding2D", "config": {"padding": [[p[0], p[1]], [p[2], p[3]]]}})
                mode = "valid"
            if op == "conv2d":
                layers.append({"class_name": "Conv2D", "config": {
                    "filters": a["out_channels"], "kernel_size": k, "strides": s, "padding": mode,
                    "activation": "linear", "use_bias": "bias" in n.get("tensors", {})}})
            else:
                layers.append({"class_name": "MaxPooling2D" if op == "maxpool" else "AveragePooling2D",
                               "config": {"pool_size": k, "strides": s, "padding": mode}})
        elif op == "flatten":
            layers.append({"class_name": "Flatten", "config": {}})
        elif op == "dense":
            layers.append({"class_name": "Dense", "config": {"units": a["units"], "activation": "linear",
                                                             "use_bias": "bias" in n.get("tensors", {})}})
        elif op in ("relu", "tanh", "sigmoid", "softmax"):
            layers.append({"class_name": "Activation", "config": {"activation": op}})
        else:
            return None
        cur = n["name"]
    if graph["outputs"] != [cur]:
        return None
    for i, lay in enumerate(layers):
        lay["config"].setdefault("name", f"{lay['class_name'].lower()}_{i}")
    return {"class_name": "Sequential", "config": {"name": graph["name"], "layers": layers}}, pad, rank


# --------------------------------------------------------------------------------------------------
# The source for the check

def keras_source(model_config: dict, weights, spec: dict, user_pad: list[int], rank: int, label: str):
    """Raw uint8 [N, C, H, W] -> what the Keras model outputs, the input prepared as the user's code
    would: the stated scaling and padding, then channels-last ([N, H, W, C]), [N, H, W], or
    flattened. `weights`: per layer name (or, for Keras 2 chains, a list in layer order)."""
    from . import keras_reference

    def run(batch: np.ndarray) -> np.ndarray:
        return keras_reference.predict(model_config, weights, _keras_input(spec, user_pad, rank, batch))
    return ic.labeled(run, label)


def _keras_input(spec, user_pad, rank, batch):
    x = ic.user_preprocess(spec, user_pad, batch)
    if rank == 3:
        x = x.transpose(0, 2, 3, 1)
    elif rank == 2:
        x = x[:, 0]
    else:
        x = x.reshape(len(x), -1)
    return np.ascontiguousarray(x)


def keras_framework_source(path, spec: dict, user_pad: list[int], rank: int):
    """Keras itself (keras>=3, any backend; JAX unless KERAS_BACKEND says otherwise) running the
    file, or None with the reason when it cannot be imported or cannot load the file."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    try:
        import keras
    except Exception as e:  # ImportError, or a backend that fails to initialise
        return None, f"Keras is not importable ({type(e).__name__}: {e})"
    if not str(getattr(keras, "__version__", "0")).startswith("3"):
        return None, f"the installed Keras is {keras.__version__}, not 3"
    try:
        model = keras.saving.load_model(str(path), compile=False)
    except Exception as e:
        return None, f"Keras {keras.__version__} cannot load {path} ({type(e).__name__}: {str(e).splitlines()[0]})"

    def run(batch: np.ndarray) -> np.ndarray:
        x = _keras_input(spec, user_pad, rank, batch)
        out = model.predict(x, batch_size=500, verbose=0)
        return np.asarray(out[0] if isinstance(out, (list, tuple)) else out, np.float32)
    return ic.labeled(run, f"Keras {keras.__version__}, {keras.backend.backend()} backend"), None


def load(args, like):
    """The `tools/export keras` loader: (graph, tensors, source runner or None)."""
    kf = KerasFile(args.source, getattr(args, "arch", None))
    name = ic.model_name(args, like)
    labels = ic.labels_arg(args, like)
    if kf.config is not None:
        description = args.description or f"imported from Keras {kf.keras_version} file {kf.path.name} ({kf.kind})"
        graph, tensors, user_spec, user_pad, rank, weights = graph_from_config(
            kf, args, like, name=name, labels=labels, description=description)
        source = None
        # Files Keras 3 wrote are checked against Keras itself when it is installed; Keras 2 files
        # (which Keras 3 loads only partly) and --arch files against the NumPy reference.
        if (kf.keras3_zip or kf.keras_version.startswith("3")) and getattr(args, "arch", None) is None:
            source, why = keras_framework_source(kf.path, user_spec, user_pad, rank)
            if source is None:
                print(f"note: {why}; the check uses the NumPy NHWC reference of the Keras layers instead")
        if source is None:
            source = keras_source(kf.config, weights, user_spec, user_pad, rank, "Keras NumPy NHWC reference")
        return graph, tensors, source
    if like is None:
        raise ImportFailure(f"{args.source} holds weights only (no model_config): give the architecture with "
                            "--arch MODEL.json (Keras' model.to_json()) or --like GRAPH.json (format v1)")
    for opt in ("input_shape", "scale", "mean", "std", "pad"):
        if getattr(args, opt, None):
            raise ImportFailure(f"--{opt.replace('_', '-')}: with --like and no architecture, the input "
                                "and its preprocessing are --like's")
    description = args.description if args.description is not None else \
        f"weights imported from Keras {kf.keras_version} file {kf.path.name} into the graph of {like.path.name}"
    graph, tensors = graph_from_like(kf, like, name=name, labels=labels, description=description)
    synthesized = keras_config_for_graph(graph)
    if synthesized is None:
        print(f"note: {like.path.name} is not a chain of Keras layers; the check compares the "
              "reference interpreter and the engine only")
        return graph, tensors, None
    config, user_pad, rank = synthesized
    source = keras_source(config, kf.weights_list(), graph["input"], user_pad, rank,
                          "Keras NumPy NHWC reference, layers of --like")
    return graph, tensors, source


def register(sub) -> None:
    p = sub.add_parser(
        "keras", help="a Keras file: a Keras 3 .keras zip or a .h5 whole model (model.save), or .h5 weights "
                      "(model.save_weights) with --arch MODEL.json or --like GRAPH.json",
        description="Import a Keras model without TensorFlow: Keras 3 .keras zips (weights matched by Keras 3's "
                    "layers/<class>[_N] paths) and .h5 files written by Keras 2.2-2.15 or Keras 3; Sequential and "
                    "Functional models (one input, one output, branches joined by Add or Concatenate). Layers: " +
                    SUPPORTED_LAYERS + "; activations linear, relu, tanh, sigmoid, softmax. Inputs [H, W, C], [H, W] "
                    "(one channel) or flat [K] (the raw image is [C, H, W]; 784 -> [1, 28, 28]). "
                    "BatchNormalization and Rescaling are folded into the Conv2D/Dense before them, the "
                    "next Dense or 'valid' Conv2D, or (a leading Rescaling) the input preprocessing, and become a "
                    "scale_shift node where no fold is exact; Concatenate along the channel axis becomes a concat "
                    "node. A model that starts with Rescaling is fed raw pixels; for any other, state the "
                    "preprocessing (--preset, --transforms or --scale/--mean/--std) or let --check-labels pick "
                    "it; --pad for padding your code adds. The check runs Keras itself for files Keras 3 wrote (when "
                    "installed), else an independent NumPy NHWC implementation of the layers, next to the "
                    "exported graph and the engine.")
    p.add_argument("source", help="Keras file (.keras or .h5)")
    p.add_argument("--arch", help="the architecture as Keras JSON (model.to_json()), for a weights-only file")
    p.add_argument("--pad", help="zero padding the user's code adds around each raw image before the model: P "
                                 "or T,B,L,R (default: the model's input size minus the image size, halved)")
    add_common_args(p)
    p.set_defaults(load=load, export_checked=ic.export_checked)
