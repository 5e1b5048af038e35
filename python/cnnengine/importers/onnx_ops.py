"""One handler per ONNX op type on the data path (`HANDLERS`), and the build state they share.

A handler takes the build (`OnnxBuild`: the format nodes and tensors written so far, the ONNX
values computed per sample, the constants) and one node (`OnnxNode`: its inputs, attributes and
the name the error messages use), and records the node's output in `build.data`.
"""
from __future__ import annotations

import numpy as np

from .. import import_common as ic
from .. import onnx_reference
from ..import_common import ImportFailure
from .layout import batchnorm_affine, fold_affine, nhwc_to_chw_rows, same_pads, window_out

BATCH = 1_000_000_007  # stands for the (unknown) batch size in folded shapes


class Data:
    """A value computed per sample: the format value that holds it, its per-sample shape in the
    engine, and how the ONNX graph sees that value (`layout`):
      "nchw"     as the engine does ([C, H, W], or [K]);
      "nhwc"     an engine [C, H, W] map that the ONNX graph holds channels-last as [H, W, C]
                 (tf2onnx and keras2onnx exports of Keras models, around a Transpose);
      "hw"       an engine [1, H, W] map that the ONNX graph holds as [H, W];
      "raw_flat" the engine's raw [C, H, W] input that the ONNX graph holds flat as [C*H*W]
                 (a flatten node is emitted only where a flat value is needed).
    `hwc` = (H, W, C): a flat value in the NHWC order of that map (the first Gemm/MatMul permutes
    its weight columns, as for Keras' flatten)."""

    def __init__(self, value: str | None, shape: tuple[int, ...], pad=None, src=None, layout="nchw", hwc=None):
        self.value = value      # format value name (None for a pending pad)
        self.shape = shape
        self.pad = pad          # [t, b, l, r] of a Pad not yet folded into its consumer
        self.src = src          # the Data a pending pad applies to
        self.layout = layout
        self.hwc = hwc

    def onnx_shape(self) -> tuple[int, ...]:
        if self.layout == "nhwc":
            return (self.shape[1], self.shape[2], self.shape[0])
        if self.layout == "hw":
            return tuple(self.shape[1:])
        if self.layout == "raw_flat":
            return (int(np.prod(self.shape)),)
        return self.shape


def ints(v, n, default):
    return [int(x) for x in v] if v is not None else [default] * n


class OnnxBuild:
    """The conversion's state: the format graph being written and what each ONNX value is."""

    def __init__(self, spec: dict, user_pad: list[int], opset: int, static_batch: int | None,
                 consts: dict[str, np.ndarray], consumers: dict[str, int]):
        self.spec = spec
        self.input_pad, self.pad_value = list(user_pad), 0.0
        self.opset = opset
        self.static_batch = static_batch
        self.consts = consts
        self.consumers = consumers
        self.nodes: list[dict] = []
        self.tensors: dict[str, np.ndarray] = {}
        self.taken = {spec["name"]}
        self.data: dict[str, Data] = {}
        # ONNX value -> conv2d/dense node whose output it is (and nothing else reads): a constant Add,
        # Sub, Mul, Div or a BatchNormalization after it folds into that node's weight and bias.
        self.foldable: dict[str, dict] = {}

    def emit(self, onnx_node, op, x: Data, attrs=None, params=None, extra_inputs=()):
        nname = ic.node_name(onnx_node.name or onnx_node.output[0], op, self.taken)
        return ic.append_node(self.nodes, self.tensors, nname, op, [x.value, *extra_inputs], attrs, params)

    def as_flat_or_map(self, x: Data) -> Data:
        """`x` with an engine value shaped as the ONNX graph sees it (raw_flat gets its flatten)."""
        if x.layout != "raw_flat":
            return x
        node = ic.append_node(self.nodes, self.tensors, ic.node_name("flatten", "flatten", self.taken), "flatten",
                              [x.value])
        return Data(node["name"], (int(np.prod(x.shape)),))

    def to_flat(self, onnx_node, x: Data) -> Data:
        """An ONNX flatten of `x` to [N, K]: the engine's flatten, and the NHWC order noted."""
        if x.layout == "raw_flat" or len(x.shape) == 1:
            return x
        node = self.emit(onnx_node, "flatten", x)
        h, w, c = x.onnx_shape() if x.layout == "nhwc" else (0, 0, 1)
        hwc = (h, w, c) if x.layout == "nhwc" and c > 1 and h * w > 1 else None
        return Data(node["name"], (int(np.prod(x.shape)),), hwc=hwc)

    def set_output(self, out: str, node: dict) -> None:
        """`node` (conv2d or dense) computes ONNX value `out`: an affine after it may fold into it."""
        if self.consumers.get(out, 0) == 1:
            self.foldable[out] = node


