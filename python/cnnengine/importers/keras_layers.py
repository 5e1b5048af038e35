"""One handler per Keras layer class (`HANDLERS`), and the build state they share.

A handler takes the build (`KerasBuild`: the format nodes and tensors written so far, the weights,
the input's preprocessing) and one layer (`KerasLayer`: its config, its input values and the name
the error messages use), and returns the layer's output value.

Keras values are channels-last ([H, W, C], or flat in (h, w, c) order after a Flatten) and the
engine's channels-first: a value records both shapes, and the first Dense after a Flatten
permutes its kernel's rows. A BatchNormalization or Rescaling is folded into the Conv2D/Dense
just before it, else carried as a pending affine to the next layer that can take it exactly (a
Dense, a 'valid' Conv2D), else applied by a scale_shift node. A ZeroPadding2D is carried to the
Conv2D or AveragePooling2D after it, which takes it as its own padding.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import import_common as ic
from ..import_common import ImportFailure
from .layout import batchnorm_affine, fold_affine, nhwc_to_chw_rows, same_pads, window_out

CONV_LIKE = ("Conv2D", "MaxPooling2D", "AveragePooling2D", "ZeroPadding2D", "GlobalAveragePooling2D",
             "GlobalMaxPooling2D")
ACTIVATIONS = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "softmax": "softmax"}
IDENTITY_LAYERS = ("InputLayer", "Dropout", "SpatialDropout1D", "SpatialDropout2D", "GaussianNoise",
                   "GaussianDropout", "AlphaDropout", "ActivityRegularization")
SUPPORTED_LAYERS = ("InputLayer, Conv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D, "
                    "ZeroPadding2D, Flatten, Reshape, Dense, "
                    "Activation, ReLU, Softmax, BatchNormalization, Rescaling, Add, Concatenate (channel axis), "
                    "Dropout and the other inference no-ops (" + ", ".join(IDENTITY_LAYERS[2:]) + ")")
# Layers that take a pending scale and shift from their input (fold it, carry it, or apply it
# themselves); before any other layer a scale_shift node applies it.
TAKES_AFFINE = IDENTITY_LAYERS + ("BatchNormalization", "Rescaling", "Dense", "Conv2D", "MaxPooling2D",
                                  "AveragePooling2D", "Flatten", "GlobalAveragePooling2D", "GlobalMaxPooling2D",
                                  "Add", "Concatenate")
MULTI_INPUT = ("Add", "Concatenate")


# --------------------------------------------------------------------------------------------------
# Layer attributes and weights

def role(weight_name: str) -> str:
    """'conv2d/kernel:0' -> 'kernel'."""
    return weight_name.rsplit("/", 1)[-1].split(":", 1)[0]


def kernel_bias(lname: str, arrays: dict[str, np.ndarray], names: list[str], where: str):
    roles = {role(n): arrays[n] for n in names}
    if "kernel" in roles:
        kernel, bias = roles["kernel"], roles.get("bias")
        extra = sorted(set(roles) - {"kernel", "bias"})
    else:  # unusual names: Keras' own order is kernel, bias
        kernel, bias = arrays[names[0]], arrays[names[1]] if len(names) > 1 else None
        extra = names[2:]
    if extra:
        raise ImportFailure(f"{where}: weights layer '{lname}' has weights {', '.join(extra)} besides kernel and bias")
    return np.asarray(kernel, np.float32), None if bias is None else np.asarray(bias, np.float32)


def act_name(act, where: str) -> str:
    if isinstance(act, dict):  # newer serializations: {"class_name": "function", "config": "relu", ...}
        act = act.get("config") if act.get("class_name") == "function" else act.get("class_name", "")
    act = str(act).lower() if act is not None else "linear"
    if act == "linear":
        return "linear"
    if act not in ACTIVATIONS:
        raise ImportFailure(f"{where}: activation {act!r} has no format-v1 op (linear, relu, tanh, sigmoid, softmax)")
    return act


def pair(v, what, where) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ImportFailure(f"{where}: {what} {v!r} is not a pair")
    return int(v[0]), int(v[1])


def _bn_affine(c: dict, arrays: dict[str, np.ndarray], names: list[str], channels: int, where: str):
    """(scale, shift) in float64 of an inference-mode BatchNormalization."""
    roles = {role(n): arrays[n] for n in names}
    if not {"moving_mean", "moving_variance"} <= set(roles):
        # Keras 3 .keras files number the variables: gamma (if scale), beta (if center), mean, variance.
        order = (["gamma"] if c.get("scale", True) else []) + (["beta"] if c.get("center", True) else []) + \
            ["moving_mean", "moving_variance"]
        if len(order) != len(names):
            raise ImportFailure(f"{where}: {len(names)} weights, expected {len(order)} ({', '.join(order)})")
        roles = {r: arrays[n] for r, n in zip(order, names)}
    for r, v in roles.items():
        if v.shape != (channels,):
            raise ImportFailure(f"{where}: {r} has shape {list(v.shape)}, the input has {channels} channels")
    return batchnorm_affine(roles.get("gamma", np.ones(channels)), roles.get("beta", np.zeros(channels)),
                            roles["moving_mean"], roles["moving_variance"], float(c.get("epsilon", 1e-3)))


def _per_channel(v, n: int, what: str, where: str) -> np.ndarray:
    arr = np.asarray(v if v is not None else 0.0, np.float64).reshape(-1)
    if arr.size == 1:
        return np.full(n, float(arr[0]))
    if arr.size != n:
        raise ImportFailure(f"{where}: {what} has {arr.size} values for {n} channels")
    return arr


# --------------------------------------------------------------------------------------------------
# The build

@dataclasses.dataclass
class Value:
    """A Keras tensor during the conversion."""
    fv: str                      # the format value that holds it
    k: tuple                     # its Keras shape per sample: (H, W, C), or (K,)
    e: tuple                     # the engine shape of `fv`: [C, H, W] or [K]
    sole: bool = True            # only this Keras path reads `fv` (a BatchNormalization may rewrite its node)
    hwc: tuple | None = None     # a flat value in Keras' NHWC flatten order of this (H, W, C) map
    aff: tuple | None = None     # pending (scale, shift) over the last axis, to fold into the next linear layer
    aff_from: str | None = None  # the layer(s) that affine came from, for messages
    aff_name: str | None = None  # the first of those layers' name: a scale_shift node made of it is named so
    pad: list | None = None      # a ZeroPadding2D [t, b, l, r] waiting for the next Conv2D/AveragePooling2D


class KerasBuild:
    """The conversion's state: the format graph being written, the weights by layer name, the
    input's preprocessing (padding and a leading Rescaling that become part of it)."""

    def __init__(self, weights_path, by_layer: dict, spec: dict, user_pad: list[int], rescale_layer):
        self.weights_path = weights_path
        self.by_layer = by_layer
        self.used_weights: set[str] = set()
        self.spec = spec
        self.input_pad = list(user_pad)
        self.rescale_layer = rescale_layer
        self.rescale_fold = None  # (scale, offset) per channel of a leading Rescaling, folded into preprocessing
        self.nodes: list[dict] = []
        self.tensors: dict[str, np.ndarray] = {}
        self.node_by_name: dict[str, dict] = {}
        self.taken = {spec["name"]}

    def emit(self, lname, op, inputs, attrs=None, params=None) -> str:
        nname = ic.node_name(lname, op, self.taken)
        self.node_by_name[nname] = ic.append_node(self.nodes, self.tensors, nname, op, inputs, attrs, params)
        return nname

    def weights_of(self, lname, cls):
        if lname not in self.by_layer:
            raise ImportFailure(f"layer '{lname}' ({cls}) has weights but {self.weights_path} holds none for it")
        self.used_weights.add(lname)
        return self.by_layer[lname]

    def is_raw_input(self, v: Value) -> bool:
        """`v` is the model input itself, before any node."""
        return v.fv == self.spec["name"] and not self.nodes and v.sole

    def flat_value(self, v: Value) -> Value:
        """`v` as a rank-1 engine value (a flatten node when the engine holds a map)."""
        if len(v.e) == 1:
            return v
        node = self.emit("flatten", "flatten", [v.fv])
        return dataclasses.replace(v, fv=node, e=(int(np.prod(v.e)),), sole=True)

    def materialize_aff(self, v: Value) -> Value:
        """`v` with its pending scale and shift applied by a scale_shift node (where no linear layer can
        take them exactly), or `v` itself when none is pending."""
        if v is None or v.aff is None:
            return v
        scale, shift = v.aff
        if len(v.k) == 1 and len(v.e) != 1:
            v = self.flat_value(v)  # a flat Keras vector the engine still holds as a [1, H, W] map
        if v.hwc is not None:
            # Keras' flat order is (h, w, c), the engine's (c, h, w): per-feature values follow the engine's.
            perm = nhwc_to_chw_rows(*v.hwc)
            scale, shift = scale[perm], shift[perm]
        if len(scale) != v.e[0]:  # pragma: no cover - the per-channel vectors follow the value's channels
            raise ImportFailure(f"{v.aff_from}: {len(scale)} scales for a value of shape {list(v.e)}")
        node = self.emit(v.aff_name, "scale_shift", [v.fv],
                         params={"scale": scale.astype(np.float32), "shift": shift.astype(np.float32)})
        return dataclasses.replace(v, fv=node, sole=True, aff=None, aff_from=None, aff_name=None)

    def add_act(self, lname, act, v: Value) -> Value:
        if act == "linear":
            return v
        if act == "softmax" and len(v.k) != 1:
            raise ImportFailure(f"layer '{lname}': softmax over a {len(v.k)}-D map is not supported")
        node = self.emit(f"{lname}_{act}", ACTIVATIONS[act], [v.fv])
        return dataclasses.replace(v, fv=node, sole=True)


