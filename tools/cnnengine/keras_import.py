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

import json
import pathlib

import numpy as np

from . import import_common as ic
from .import_common import ImportFailure
from .model_format import topological_order, validate

CONV_LIKE = ("Conv2D", "MaxPooling2D", "AveragePooling2D", "ZeroPadding2D")
ACTIVATIONS = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "softmax": "softmax"}


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
    """The parts of a Keras HDF5 file the importer needs."""

    def __init__(self, path, arch: str | None = None):
        import h5py
        self.path = pathlib.Path(path)
        try:
            f = h5py.File(self.path, "r")
        except OSError as e:
            raise ImportFailure(f"{path}: not a readable HDF5 file ({e})") from None
        with f:
            if "model_weights" in f:
                group, self.kind = f["model_weights"], "full model"
            elif _attr_strings(f, "layer_names") is not None:
                group, self.kind = f, "weights only"
            else:
                raise ImportFailure(f"{path}: not a Keras HDF5 file: it has neither a 'model_weights' group "
                                    "(model.save) nor a 'layer_names' attribute (model.save_weights)")
            self.keras_version = _text(group.attrs.get("keras_version", f.attrs.get("keras_version", "unknown")))
            self.layers: list[tuple[str, dict[str, np.ndarray], list[str]]] = []
            for lname in _attr_strings(group, "layer_names"):
                if lname not in group:
                    raise ImportFailure(f"{path}: layer_names lists '{lname}' but the file has no group of that name")
                names = _attr_strings(group[lname], "weight_names") or []
                if not names:
                    continue
                arrays = {}
                for wn in names:
                    if wn not in group[lname]:
                        raise ImportFailure(f"{path}: layer '{lname}' lists weight '{wn}' but has no such dataset")
                    arrays[wn] = np.asarray(group[lname][wn])
                self.layers.append((lname, arrays, names))
            self.config = None
            self.config_origin = None
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


def _role(weight_name: str) -> str:
    """'conv2d/kernel:0' -> 'kernel'."""
    return weight_name.rsplit("/", 1)[-1].split(":", 1)[0]


def _kernel_bias(lname: str, arrays: dict[str, np.ndarray], names: list[str], where: str):
    roles = {_role(n): arrays[n] for n in names}
    if "kernel" in roles:
        kernel, bias = roles["kernel"], roles.get("bias")
        extra = sorted(set(roles) - {"kernel", "bias"})
    else:  # unusual names: Keras' own order is kernel, bias
        kernel, bias = arrays[names[0]], arrays[names[1]] if len(names) > 1 else None
        extra = names[2:]
    if extra:
        raise ImportFailure(f"{where}: weights layer '{lname}' has weights {', '.join(extra)} besides kernel and bias")
    return np.asarray(kernel, np.float32), None if bias is None else np.asarray(bias, np.float32)


# --------------------------------------------------------------------------------------------------
# The architecture

def _layer_list(model_config: dict, where: str) -> tuple[str, list[dict]]:
    if not isinstance(model_config, dict) or "class_name" not in model_config or "config" not in model_config:
        raise ImportFailure(f"{where}: not a Keras model config (expected {{\"class_name\": ..., \"config\": ...}})")
    cls, cfg = model_config["class_name"], model_config["config"]
    if cls == "Sequential":
        # Keras 2.2.3+ and tf.keras: {"name": ..., "layers": [...]}; older Keras 2: the list itself.
        layers = cfg["layers"] if isinstance(cfg, dict) else cfg
        name = cfg.get("name", "sequential") if isinstance(cfg, dict) else "sequential"
        return name, list(layers)
    if cls in ("Model", "Functional"):
        return cfg.get("name", "model"), _functional_chain(cfg, where)
    raise ImportFailure(f"{where}: model class {cls!r} is not supported (Sequential, or a Functional model "
                        "that is a chain of layers)")