class OnnxNode:
    """One ONNX node as the handlers read it."""

    def __init__(self, build: OnnxBuild, n, idx: int):
        self.n = n
        self.op = n.op_type
        self.where = f"ONNX node '{n.name or '#' + str(idx)}' (op {self.op}, output '{n.output[0] if n.output else ''}')"
        self.ins = list(n.input)
        self.a = onnx_reference._attrs(n)
        self.is_data = [bool(v) and v in build.data for v in self.ins]
        self.out = n.output[0] if n.output else None
        self._build = build

    def fail(self, text: str) -> ImportFailure:
        return ImportFailure(f"{self.where}: {text}")

    def const(self, i, what):
        ins = self.ins
        if i >= len(ins) or not ins[i]:
            return None
        if ins[i] not in self._build.consts:
            raise self.fail(f"{what} ('{ins[i]}') must be a constant (an initializer), not a computed value")
        return self._build.consts[ins[i]]

    def first_data(self) -> Data:
        if not self.is_data[0]:
            raise self.fail("its first input must be the computed value")
        return self._build.data[self.ins[0]]

    def resolved(self, x: Data) -> Data:
        """`x`, which must carry no pending Pad."""
        if x.pad is not None:
            raise self.fail(f"a Pad can only be folded into a following Conv or AveragePool, not into {self.op}")
        return x

    def ready(self, i: int = 0) -> Data:
        """Input `i` (a computed value) without a pending Pad, as the ONNX graph shapes it."""
        x = self.first_data() if i == 0 else self._build.data[self.ins[i]]
        return self._build.as_flat_or_map(self.resolved(x))


def _need_map(node: OnnxNode, x: Data) -> None:
    if len(x.shape) != 3 or x.layout != "nchw":
        raise node.fail(f"needs an [N, C, H, W] input, gets per-sample {list(x.onnx_shape())}"
                        + (" (channels last: a Transpose(0, 3, 1, 2) is missing)" if x.layout == "nhwc" else ""))


def _window_pads(node: OnnxNode, h: int, w: int, kernel, strides) -> list[int]:
    """[t, b, l, r] of a Conv/pool's own padding (auto_pad or pads) over an h x w input."""
    a = node.a
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        up = auto == "SAME_UPPER"
        return [*same_pads(h, kernel[0], strides[0], up), *same_pads(w, kernel[1], strides[1], up)]
    if auto == "VALID":
        return [0, 0, 0, 0]
    if auto == "NOTSET":
        t, l, bo, r = ints(a.get("pads"), 4, 0)  # ONNX: [x1_begin, x2_begin, x1_end, x2_end]
        return [t, bo, l, r]
    raise node.fail(f"auto_pad {auto!r} is not supported")