@dataclasses.dataclass
class KerasLayer:
    """One layer as the handlers read it: `v` its (only) input, `ins` all of them."""
    lay: dict
    cls: str
    c: dict
    lname: str
    where: str
    srcs: list
    ins: list
    v: Value | None


def _fold_affine_into(v: Value, kernel, bias):
    """Kernel and bias (Keras layouts) of the linear layer after a pending affine (a Conv2D takes it
    only without padding, which would otherwise see shifted zeros)."""
    scale, shift = v.aff
    k64 = kernel.astype(np.float64)
    b64 = np.zeros(kernel.shape[-1]) if bias is None else bias.astype(np.float64)
    if kernel.ndim == 2:  # Dense [in, out]: W (s*x + t) + b
        new_k, new_b = k64 * scale[:, None], b64 + shift @ k64
    else:  # Conv2D HWIO without padding: each input channel scaled and shifted
        new_k, new_b = k64 * scale[None, None, :, None], b64 + np.einsum("hwio,i->o", k64, shift)
    return new_k.astype(np.float32), new_b.astype(np.float32)


def _kernel_bias_of(b: KerasBuild, L: KerasLayer):
    wname, arrays, names = b.weights_of(L.lname, L.cls)
    return kernel_bias(wname, arrays, names, f"{b.weights_path}")