def _functional_chain(cfg: dict, where: str) -> list[dict]:
    layers = cfg["layers"]
    by_name = {lay.get("name", lay["config"].get("name")): lay for lay in layers}
    ins, outs = cfg.get("input_layers", []), cfg.get("output_layers", [])
    if len(ins) != 1 or len(outs) != 1:
        raise ImportFailure(f"{where}: a Functional model with {len(ins)} inputs and {len(outs)} outputs; "
                            "only one of each is supported")
    consumers: dict[str, list[str]] = {n: [] for n in by_name}
    for name, lay in by_name.items():
        nodes = lay.get("inbound_nodes") or []
        if len(nodes) > 1:
            raise ImportFailure(f"{where}: layer '{name}' is called {len(nodes)} times "
                                "(shared layers are not supported)")
        for node in nodes:
            if not isinstance(node, list) or len(node) != 1:
                raise ImportFailure(f"{where}: layer '{name}' has {len(node) if isinstance(node, list) else '?'} "
                                    "inputs; only chains of single-input layers are supported")
            src = node[0][0]
            if src not in consumers:
                raise ImportFailure(f"{where}: layer '{name}' reads unknown layer '{src}'")
            consumers[src].append(name)
    chain, name = [], ins[0][0]
    while True:
        chain.append(by_name[name])
        nxt = consumers[name]
        if len(nxt) > 1:
            raise ImportFailure(f"{where}: layer '{name}' feeds {', '.join(nxt)}: branches are not supported")
        if not nxt:
            break
        name = nxt[0]
    if name != outs[0][0] or len(chain) != len(by_name):
        raise ImportFailure(f"{where}: the model is not a single chain from '{ins[0][0]}' to '{outs[0][0]}'")
    return chain


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


def _act_name(act, where: str) -> str:
    if isinstance(act, dict):  # newer serializations: {"class_name": "function", "config": "relu", ...}
        act = act.get("config") if act.get("class_name") == "function" else act.get("class_name", "")
    act = str(act).lower() if act is not None else "linear"
    if act == "linear":
        return "linear"
    if act not in ACTIVATIONS:
        raise ImportFailure(f"{where}: activation {act!r} has no format-v1 op (linear, relu, tanh, sigmoid, softmax)")
    return act


def _same(size: int, k: int, s: int) -> tuple[int, int]:
    """TensorFlow's 'same' padding: the odd extra row/column goes to the bottom/right."""
    out = (size + s - 1) // s
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def _pair(v, what, where) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ImportFailure(f"{where}: {what} {v!r} is not a pair")
    return int(v[0]), int(v[1])


def nhwc_to_chw_rows(h: int, w: int, c: int) -> np.ndarray:
    """perm with perm[chw_index] = hwc_index: the Keras flat index of each engine flat index."""
    return np.arange(h * w * c).reshape(h, w, c).transpose(2, 0, 1).reshape(-1)