def _window_op(b: OnnxBuild, node: OnnxNode) -> None:
    """Conv, MaxPool, AveragePool; a zero Pad just before becomes part of the node's padding."""
    op, a = node.op, node.a
    x = node.first_data()
    pre_pad = [0, 0, 0, 0]
    if x.pad is not None:
        pre_pad, x = x.pad, x.src
    _need_map(node, x)
    if op == "Conv":
        w, bias = node.const(1, "the weight"), node.const(2, "the bias")
        if a.get("group", 1) != 1:
            raise node.fail(f"group={a['group']} is not supported (only 1)")
        if w.ndim != 4 or w.shape[1] != x.shape[0]:
            raise node.fail(f"weight {list(w.shape)} does not fit input channels {x.shape[0]}")
        kernel = [int(w.shape[2]), int(w.shape[3])]
        if "kernel_shape" in a and list(a["kernel_shape"]) != kernel:
            raise node.fail(f"kernel_shape {a['kernel_shape']} differs from the weight's {kernel}")
    else:
        if "kernel_shape" not in a or len(a["kernel_shape"]) != 2:
            raise node.fail("needs a 2-D kernel_shape")
        kernel = [int(k) for k in a["kernel_shape"]]
        if a.get("ceil_mode", 0):
            raise node.fail("ceil_mode=1 is not supported")
        if op == "MaxPool" and a.get("storage_order", 0):
            raise node.fail("storage_order=1 is not supported")
    if ints(a.get("dilations"), 2, 1) != [1, 1]:
        raise node.fail(f"dilations {a.get('dilations')} are not supported (only 1)")
    strides = ints(a.get("strides"), 2, 1)
    h, w_ = x.shape[1] + pre_pad[0] + pre_pad[1], x.shape[2] + pre_pad[2] + pre_pad[3]
    own = _window_pads(node, h, w_, kernel, strides)
    pads = [p + q for p, q in zip(own, pre_pad)]
    if op == "Conv":
        out = b.emit(node.n, "conv2d", x, {"out_channels": int(w.shape[0]), "kernel": kernel, "stride": strides,
                                           "padding": pads}, {"weight": w, "bias": bias})
        channels = int(w.shape[0])
    elif op == "MaxPool":
        if any(pre_pad):
            raise node.fail("a zero Pad before MaxPool is not its padding (-inf); not supported")
        out = b.emit(node.n, "maxpool", x, {"kernel": kernel, "stride": strides, "padding": pads})
        channels = x.shape[0]
    else:
        include = bool(a.get("count_include_pad", 0))
        if any(pre_pad):
            if any(own) and not include:
                raise node.fail("a Pad before AveragePool with its own pads and count_include_pad=0 is not supported")
            include = True
        out = b.emit(node.n, "avgpool", x, {"kernel": kernel, "stride": strides, "padding": pads,
                                            "count_include_pad": include})
        channels = x.shape[0]
    oh, ow = window_out(h, w_, kernel, strides, own)
    if oh < 1 or ow < 1:
        raise node.fail(f"window {kernel} does not fit the {h}x{w_} input")
    b.data[node.out] = Data(out["name"], (channels, oh, ow))
    if op == "Conv":
        b.set_output(node.out, out)


def _linear(b: OnnxBuild, node: OnnxNode) -> None:
    """Gemm and MatMul with a constant B: a dense node (its columns permuted for an NHWC flatten)."""
    a = node.a
    x = node.ready()
    if len(x.shape) != 1:
        raise node.fail(f"needs a 2-D [N, K] input, gets per-sample {list(x.shape)} (Flatten first)")
    B = node.const(1, "B")
    if B.ndim != 2:
        raise node.fail(f"B has shape {list(B.shape)}, a 2-D constant is needed")
    if node.op == "Gemm":
        if a.get("transA", 0):
            raise node.fail("transA=1 is not supported")
        weight = B if a.get("transB", 0) else B.T
        weight = weight * np.float32(a.get("alpha", 1.0)) if a.get("alpha", 1.0) != 1.0 else weight
        C = node.const(2, "C")
        bias = None
        if C is not None:
            if C.ndim == 2 and C.shape[0] != 1:
                raise node.fail(f"C of shape {list(C.shape)} is not a per-unit bias")
            bias = np.broadcast_to(C.reshape(-1) if C.ndim == 2 else C, (weight.shape[0],)) \
                * np.float32(a.get("beta", 1.0))
    else:
        weight, bias = B.T, None
    if weight.shape[1] != x.shape[0]:
        raise node.fail(f"weight takes {weight.shape[1]} inputs, the value has {x.shape[0]}")
    if x.hwc is not None:
        # The ONNX input index of engine feature (c, h, w) is (h, w, c): permute the columns.
        weight = weight[:, nhwc_to_chw_rows(*x.hwc)]
    out = b.emit(node.n, "dense", x, {"units": int(weight.shape[0])}, {"weight": weight, "bias": bias})
    b.data[node.out] = Data(out["name"], (int(weight.shape[0]),))
    b.set_output(node.out, out)


def _add(b: OnnxBuild, node: OnnxNode) -> None:
    """Add of two computed values: an add node; with a constant operand: an affine."""
    if not all(node.is_data[:2]):
        _affine(b, node)
        return
    x, y = node.ready(0), node.ready(1)
    if x.shape != y.shape or x.layout != y.layout or x.hwc != y.hwc:
        raise node.fail(f"adds per-sample shapes {list(x.onnx_shape())} and {list(y.onnx_shape())}; "
                        "only equal shapes are supported")
    out = b.emit(node.n, "add", x, extra_inputs=(y.value,))
    b.data[node.out] = Data(out["name"], x.shape, layout=x.layout, hwc=x.hwc)