def _check_kernel_bias(L: KerasLayer, kernel, bias, want: tuple, layout: str) -> None:
    """The kernel has shape `want`; the bias is there exactly when use_bias says."""
    if kernel.shape != want:
        raise ImportFailure(f"{L.where}: kernel has shape {list(kernel.shape)}, the layer needs {list(want)} ({layout})")
    if L.c.get("use_bias", True) != (bias is not None):
        raise ImportFailure(f"{L.where}: use_bias is {L.c.get('use_bias', True)} but the file "
                            f"{'has no' if bias is None else 'has a'} bias")


def _window_pads(L: KerasLayer, h: int, w: int, kernel, stride):
    """(pads [t, b, l, r], out height, out width) of a window layer's 'valid' or 'same' padding."""
    padding = L.c.get("padding", "valid")
    if padding == "valid":
        pads = [0, 0, 0, 0]
    elif padding == "same":
        pads = list(same_pads(h, kernel[0], stride[0]) + same_pads(w, kernel[1], stride[1]))
    else:
        raise ImportFailure(f"{L.where}: padding {padding!r} is not supported (valid, same)")
    return (pads, *window_out(h, w, kernel, stride, pads))


# --------------------------------------------------------------------------------------------------
# The handlers

def _identity(b: KerasBuild, L: KerasLayer) -> Value:
    """Dropout and the other layers that do nothing at inference."""
    return L.v