def graph_from_config(kf: KerasFile, args, like, *, name: str, labels, description: str | None):
    """(graph, tensors, user_pad, keras_input_rank) from the file's architecture and weights."""
    where_model = kf.config_origin
    _, layers = _layer_list(kf.config, where_model)
    if not layers:
        raise ImportFailure(f"{where_model}: the model has no layers")
    in_shape = _input_shape(layers, kf.config, where_model)
    rank = len(in_shape)
    if rank == 3:
        shape = in_shape  # (H, W, C)
        model_chw = (in_shape[2], in_shape[0], in_shape[1])
    elif rank == 2:
        shape = in_shape + (1,)
        model_chw = (1,) + in_shape
    else:
        shape = in_shape
        model_chw = in_shape
    spec, user_pad = ic.input_spec(args, like, model_chw, "the Keras model")
    input_pad = list(user_pad)

    nodes: list[dict] = []
    tensors: dict[str, np.ndarray] = {}
    taken = {spec["name"]}
    cur = spec["name"]
    nhwc_flat = None  # (H, W, C) while the current flat value is in Keras' (h, w, c) order
    pending_pad = None
    weights = list(kf.layers)
    used_weights = 0

    def add(lname, op, attrs=None, params=None, fallback=None):
        nonlocal cur
        nname = ic.node_name(lname, fallback or op, taken)
        ic.append_node(nodes, tensors, nname, op, [cur], attrs, params)
        cur = nname
        return nname

    def add_activation(lname, act):
        if act != "linear":
            if ACTIVATIONS[act] == "softmax" and len(shape) != 1:
                raise ImportFailure(f"layer '{lname}': softmax over a {len(shape)}-D map is not supported")
            add(f"{lname}_{act}", ACTIVATIONS[act])

    def next_weights(lname, cls):
        nonlocal used_weights
        if used_weights >= len(weights):
            raise ImportFailure(f"layer '{lname}' ({cls}) has weights but {kf.path} holds weights for only "
                                f"{len(weights)} layer(s)")
        wname, arrays, names = weights[used_weights]
        used_weights += 1
        return _kernel_bias(wname, arrays, names, f"{kf.path}")

    if rank == 1:
        add("flatten", "flatten")  # the raw [C, H, W] image to the model's flat input

    for lay in layers:
        cls, c = lay.get("class_name"), lay.get("config", {})
        lname = c.get("name", cls)
        where = f"layer '{lname}' ({cls})"
        if c.get("data_format", "channels_last") != "channels_last":
            raise ImportFailure(f"{where}: data_format {c['data_format']!r}; only channels_last is supported")
        if cls in ("InputLayer", "Dropout", "SpatialDropout2D", "GaussianNoise", "GaussianDropout", "AlphaDropout"):
            continue  # no-ops at inference
        if cls in CONV_LIKE and len(shape) != 3:
            raise ImportFailure(f"{where}: needs a [H, W, C] input, gets {list(shape)}")
        pad_here, pending_pad = pending_pad, None
        if pad_here is not None and cls not in ("Conv2D", "AveragePooling2D"):
            raise ImportFailure(f"{where}: a ZeroPadding2D can only precede Conv2D or AveragePooling2D here")
        if cls == "ZeroPadding2D":
            p = c.get("padding", 1)
            if isinstance(p, int):
                t = b = l = r = p
            else:
                (t, b), (l, r) = (_pair(p[0], "padding", where), _pair(p[1], "padding", where)) \
                    if isinstance(p[0], (list, tuple)) else ((p[0], p[0]), (p[1], p[1]))
            if pad_here is not None:
                raise ImportFailure(f"{where}: two ZeroPadding2D layers in a row are not supported")
            if not nodes:
                input_pad = [a + v for a, v in zip(input_pad, (t, b, l, r))]
            else:
                pending_pad = [t, b, l, r]
            shape = (shape[0] + t + b, shape[1] + l + r, shape[2])
            continue
        if cls == "Conv2D":
            if _pair(c.get("dilation_rate", 1), "dilation_rate", where) != (1, 1) or c.get("groups", 1) != 1:
                raise ImportFailure(f"{where}: only dilation_rate 1 and groups 1 are supported")
            kernel, bias = next_weights(lname, cls)
            kh, kw = _pair(c["kernel_size"], "kernel_size", where)
            sh, sw = _pair(c.get("strides", 1), "strides", where)
            if kernel.shape != (kh, kw, shape[2], c["filters"]):
                raise ImportFailure(f"{where}: kernel has shape {list(kernel.shape)}, the layer needs "
                                    f"{[kh, kw, shape[2], c['filters']]} (HWIO)")
            if c.get("use_bias", True) != (bias is not None):
                raise ImportFailure(f"{where}: use_bias is {c.get('use_bias', True)} but the file "
                                    f"{'has no' if bias is None else 'has a'} bias")
            padding = c.get("padding", "valid")
            if padding == "valid":
                pads = [0, 0, 0, 0]
            elif padding == "same":
                pads = list(_same(shape[0], kh, sh) + _same(shape[1], kw, sw))
            else:
                raise ImportFailure(f"{where}: padding {padding!r} is not supported (valid, same)")
            # `shape` already includes a pending ZeroPadding2D, which the node's padding absorbs.
            oh = (shape[0] + pads[0] + pads[1] - kh) // sh + 1
            ow = (shape[1] + pads[2] + pads[3] - kw) // sw + 1
            if pad_here:
                pads = [a + v for a, v in zip(pads, pad_here)]
            add(lname, "conv2d", {"out_channels": int(c["filters"]), "kernel": [kh, kw], "stride": [sh, sw],
                                  "padding": pads},
                {"weight": kernel.transpose(3, 2, 0, 1), "bias": bias})  # HWIO -> OIHW
            shape = (oh, ow, int(c["filters"]))
            add_activation(lname, _act_name(c.get("activation", "linear"), where))
        elif cls in ("MaxPooling2D", "AveragePooling2D"):
            kh, kw = _pair(c.get("pool_size", 2), "pool_size", where)
            sh, sw = _pair(c.get("strides") or (kh, kw), "strides", where)
            padding = c.get("padding", "valid")
            if padding == "valid":
                pads = [0, 0, 0, 0]
            elif padding == "same":
                pads = list(_same(shape[0], kh, sh) + _same(shape[1], kw, sw))
            else:
                raise ImportFailure(f"{where}: padding {padding!r} is not supported (valid, same)")
            oh = (shape[0] + pads[0] + pads[1] - kh) // sh + 1
            ow = (shape[1] + pads[2] + pads[3] - kw) // sw + 1
            if cls == "MaxPooling2D":
                attrs = {"kernel": [kh, kw], "stride": [sh, sw], "padding": pads}
                op = "maxpool"
            else:
                # TensorFlow averages over the positions inside the input ('same' padding excluded).
                include = False
                if pad_here:
                    if padding != "valid":
                        raise ImportFailure(f"{where}: a ZeroPadding2D before 'same' average pooling is not supported")
                    pads, include = list(pad_here), True
                attrs = {"kernel": [kh, kw], "stride": [sh, sw], "padding": pads, "count_include_pad": include}
                op = "avgpool"
            if oh < 1 or ow < 1:
                raise ImportFailure(f"{where}: pool {kh}x{kw} does not fit the {shape[0]}x{shape[1]} input")
            add(lname, op, attrs)
            shape = (oh, ow, shape[2])
        elif cls == "Flatten":
            if len(shape) == 3:
                h, w, ch = shape
                add(lname, "flatten")
                if ch > 1 and h * w > 1:
                    nhwc_flat = shape
                shape = (h * w * ch,)
        elif cls == "Dense":
            if len(shape) != 1:
                raise ImportFailure(f"{where}: Dense on a {len(shape)}-D input (Keras applies it per position); "
                                    "only Dense after Flatten (or on a flat input) is supported")
            kernel, bias = next_weights(lname, cls)
            units = int(c["units"])
            if kernel.shape != (shape[0], units):
                raise ImportFailure(f"{where}: kernel has shape {list(kernel.shape)}, the layer needs "
                                    f"{[shape[0], units]} ([in, out])")
            if c.get("use_bias", True) != (bias is not None):
                raise ImportFailure(f"{where}: use_bias is {c.get('use_bias', True)} but the file "
                                    f"{'has no' if bias is None else 'has a'} bias")
            if nhwc_flat is not None:
                # Keras' input k is pixel (h, w, c) flattened as (h*W + w)*C + c; the engine's is
                # (c*H + h)*W + w. Reorder the kernel's rows into the engine's order.
                kernel = kernel[nhwc_to_chw_rows(*nhwc_flat)]
                nhwc_flat = None
            add(lname, "dense", {"units": units}, {"weight": kernel.T, "bias": bias})  # [in,out] -> [out,in]
            shape = (units,)
            add_activation(lname, _act_name(c.get("activation", "linear"), where))
        elif cls == "Activation":
            act = _act_name(c.get("activation"), where)
            if act != "linear":
                if act == "softmax" and len(shape) != 1:
                    raise ImportFailure(f"{where}: softmax over a {len(shape)}-D map is not supported")
                add(lname, ACTIVATIONS[act])
        elif cls == "ReLU":
            if c.get("max_value") is not None or float(c.get("negative_slope", 0) or 0) != 0 \
                    or float(c.get("threshold", 0) or 0) != 0:
                raise ImportFailure(f"{where}: only ReLU without max_value, negative_slope, threshold is supported")
            add(lname, "relu")
        elif cls == "Softmax":
            if len(shape) != 1 or c.get("axis", -1) not in (-1, 1):
                raise ImportFailure(f"{where}: only softmax over the last axis of a flat value is supported")
            add(lname, "softmax")
        else:
            raise ImportFailure(f"{where}: no format-v1 op for this layer (supported: InputLayer, Conv2D, "
                                "MaxPooling2D, AveragePooling2D, ZeroPadding2D, Flatten, Dense, Activation, "
                                "ReLU, Softmax, Dropout)")
    if pending_pad is not None:
        raise ImportFailure("the model ends with a ZeroPadding2D layer")
    if nhwc_flat is not None:
        raise ImportFailure("the model's output is a flattened channels-last map, whose element order the "
                            "engine (which flattens channels first) does not reproduce")
    if used_weights != len(weights):
        raise ImportFailure(f"{kf.path} holds weights for {len(weights)} layers, the architecture uses "
                            f"{used_weights} ({', '.join(w[0] for w in weights[used_weights:])} left over)")
    if not nodes or (rank == 1 and len(nodes) == 1):
        raise ImportFailure("the model has no layers to export")
    if any(input_pad):
        spec["preprocess"]["pad"] = input_pad
        spec["preprocess"]["pad_value"] = 0.0
    graph = {"name": name}
    if description:
        graph["description"] = description
    graph.update({"weights": {"file": f"{name}.safetensors", "sha256": "0" * 64}, "input": spec})
    if labels is not None:
        graph["labels"] = list(labels)
    graph.update({"nodes": nodes, "outputs": [cur]})
    return graph, tensors, user_pad, rank


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
        kernel, bias = _kernel_bias(lname, arrays, names, str(kf.path))
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
            same = list(_same(x[1], k[0], s[0]) + _same(x[2], k[1], s[1]))
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