def _channels_of_node(node: dict) -> int:
    return node["attrs"]["out_channels"] if node["op"] == "conv2d" else node["attrs"]["units"]


def _per_channel_of_node(node: dict, b, where, what):
    """A constant broadcast against `node`'s output ([N, C, H, W] or [N, units]) as one value
    per channel/unit; anything that varies along another axis is an error."""
    n_out = _channels_of_node(node)
    b = np.asarray(b, np.float64)
    rank = 4 if node["op"] == "conv2d" else 2
    dims = (1,) * (rank - b.ndim) + tuple(b.shape) if b.ndim <= rank else None
    if dims is None or dims[0] != 1 or dims[1] not in (1, n_out) or any(d != 1 for d in dims[2:]):
        raise ImportFailure(f"{where}: {what} of shape {list(b.shape)} is not one value per channel of "
                            f"'{node['name']}' ({n_out} channels)")
    return np.broadcast_to(b.reshape(-1), (n_out,)).copy() if b.size == 1 else b.reshape(-1).copy()


def _per_channel_of_value(x: Data, b, where, what):
    """A constant broadcast against the computed value `x` as one value per engine channel (or
    feature of a flat value), in the engine's order; anything else is an error."""
    b = np.asarray(b, np.float64)
    shape = x.onnx_shape()
    n_ch = x.shape[0]
    if b.size == 1:
        return np.full(n_ch, float(b.reshape(-1)[0]))
    dims = (1,) * (len(shape) + 1 - b.ndim) + tuple(b.shape) if b.ndim <= len(shape) + 1 else None
    if x.layout == "nhwc":  # channels are ONNX's last axis
        ok = dims is not None and dims[-1] == n_ch and all(d == 1 for d in dims[:-1])
    elif x.layout == "nchw":  # channels (or features) are ONNX's axis 1
        ok = dims is not None and dims[0] == 1 and dims[1] == n_ch and all(d == 1 for d in dims[2:])
    else:
        ok = False
    if not ok:
        raise ImportFailure(f"{where}: {what} of shape {list(b.shape)} is not one value per channel of the "
                            f"per-sample {list(shape)} value it applies to")
    v = b.reshape(-1).copy()
    if x.hwc is not None:
        # A flat value in NHWC order: the engine's feature (c, h, w) is ONNX's (h, w, c).
        v = v[nhwc_to_chw_rows(*x.hwc)]
    return v


def _batchnorm_scale_shift(node: OnnxNode, di: int, channels: int):
    a, n = node.a, node.n
    if di != 0 or len(n.output) > 1 and any(n.output[1:]) or a.get("training_mode", 0):
        raise node.fail("only inference-mode BatchNormalization (one output) is supported")

    def param(i, what):
        # BatchNormalization's parameters are 1-D, one per channel (ONNX axis 1), not broadcast.
        v = np.asarray(node.const(i, what), np.float64)
        if v.ndim != 1 or v.shape[0] != channels:
            raise node.fail(f"{what} has shape {list(v.shape)}, expected [{channels}] (one per channel)")
        return v
    gamma, beta, mean, var = (param(i, nm) for i, nm in ((1, "scale"), (2, "B"), (3, "mean"), (4, "var")))
    return batchnorm_affine(gamma, beta, mean, var, float(a.get("epsilon", 1e-5)))


def _constant_scale_shift(node: OnnxNode, di: int, cst: np.ndarray):
    """(scale, shift) of x op c (or c op x) for Add, Sub, Mul, Div with a per-channel constant."""
    op = node.op
    ones = np.ones_like(cst)
    if op == "Add":
        return ones, cst
    if op == "Sub" and di == 0:
        return ones, -cst
    if op == "Sub":
        return -ones, cst  # constant - x
    if op == "Mul":
        return cst, np.zeros_like(cst)
    if op == "Div" and di == 0:
        return 1.0 / cst, np.zeros_like(cst)
    raise node.fail("a constant divided by a computed value is not supported")