def _zero_padding(b: KerasBuild, L: KerasLayer) -> Value:
    """Of the raw input: the input's preprocess pad; else carried to the next Conv2D/AveragePooling2D."""
    v, where = L.v, L.where
    p = L.c.get("padding", 1)
    if isinstance(p, int):
        t = bo = l = r = p
    else:
        (t, bo), (l, r) = (pair(p[0], "padding", where), pair(p[1], "padding", where)) \
            if isinstance(p[0], (list, tuple)) else ((p[0], p[0]), (p[1], p[1]))
    if v.pad is not None:
        raise ImportFailure(f"{where}: two ZeroPadding2D layers in a row are not supported")
    k_new = (v.k[0] + t + bo, v.k[1] + l + r, v.k[2])
    if b.is_raw_input(v) and b.rescale_fold is None:
        b.input_pad = [a_ + q for a_, q in zip(b.input_pad, (t, bo, l, r))]
        return Value(b.spec["name"], k_new, (k_new[2], k_new[0], k_new[1]))
    return dataclasses.replace(v, k=k_new, pad=[t, bo, l, r])


def _conv2d(b: KerasBuild, L: KerasLayer) -> Value:
    c, where, v = L.c, L.where, L.v
    if pair(c.get("dilation_rate", 1), "dilation_rate", where) != (1, 1) or c.get("groups", 1) != 1:
        raise ImportFailure(f"{where}: only dilation_rate 1 and groups 1 are supported")
    kernel, bias = _kernel_bias_of(b, L)
    kh, kw = pair(c["kernel_size"], "kernel_size", where)
    sh, sw = pair(c.get("strides", 1), "strides", where)
    h, w, ch = v.k
    _check_kernel_bias(L, kernel, bias, (kh, kw, ch, c["filters"]), "HWIO")
    pads, oh, ow = _window_pads(L, h, w, (kh, kw), (sh, sw))
    if v.aff is not None and (c.get("padding", "valid") != "valid" or v.pad is not None):
        # Padding would see shifted zeros: the scale and shift run before the convolution.
        v = b.materialize_aff(v)
    if v.aff is not None:
        kernel, bias = _fold_affine_into(v, kernel, bias)
    if v.pad:  # `v.k` already includes the pending ZeroPadding2D, which the node's padding absorbs
        pads = [a_ + q for a_, q in zip(pads, v.pad)]
    filters = int(c["filters"])
    node = b.emit(L.lname, "conv2d", [v.fv], {"out_channels": filters, "kernel": [kh, kw], "stride": [sh, sw],
                                              "padding": pads},
                  {"weight": kernel.transpose(3, 2, 0, 1), "bias": bias})  # HWIO -> OIHW
    out = Value(node, (oh, ow, filters), (filters, oh, ow))
    return b.add_act(L.lname, act_name(c.get("activation", "linear"), where), out)


def _without_negative_scale(b: KerasBuild, v: Value) -> Value:
    """`v` with a pending affine applied unless all its scales are positive (which commute with the
    maximum)."""
    if v.aff is not None and not np.all(v.aff[0] > 0):
        return b.materialize_aff(v)
    return v


def _global_pool(b: KerasBuild, L: KerasLayer) -> Value:
    """GlobalAveragePooling2D, GlobalMaxPooling2D: a pool whose window is the whole map."""
    v = L.v
    h, w, ch = v.k
    is_max = L.cls == "GlobalMaxPooling2D"
    if is_max:
        v = _without_negative_scale(b, v)
    if v.pad is not None:
        raise ImportFailure(f"{L.where}: a ZeroPadding2D before global pooling is not supported")
    attrs = {"kernel": [h, w], "stride": [1, 1], "padding": [0, 0, 0, 0]}
    if not is_max:
        attrs["count_include_pad"] = False
    node = b.emit(L.lname, "maxpool" if is_max else "avgpool", [v.fv], attrs)
    pooled = Value(node, (1, 1, ch), (ch, 1, 1), aff=v.aff, aff_from=v.aff_from, aff_name=v.aff_name)
    if L.c.get("keepdims", False):
        return pooled
    # [C]: the flatten of a 1x1 map has the same order in Keras and the engine
    return dataclasses.replace(pooled, fv=b.emit(f"{L.lname}_flatten", "flatten", [node]), k=(ch,), e=(ch,))