def keras_source(model_config: dict, weights: list[list[np.ndarray]], spec: dict, user_pad: list[int],
                 rank: int, label: str):
    """Raw uint8 [N, C, H, W] -> what the Keras model outputs, the input prepared as the user's code
    would: the stated scaling and padding, then channels-last ([N, H, W, C]), or flattened."""
    from . import keras_reference

    def run(batch: np.ndarray) -> np.ndarray:
        x = ic.user_preprocess(spec, user_pad, batch)
        if rank == 3:
            x = x.transpose(0, 2, 3, 1)
        elif rank == 2:
            x = x[:, 0]
        else:
            x = x.reshape(len(x), -1)
        return keras_reference.predict(model_config, weights, np.ascontiguousarray(x))
    return ic.labeled(run, label)


def load(args, like):
    """The `tools/export keras` loader: (graph, tensors, source runner or None)."""
    kf = KerasFile(args.source, getattr(args, "arch", None))
    name = ic.model_name(args, like)
    labels = ic.labels_arg(args, like)
    if kf.config is not None:
        description = args.description or f"imported from Keras {kf.keras_version} file {kf.path.name} ({kf.kind})"
        graph, tensors, user_pad, rank = graph_from_config(kf, args, like, name=name, labels=labels,
                                                           description=description)
        source = keras_source(kf.config, kf.weights_list(), graph["input"], user_pad, rank,
                              "Keras NumPy NHWC reference")
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
    from .export_cli import _common
    p = sub.add_parser(
        "keras", help="a Keras .h5 file: a whole model (model.save), or weights (model.save_weights) with "
                      "--arch MODEL.json or --like GRAPH.json",
        description="Import a Keras HDF5 file (Keras 2.2 to 2.15) without TensorFlow. Layers: InputLayer, "
                    "Conv2D (valid/same, strides), MaxPooling2D, AveragePooling2D, ZeroPadding2D, Flatten, "
                    "Dense, Activation, ReLU, Softmax, Dropout; activations linear, relu, tanh, sigmoid, "
                    "softmax. Keras files do not record input preprocessing: state it with --scale (default "
                    "1/255), --mean, --std and --pad. The check runs an independent NumPy NHWC "
                    "implementation of the Keras layers next to the exported graph and the engine.")
    p.add_argument("source", help="Keras HDF5 file (.h5)")
    p.add_argument("--arch", help="the architecture as Keras JSON (model.to_json()), for a weights-only file")
    p.add_argument("--pad", help="zero padding the user's code adds around each raw image before the model: P "
                                 "or T,B,L,R (default: the model's input size minus the image size, halved)")
    _common(p)
    p.set_defaults(load=load, export_checked=ic.export_checked)