def _affine(b: OnnxBuild, node: OnnxNode) -> None:
    """A per-channel constant affine (Add, Sub, Mul, Div of a constant; BatchNormalization): folded
    into the Conv or Gemm/MatMul just before it when nothing else reads that node's output (CNTK's
    separate bias Add, MatMul + Add, an exported BatchNormalization after a convolution), else a
    scale_shift node (BatchNorm after pooling)."""
    op = node.op
    di = 0 if node.is_data[0] else 1
    src = node.ins[di]
    prod = b.foldable.pop(src, None)
    x = None
    if prod is None:
        x = b.as_flat_or_map(node.resolved(b.data[src]))
        if op == "BatchNormalization" and x.layout != "nchw":
            raise node.fail(f"a BatchNormalization of a value the graph holds as {list(x.onnx_shape())} "
                            f"({x.layout}) normalizes axis 1, which is not the engine's channel axis here")
    if op == "BatchNormalization":
        scale, shift = _batchnorm_scale_shift(node, di, x.shape[0] if prod is None else _channels_of_node(prod))
    else:
        what = f"the {op} operand"
        cst = node.const(1 - di, what)
        v = _per_channel_of_node(prod, cst, node.where, what) if prod is not None \
            else _per_channel_of_value(x, cst, node.where, what)
        scale, shift = _constant_scale_shift(node, di, v.astype(np.float64))
    if prod is not None:
        fold_affine(prod, b.tensors, scale, shift)
        b.data[node.out] = b.data[src]
        b.set_output(node.out, prod)
    else:
        ss = b.emit(node.n, "scale_shift", x, params={"scale": scale.astype(np.float32),
                                                      "shift": shift.astype(np.float32)})
        b.data[node.out] = Data(ss["name"], x.shape, layout=x.layout, hwc=x.hwc)