def _pool(b: KerasBuild, L: KerasLayer) -> Value:
    """MaxPooling2D, AveragePooling2D (TensorFlow averages over the positions inside the input:
    'same' padding excluded, a ZeroPadding2D before included)."""
    c, where, v = L.c, L.where, L.v
    kh, kw = pair(c.get("pool_size", 2), "pool_size", where)
    sh, sw = pair(c.get("strides") or (kh, kw), "strides", where)
    h, w, ch = v.k
    pads, oh, ow = _window_pads(L, h, w, (kh, kw), (sh, sw))
    if L.cls == "MaxPooling2D":
        v = _without_negative_scale(b, v)
        attrs = {"kernel": [kh, kw], "stride": [sh, sw], "padding": pads}
        op = "maxpool"
    else:
        include = False
        if v.pad:
            if c.get("padding", "valid") != "valid":
                raise ImportFailure(f"{where}: a ZeroPadding2D before 'same' average pooling is not supported")
            pads, include = list(v.pad), True
        attrs = {"kernel": [kh, kw], "stride": [sh, sw], "padding": pads, "count_include_pad": include}
        op = "avgpool"
    if oh < 1 or ow < 1:
        raise ImportFailure(f"{where}: pool {kh}x{kw} does not fit the {h}x{w} input")
    node = b.emit(L.lname, op, [v.fv], attrs)
    # A per-channel affine commutes with averaging and (positive scales) with the maximum.
    return Value(node, (oh, ow, ch), (ch, oh, ow), aff=v.aff, aff_from=v.aff_from, aff_name=v.aff_name)


def _reshape_target(L: KerasLayer) -> list[int]:
    """The per-sample shape a Flatten or Reshape produces (a -1 resolved)."""
    v, c = L.v, L.c
    if L.cls != "Reshape":
        return [int(np.prod(v.k))]
    target = [int(d) for d in c["target_shape"]]
    total = int(np.prod(v.k))
    if target.count(-1) == 1:
        known = int(np.prod([d for d in target if d != -1]))
        target[target.index(-1)] = total // known if known else 0
    if int(np.prod(target)) != total:
        raise ImportFailure(f"{L.where}: cannot reshape {list(v.k)} to {c['target_shape']}")
    return target


def _reshape(b: KerasBuild, L: KerasLayer) -> Value:
    """Flatten and Reshape: to a flat vector (a flatten node, in Keras' (h, w, c) order noted), or
    a flat model input to the [H, W] or [H, W, 1] image it is (nothing to compute)."""
    v, c, where = L.v, L.c, L.where
    target = _reshape_target(L)
    if len(target) == 1:  # to a flat vector: a Flatten
        if len(v.k) != 3:
            return v
        h, w, ch = v.k
        aff = None if v.aff is None else (np.tile(v.aff[0], h * w), np.tile(v.aff[1], h * w))
        node = b.emit(L.lname, "flatten", [v.fv])
        return dataclasses.replace(v, fv=node, e=(h * w * ch,), k=(h * w * ch,), sole=True,
                                   hwc=(h, w, ch) if ch > 1 and h * w > 1 else None, aff=aff)
    # To a map: [H, W] or [H, W, C] (Keras channels last).
    t3 = tuple(target) + (1,) if len(target) == 2 else tuple(target)
    if len(t3) != 3:
        raise ImportFailure(f"{where}: reshape to {c['target_shape']} is not supported (only to [K], "
                            "[H, W] or [H, W, C])")
    v = b.materialize_aff(v)
    if len(v.k) == 3 and tuple(v.k) == t3:
        return v
    if len(v.k) == 1 and v.hwc is None and len(v.e) == 3 and tuple(v.e) == (t3[2], t3[0], t3[1]) \
            and (t3[2] == 1 or tuple(v.e) == (1,) + tuple(v.e[1:])):
        # The flat vector is the engine's [1, H, W] map read row by row: nothing to do.
        return dataclasses.replace(v, k=t3)
    raise ImportFailure(f"{where}: reshape of {list(v.k)} to {c['target_shape']} has no format-v1 "
                        "op; supported: a flat model input (e.g. 784) to [H, W] or [H, W, 1] matching "
                        f"the raw image {b.spec['shape']}, and any map to a flat vector")