def _concat(b: OnnxBuild, node: OnnxNode) -> None:
    if not all(node.is_data):
        raise node.fail("joins computed values with constants; format v1's concat joins computed values only")
    xs = [b.as_flat_or_map(node.resolved(b.data[v])) for v in node.ins]
    first = xs[0]
    rank = len(first.onnx_shape()) + 1  # with the batch axis
    axis = int(node.a.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    channel_axis = rank - 1 if first.layout == "nhwc" else 1
    shapes = [list(x.onnx_shape()) for x in xs]
    if any(x.layout != first.layout for x in xs) or first.layout not in ("nchw", "nhwc"):
        raise node.fail(f"joins values held as {[x.layout for x in xs]}; only values all channels-first or all "
                        "channels-last are supported")
    if axis != channel_axis:
        raise node.fail(f"concatenates per-sample {shapes} along axis {node.a.get('axis', 1)}; format v1's concat "
                        "joins channels (axis 1 of [N, C, H, W] or [N, K], axis 3 of channels-last [N, H, W, C])")
    if any(x.hwc is not None for x in xs):
        raise node.fail("concatenates flattened channels-last maps, whose element order the engine (which "
                        "flattens channels first) does not keep across the join")
    if any(len(x.shape) != len(first.shape) or tuple(x.shape[1:]) != tuple(first.shape[1:]) for x in xs):
        raise node.fail(f"concatenates per-sample {shapes}; all but the channel axis must be equal")
    out = b.emit(node.n, "concat", first, extra_inputs=[x.value for x in xs[1:]])
    b.data[node.out] = Data(out["name"], (sum(x.shape[0] for x in xs),) + tuple(first.shape[1:]),
                            layout=first.layout)


def _global_pool(b: OnnxBuild, node: OnnxNode) -> None:
    """GlobalAveragePool, GlobalMaxPool: a pool whose window is the whole map."""
    x = node.resolved(node.first_data())
    if len(x.shape) != 3 or x.layout != "nchw":
        raise node.fail(f"needs an [N, C, H, W] input, gets per-sample {list(x.onnx_shape())}")
    attrs = {"kernel": [x.shape[1], x.shape[2]], "stride": [1, 1], "padding": [0, 0, 0, 0]}
    is_avg = node.op == "GlobalAveragePool"
    if is_avg:
        attrs["count_include_pad"] = False
    out = b.emit(node.n, "avgpool" if is_avg else "maxpool", x, attrs)
    b.data[node.out] = Data(out["name"], (x.shape[0], 1, 1))


def _activation(b: OnnxBuild, node: OnnxNode) -> None:
    """Relu, Tanh, Sigmoid: the format op of the same name."""
    x = node.ready()
    out = b.emit(node.n, node.op.lower(), x)
    b.data[node.out] = Data(out["name"], x.shape, layout=x.layout, hwc=x.hwc)


def _identity(b: OnnxBuild, node: OnnxNode) -> None:
    """Identity, and Dropout (a no-op at inference)."""
    n = node.n
    if node.op == "Dropout" and len(n.output) > 1 and any(n.output[1:]):
        raise node.fail("a Dropout whose mask output is used is not supported")
    b.data[node.out] = b.data[node.ins[0]]


def _transpose(b: OnnxBuild, node: OnnxNode) -> None:
    """NHWC <-> NCHW of an image map: nothing to compute, the value's layout changes."""
    x = node.resolved(node.first_data())
    perm = list(node.a.get("perm", []))
    if x.layout == "nhwc" and perm == [0, 3, 1, 2]:
        b.data[node.out] = Data(x.value, x.shape)  # back to the engine's NCHW: nothing to compute
    elif x.layout == "nchw" and len(x.shape) == 3 and perm == [0, 2, 3, 1]:
        b.data[node.out] = Data(x.value, x.shape, layout="nhwc")
    else:
        raise node.fail(f"Transpose {perm} of per-sample {list(x.onnx_shape())} ({x.layout}); only NHWC <-> NCHW "
                        "of an image map is supported")


def _unsqueeze(b: OnnxBuild, node: OnnxNode) -> None:
    """The channel axis added to an [N, H, W] image."""
    x = node.resolved(node.first_data())
    a = node.a
    axes = list(a["axes"]) if "axes" in a else [int(v) for v in node.const(1, "axes").reshape(-1)]
    if x.layout == "hw" and axes in ([3], [-1]):
        b.data[node.out] = Data(x.value, x.shape, layout="nhwc")
    elif x.layout == "hw" and axes in ([1], [-3]):
        b.data[node.out] = Data(x.value, x.shape)
    else:
        raise node.fail(f"Unsqueeze {axes} of per-sample {list(x.onnx_shape())}; only adding the channel axis "
                        "to an [N, H, W] image is supported")


def _flatten(b: OnnxBuild, node: OnnxNode) -> None:
    x = node.resolved(node.first_data())
    axis = node.a.get("axis", 1)
    if axis not in (1, -len(x.shape)):
        raise node.fail(f"axis={axis} does not keep the batch dimension; only axis=1")
    b.data[node.out] = b.to_flat(node.n, x)


def _reshape_target(b: OnnxBuild, node: OnnxNode, x: Data) -> tuple[list[int], ImportFailure]:
    """The per-sample target shape of a Reshape of `x` (0 and -1 resolved), and the error for a
    reshape the engine cannot do."""
    target = [int(v) for v in node.const(1, "the target shape").tolist()]
    oshape = x.onnx_shape()
    k = int(np.prod(oshape))
    ok_batch = (BATCH, b.static_batch) if b.static_batch else (BATCH,)
    if node.a.get("allowzero", 0) == 0:
        full = (BATCH,) + tuple(oshape)
        target = [full[i] if v == 0 and i < len(full) else v for i, v in enumerate(target)]
    shown = "[" + ", ".join("N" if v == BATCH else str(v) for v in target) + "]"
    bad = node.fail(f"reshape of per-sample {list(oshape)} to {shown}; supported: to [N, K], and a [N, K] or "
                    "[N, H, W] image to [N, H, W, 1], [N, 1, H, W] or [N, H, W]")
    if target and target[0] in ok_batch:
        per_t = target[1:]
    elif target and target[0] == -1 and -1 not in target[1:] and int(np.prod(target[1:])) == k:
        per_t = target[1:]
    else:
        raise bad
    if per_t.count(-1) == 1:
        rest = int(np.prod([v for v in per_t if v != -1]))
        per_t[per_t.index(-1)] = k // rest if rest and k % rest == 0 else -1
    if not per_t or min(per_t) < 1 or int(np.prod(per_t)) != k:
        raise bad
    return per_t, bad


def _reshape(b: OnnxBuild, node: OnnxNode) -> None:
    """To [N, K] (a flatten), or a one-channel image between [N, K], [N, H, W], [N, H, W, 1] and
    [N, 1, H, W] (nothing to compute)."""
    x = node.resolved(node.first_data())
    per_t, bad = _reshape_target(b, node, x)
    if len(per_t) == 1:
        b.data[node.out] = b.to_flat(node.n, x)
        return
    if not (x.layout in ("raw_flat", "hw") or (len(x.shape) == 3 and x.shape[0] == 1 and x.hwc is None)):
        raise bad
    # A one-channel image, however the ONNX graph holds it: the engine's [1, H, W] map.
    if len(x.shape) != 3 or x.shape[0] != 1:
        raise bad
    h, w_ = x.shape[1], x.shape[2]
    if per_t == [h, w_]:
        b.data[node.out] = Data(x.value, x.shape, layout="hw")
    elif per_t == [h, w_, 1]:
        b.data[node.out] = Data(x.value, x.shape, layout="nhwc")
    elif per_t == [1, h, w_]:
        b.data[node.out] = Data(x.value, x.shape)
    else:
        raise bad


def _softmax(b: OnnxBuild, node: OnnxNode) -> None:
    x = node.ready()
    axis = node.a.get("axis", 1 if b.opset < 13 else -1)
    if len(x.shape) != 1 or axis not in (1, -1):
        raise node.fail(f"only softmax over the features of a 2-D [N, K] value is supported "
                        f"(per-sample {list(x.shape)}, axis {axis})")
    out = b.emit(node.n, "softmax", x)
    b.data[node.out] = Data(out["name"], x.shape, hwc=x.hwc)


def _pad(b: OnnxBuild, node: OnnxNode) -> None:
    """Constant padding of the model input becomes the input's preprocess pad; zero padding of
    another map waits for the Conv or AveragePool after it."""
    x = node.resolved(node.first_data())
    a = node.a
    if a.get("mode", "constant") != "constant":
        raise node.fail(f"mode {a['mode']!r} is not supported (only constant)")
    if b.opset < 11:
        pads, value = list(a["pads"]), float(a.get("value", 0.0))
    else:
        pads = [int(v) for v in node.const(1, "pads").tolist()]
        cv = node.const(2, "constant_value")
        value = float(cv.reshape(-1)[0]) if cv is not None and cv.size else 0.0
        if len(node.ins) > 3 and node.ins[3]:
            raise node.fail("the axes input of Pad is not supported")
    if len(pads) != 8 or len(x.shape) != 3 or x.layout != "nchw":
        raise node.fail("only padding of an [N, C, H, W] value is supported")
    if pads[0] or pads[1] or pads[4] or pads[5]:
        raise node.fail(f"pads {pads} pad the batch or channel axis")
    if min(pads) < 0:
        raise node.fail("negative pads (cropping) are not supported")
    tblr = [pads[2], pads[6], pads[3], pads[7]]
    padded = (x.shape[0], x.shape[1] + tblr[0] + tblr[1], x.shape[2] + tblr[2] + tblr[3])
    if x.value == b.spec["name"] and not b.nodes:
        if any(b.input_pad) and value != b.pad_value:
            raise node.fail(f"pads the input with {value}, on top of zero padding")
        b.input_pad = [p + q for p, q in zip(b.input_pad, tblr)]
        b.pad_value = value
        b.data[node.out] = Data(b.spec["name"], padded)
    else:
        if value != 0.0:
            raise node.fail("only zero padding can be folded into the next Conv or AveragePool")
        b.data[node.out] = Data(None, padded, pad=tblr, src=x)


# In the order the CLI's help and the unsupported-op error list them.
HANDLERS = {
    "Conv": _window_op, "AveragePool": _window_op, "MaxPool": _window_op, "Gemm": _linear, "MatMul": _linear,
    "Add": _add, "Relu": _activation, "Tanh": _activation, "Sigmoid": _activation, "Flatten": _flatten,
    "Reshape": _reshape, "Softmax": _softmax, "Pad": _pad, "Identity": _identity, "Transpose": _transpose,
    "Unsqueeze": _unsqueeze, "BatchNormalization": _affine, "Sub": _affine, "Mul": _affine, "Div": _affine,
    "Dropout": _identity, "GlobalAveragePool": _global_pool, "GlobalMaxPool": _global_pool, "Concat": _concat,
}