def _dense(b: KerasBuild, L: KerasLayer) -> Value:
    c, where, v = L.c, L.where, L.v
    if len(v.k) != 1:
        raise ImportFailure(f"{where}: Dense on a {len(v.k)}-D input (Keras applies it per position); "
                            "only Dense after Flatten (or on a flat input) is supported")
    kernel, bias = _kernel_bias_of(b, L)
    units = int(c["units"])
    _check_kernel_bias(L, kernel, bias, (v.k[0], units), "[in, out]")
    if v.aff is not None:
        kernel, bias = _fold_affine_into(v, kernel, bias)
    if v.hwc is not None:
        # Keras' input k is pixel (h, w, c) flattened as (h*W + w)*C + c; the engine's is
        # (c*H + h)*W + w. Reorder the kernel's rows into the engine's order.
        kernel = kernel[nhwc_to_chw_rows(*v.hwc)]
    x = b.flat_value(v)
    node = b.emit(L.lname, "dense", [x.fv], {"units": units}, {"weight": kernel.T, "bias": bias})
    return b.add_act(L.lname, act_name(c.get("activation", "linear"), where), Value(node, (units,), (units,)))


def _affine(b: KerasBuild, L: KerasLayer) -> Value:
    """BatchNormalization and Rescaling: a per-channel scale and shift, which becomes the input
    preprocessing (a leading Rescaling), folds into the Conv2D/Dense just before, or is carried to
    the next layer."""
    c, where, v = L.c, L.where, L.v
    channels = v.k[-1]
    if L.cls == "BatchNormalization":
        axis = c.get("axis", -1)
        axis = axis[0] if isinstance(axis, (list, tuple)) and len(axis) == 1 else axis
        if axis not in (-1, len(v.k)):
            raise ImportFailure(f"{where}: normalizes axis {c.get('axis')}; only the channel (last) axis "
                                "is supported")
        wname, arrays, names = b.weights_of(L.lname, L.cls)
        scale, shift = _bn_affine(c, arrays, names, channels, where)
    else:
        scale = _per_channel(c.get("scale", 1.0), channels, "scale", where)
        shift = _per_channel(c.get("offset", 0.0), channels, "offset", where)
    prod = b.node_by_name.get(v.fv)
    if L.lay is b.rescale_layer and b.is_raw_input(v) and not any(b.input_pad) and v.pad is None and v.aff is None:
        if not np.all(scale > 0):
            raise ImportFailure(f"{where}: a non-positive scale cannot become the input preprocessing")
        b.rescale_fold = (scale, shift)
        return v
    if v.aff is None and v.pad is None and v.sole and prod is not None and \
            prod["op"] in ("conv2d", "dense") and len(L.srcs) == 1:
        # Into the Conv2D/Dense just before: y = s * (W x + b) + t.
        fold_affine(prod, b.tensors, scale, shift)
        return v
    # Carried to the next linear layer.
    if v.aff is not None:
        scale, shift = v.aff[0] * scale, v.aff[1] * scale + shift
    src_txt = f"{where}" if v.aff is None else f"{v.aff_from} and {where}"
    return dataclasses.replace(v, aff=(scale, shift), aff_from=src_txt,
                               aff_name=v.aff_name if v.aff is not None else L.lname)


def _activation(b: KerasBuild, L: KerasLayer) -> Value:
    v, where = L.v, L.where
    act = act_name(L.c.get("activation"), where)
    if act == "linear":
        return v
    if act == "softmax" and len(v.k) != 1:
        raise ImportFailure(f"{where}: softmax over a {len(v.k)}-D map is not supported")
    x = b.flat_value(v) if act == "softmax" else v
    return dataclasses.replace(x, fv=b.emit(L.lname, ACTIVATIONS[act], [x.fv]), sole=True)


def _relu(b: KerasBuild, L: KerasLayer) -> Value:
    c = L.c
    if c.get("max_value") is not None or float(c.get("negative_slope", 0) or 0) != 0 \
            or float(c.get("threshold", 0) or 0) != 0:
        raise ImportFailure(f"{L.where}: only ReLU without max_value, negative_slope, threshold is supported")
    return dataclasses.replace(L.v, fv=b.emit(L.lname, "relu", [L.v.fv]), sole=True)


def _softmax(b: KerasBuild, L: KerasLayer) -> Value:
    if len(L.v.k) != 1 or L.c.get("axis", -1) not in (-1, 1):
        raise ImportFailure(f"{L.where}: only softmax over the last axis of a flat value is supported")
    x = b.flat_value(L.v)
    return dataclasses.replace(x, fv=b.emit(L.lname, "softmax", [x.fv]), sole=True)


def _no_pending_pad(L: KerasLayer) -> None:
    for x in L.ins:
        if x.pad is not None:
            raise ImportFailure(f"{L.where}: an input still carries a ZeroPadding2D, which only a following "
                                "Conv2D or AveragePooling2D can take")


def _add(b: KerasBuild, L: KerasLayer) -> Value:
    where = L.where
    if len(L.ins) != 2:
        raise ImportFailure(f"{where}: adds {len(L.ins)} tensors; only 2 are supported")
    _no_pending_pad(L)
    a_, b_ = [b.materialize_aff(x) for x in L.ins]
    if a_.k != b_.k or a_.hwc != b_.hwc:
        raise ImportFailure(f"{where}: adds shapes {list(a_.k)} and {list(b_.k)}; only equal shapes")
    if len(a_.e) != len(b_.e):
        a_, b_ = b.flat_value(a_), b.flat_value(b_)
    node = b.emit(L.lname, "add", [a_.fv, b_.fv])
    return Value(node, a_.k, a_.e, hwc=a_.hwc)


def _concatenate(b: KerasBuild, L: KerasLayer) -> Value:
    """A concat node along the engine's channels: Keras' channel axis of [H, W, C] maps, or the
    feature axis of flat vectors (axis -1 either way, with the batch axis counted)."""
    where, ins = L.where, L.ins
    if len(ins) < 2:
        raise ImportFailure(f"{where}: concatenates {len(ins)} tensor; format v1's concat needs 2 or more")
    ins = [b.materialize_aff(x) for x in ins]
    _no_pending_pad(L)
    rank = len(ins[0].k)
    if any(len(x.k) != rank for x in ins):
        raise ImportFailure(f"{where}: concatenates tensors of shapes {[list(x.k) for x in ins]}; "
                            "their ranks differ")
    axis = L.c.get("axis", -1)
    if axis not in (-1, rank):
        raise ImportFailure(f"{where}: concatenates along axis {axis} of {[list(x.k) for x in ins]}; format "
                            "v1's concat joins channels only (axis -1 of [H, W, C] maps, or of flat vectors)")
    if any(tuple(x.k[:-1]) != tuple(ins[0].k[:-1]) for x in ins):
        raise ImportFailure(f"{where}: concatenates shapes {[list(x.k) for x in ins]}; all but the last "
                            "dimension must be equal")
    if rank == 1:
        if any(x.hwc is not None for x in ins):
            raise ImportFailure(f"{where}: concatenates flattened channels-last maps, whose element order the "
                                "engine (which flattens channels first) does not keep across the join; "
                                "rewrite: concatenate the maps along channels, then Flatten")
        ins = [b.flat_value(x) for x in ins]
    total = int(sum(x.k[-1] for x in ins))
    node = b.emit(L.lname, "concat", [x.fv for x in ins])
    if rank == 1:
        return Value(node, (total,), (total,))
    if rank != 3:  # pragma: no cover - Keras tensors here are flat vectors or [H, W, C] maps
        raise ImportFailure(f"{where}: concatenates rank-{rank} tensors")
    h, w = ins[0].k[0], ins[0].k[1]
    return Value(node, (h, w, total), (total, h, w))


HANDLERS = {
    **{cls: _identity for cls in IDENTITY_LAYERS},
    "ZeroPadding2D": _zero_padding, "Conv2D": _conv2d,
    "GlobalAveragePooling2D": _global_pool, "GlobalMaxPooling2D": _global_pool,
    "MaxPooling2D": _pool, "AveragePooling2D": _pool, "Flatten": _reshape, "Reshape": _reshape,
    "Dense": _dense, "BatchNormalization": _affine, "Rescaling": _affine, "Activation": _activation,
    "ReLU": _relu, "Softmax": _softmax, "Add": _add, "Concatenate": _concatenate,
}
