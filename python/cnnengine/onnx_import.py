"""`tools/export onnx`: ONNX models (as torch.onnx and other exporters write them) to format v1.

Ops on the data path: Conv, AveragePool, MaxPool, Gemm, MatMul (+ Add of a constant bias), Relu,
Tanh, Sigmoid, Flatten, Reshape to 2-D [batch, features], Softmax, Add (of two computed values),
Pad (zero padding before a Conv or an AveragePool, or any constant padding of the model input,
which becomes the input's preprocess pad), Identity. Initializers go to the weights file. Any
other op on the data path is an error naming the op and the node.

Constant subgraphs (all inputs constants: initializers, Constant nodes, or the Shape of a value
whose per-sample shape is known) are evaluated at import time with onnx_reference: torch.onnx
computes the pads of F.pad and the target shape of `x.view(x.size(0), -1)` that way. The batch
size in a Shape is a marker that only a Reshape's batch dimension may use.

The model input (NCHW float, or [N, K]) becomes a uint8 input with the preprocessing the user
states (--scale, default 1/255; --mean; --std; --pad). The check runs the ONNX model itself
(onnx.reference.ReferenceEvaluator when the installed onnx has it, else onnx_reference) next to the
exported graph and the engine.
"""
from __future__ import annotations

import pathlib

import numpy as np

from . import import_common as ic
from . import onnx_reference
from .import_common import ImportFailure

SUPPORTED = ("Conv", "AveragePool", "MaxPool", "Gemm", "MatMul", "Add", "Relu", "Tanh", "Sigmoid", "Flatten",
             "Reshape", "Softmax", "Pad", "Identity", "Transpose", "Unsqueeze", "BatchNormalization", "Sub", "Mul",
             "Div", "Dropout", "GlobalAveragePool", "GlobalMaxPool", "Concat")
FOLDABLE = ("Constant", "ConstantOfShape", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice",
            "Transpose", "Cast", "Reshape", "Identity", "Add", "Sub", "Mul", "Div", "Flatten")
BATCH = 1_000_000_007  # stands for the (unknown) batch size in folded shapes


class _Data:
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
        self.src = src          # the _Data a pending pad applies to
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


def _attrs(node) -> dict:
    return onnx_reference._attrs(node)


def load_onnx(path):
    import onnx
    try:
        model = onnx.load(str(path))
    except Exception as e:  # onnx raises DecodeError and others
        raise ImportFailure(f"{path}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    return model


def _same_pads(size, k, s, upper):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    small = total // 2
    return (small, total - small) if upper else (total - small, small)


def _ints(v, n, default):
    return [int(x) for x in v] if v is not None else [default] * n


def graph_from_onnx(model, args, like, *, name: str, labels, description: str | None, path: str = "model"):
    """(graph, tensors, user pad, input layout (nchw, nhwc, hw, raw_flat), static batch or None)."""
    g = model.graph
    opset = onnx_reference.opset_of(model)
    consts: dict[str, np.ndarray] = {t.name: onnx_reference._to_array(t) for t in g.initializer}
    inputs = [i for i in g.input if i.name not in consts]
    if len(inputs) != 1:
        raise ImportFailure(f"{path}: the graph has {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); "
                            "exactly one is supported")
    inp = inputs[0]
    dims = [d.dim_value if d.HasField("dim_value") else None for d in inp.type.tensor_type.shape.dim]
    if inp.type.tensor_type.elem_type != 1:
        raise ImportFailure(f"{path}: input '{inp.name}' is not float32 (elem_type {inp.type.tensor_type.elem_type})")
    if len(dims) not in (2, 3, 4) or any(d is None for d in dims[1:]):
        raise ImportFailure(f"{path}: input '{inp.name}' has shape {dims}; supported: [N, C, H, W], [N, H, W, C], "
                            "[N, H, W] or [N, K] with known sizes after the batch")
    # A fixed batch (often 1) is run as any batch: only a Reshape's batch entry may name it.
    static_batch = dims[0] if dims[0] else None
    per = tuple(int(d) for d in dims[1:])
    layout = "nchw"
    if len(per) == 3:
        readers = [n for n in g.node if inp.name in n.input]
        to_nchw = [n for n in readers if n.op_type == "Transpose" and list(_attrs(n).get("perm", [])) == [0, 3, 1, 2]]
        if readers and len(to_nchw) == len(readers):
            layout = "nhwc"  # tf2onnx: the channels-last input goes through Transpose(0, 3, 1, 2)
        elif per[0] not in (1, 3) and per[2] in (1, 3):
            layout = "nhwc"
        model_shape = (per[2], per[0], per[1]) if layout == "nhwc" else per
    elif len(per) == 2:
        layout, model_shape = "hw", (1,) + per
    else:
        layout, model_shape = "raw_flat", per
    spec, user_pad = ic.input_spec(args, like, model_shape, "the ONNX model")
    input_pad, pad_value = list(user_pad), 0.0

    nodes: list[dict] = []
    tensors: dict[str, np.ndarray] = {}
    taken = {spec["name"]}
    data: dict[str, _Data] = {}
    consumers: dict[str, int] = {}
    for n in g.node:
        for v in n.input:
            consumers[v] = consumers.get(v, 0) + 1
    for o in g.output:
        consumers[o.name] = consumers.get(o.name, 0) + 1
    # ONNX value -> conv2d/dense node whose output it is (and nothing else reads): a constant Add,
    # Sub, Mul, Div or a BatchNormalization after it folds into that node's weight and bias.
    foldable: dict[str, dict] = {}
    data[inp.name] = _Data(spec["name"], tuple(spec["shape"]) if layout == "raw_flat" else model_shape,
                           layout=layout)

    def emit(onnx_node, op, x: _Data, attrs=None, params=None, extra_inputs=()):
        nname = ic.node_name(onnx_node.name or onnx_node.output[0], op, taken)
        return ic.append_node(nodes, tensors, nname, op, [x.value, *extra_inputs], attrs, params)

    def as_flat_or_map(x: _Data) -> _Data:
        """`x` with an engine value shaped as the ONNX graph sees it (raw_flat gets its flatten)."""
        if x.layout != "raw_flat":
            return x
        node = ic.append_node(nodes, tensors, ic.node_name("flatten", "flatten", taken), "flatten", [x.value])
        return _Data(node["name"], (int(np.prod(x.shape)),))

    def to_flat(onnx_node, x: _Data) -> _Data:
        """An ONNX flatten of `x` to [N, K]: the engine's flatten, and the NHWC order noted."""
        if x.layout == "raw_flat" or len(x.shape) == 1:
            return x
        node = emit(onnx_node, "flatten", x)
        h, w, c = x.onnx_shape() if x.layout == "nhwc" else (0, 0, 1)
        hwc = (h, w, c) if x.layout == "nhwc" and c > 1 and h * w > 1 else None
        return _Data(node["name"], (int(np.prod(x.shape)),), hwc=hwc)

    def per_channel(node, b, where, what):
        """A constant broadcast against `node`'s output ([N, C, H, W] or [N, units]) as one value
        per channel/unit; anything that varies along another axis is an error."""
        n_out = node["attrs"]["out_channels"] if node["op"] == "conv2d" else node["attrs"]["units"]
        b = np.asarray(b, np.float64)
        rank = 4 if node["op"] == "conv2d" else 2
        dims = (1,) * (rank - b.ndim) + tuple(b.shape) if b.ndim <= rank else None
        if dims is None or dims[0] != 1 or dims[1] not in (1, n_out) or any(d != 1 for d in dims[2:]):
            raise ImportFailure(f"{where}: {what} of shape {list(b.shape)} is not one value per channel of "
                                f"'{node['name']}' ({n_out} channels)")
        return np.broadcast_to(b.reshape(-1), (n_out,)).copy() if b.size == 1 else b.reshape(-1).copy()

    def per_channel_of(x: _Data, b, where, what):
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
            h, w_, c = x.hwc
            v = v[np.arange(h * w_ * c).reshape(h, w_, c).transpose(2, 0, 1).reshape(-1)]
        return v

    def fold_affine(node, scale, shift):
        """node's output y becomes scale * y + shift (per channel/unit), in its weight and bias."""
        wt = node["tensors"]["weight"]
        w64 = tensors[wt].astype(np.float64)
        tensors[wt] = (w64 * scale.reshape((-1,) + (1,) * (w64.ndim - 1))).astype(np.float32)
        bt = node["tensors"].get("bias")
        b64 = tensors[bt].astype(np.float64) if bt else np.zeros(len(scale))
        if not bt:
            bt = f"{node['name']}.bias"
            node["tensors"]["bias"] = bt
        tensors[bt] = (b64 * scale + shift).astype(np.float32)

    for idx, n in enumerate(g.node):
        op = n.op_type
        where = f"ONNX node '{n.name or '#' + str(idx)}' (op {op}, output '{n.output[0] if n.output else ''}')"
        ins = list(n.input)
        a = _attrs(n)
        is_data = [bool(v) and v in data for v in ins]

        # Constant folding: every input known.
        if not any(is_data) and op in FOLDABLE and all((not v) or v in consts for v in ins):
            try:
                outs = onnx_reference.run_node(n, [consts[v] if v else None for v in ins], opset)
            except Exception as e:
                raise ImportFailure(f"{where}: cannot evaluate this constant node: {e}") from None
            for name_, val in zip(n.output, outs):
                if name_:
                    consts[name_] = np.asarray(val)
            continue
        if op == "Shape" and is_data[0]:
            full = np.asarray((BATCH,) + data[ins[0]].onnx_shape(), np.int64)
            consts[n.output[0]] = full[a.get("start", 0):a.get("end", None)]
            continue
        if n.domain not in ("", "ai.onnx") or op not in SUPPORTED:
            raise ImportFailure(f"{where}: op {op}{' (domain ' + n.domain + ')' if n.domain else ''} is not "
                                f"supported; supported ops: {', '.join(SUPPORTED)}")
        if not any(is_data):
            raise ImportFailure(f"{where}: none of its inputs is computed from the model input and it cannot "
                                "be evaluated at import time")
        if len([o for o in n.output if o]) != 1:
            raise ImportFailure(f"{where}: only the first output is supported, the node has {len(n.output)}")
        out = n.output[0]

        def const(i, what):
            if i >= len(ins) or not ins[i]:
                return None
            if ins[i] not in consts:
                raise ImportFailure(f"{where}: {what} ('{ins[i]}') must be a constant (an initializer), "
                                    "not a computed value")
            return consts[ins[i]]

        def first_data() -> _Data:
            if not is_data[0]:
                raise ImportFailure(f"{where}: its first input must be the computed value")
            x = data[ins[0]]
            return x

        def resolved(x: _Data, what: str) -> _Data:
            if x.pad is not None:
                raise ImportFailure(f"{where}: a Pad can only be folded into a following Conv or AveragePool, "
                                    f"not into {what}")
            return x

        if op in ("Conv", "MaxPool", "AveragePool"):
            x = first_data()
            pre_pad = [0, 0, 0, 0]
            if x.pad is not None:
                pre_pad, x = x.pad, x.src
            if len(x.shape) != 3 or x.layout != "nchw":
                raise ImportFailure(f"{where}: needs an [N, C, H, W] input, gets per-sample {list(x.onnx_shape())}"
                                    + (" (channels last: a Transpose(0, 3, 1, 2) is missing)"
                                       if x.layout == "nhwc" else ""))
            if op == "Conv":
                w, b = const(1, "the weight"), const(2, "the bias")
                if a.get("group", 1) != 1:
                    raise ImportFailure(f"{where}: group={a['group']} is not supported (only 1)")
                if w.ndim != 4 or w.shape[1] != x.shape[0]:
                    raise ImportFailure(f"{where}: weight {list(w.shape)} does not fit input channels {x.shape[0]}")
                kernel = [int(w.shape[2]), int(w.shape[3])]
                if "kernel_shape" in a and list(a["kernel_shape"]) != kernel:
                    raise ImportFailure(f"{where}: kernel_shape {a['kernel_shape']} differs from the weight's {kernel}")
            else:
                if "kernel_shape" not in a or len(a["kernel_shape"]) != 2:
                    raise ImportFailure(f"{where}: needs a 2-D kernel_shape")
                kernel = [int(k) for k in a["kernel_shape"]]
                if a.get("ceil_mode", 0):
                    raise ImportFailure(f"{where}: ceil_mode=1 is not supported")
                if op == "MaxPool" and a.get("storage_order", 0):
                    raise ImportFailure(f"{where}: storage_order=1 is not supported")
            if _ints(a.get("dilations"), 2, 1) != [1, 1]:
                raise ImportFailure(f"{where}: dilations {a.get('dilations')} are not supported (only 1)")
            strides = _ints(a.get("strides"), 2, 1)
            auto = a.get("auto_pad", "NOTSET")
            h, w_ = x.shape[1] + pre_pad[0] + pre_pad[1], x.shape[2] + pre_pad[2] + pre_pad[3]
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                up = auto == "SAME_UPPER"
                (t, bo), (l, r) = _same_pads(h, kernel[0], strides[0], up), _same_pads(w_, kernel[1], strides[1], up)
            elif auto == "VALID":
                t = bo = l = r = 0
            elif auto == "NOTSET":
                p = _ints(a.get("pads"), 4, 0)
                t, l, bo, r = p  # ONNX: [x1_begin, x2_begin, x1_end, x2_end]
            else:
                raise ImportFailure(f"{where}: auto_pad {auto!r} is not supported")
            pads = [t + pre_pad[0], bo + pre_pad[1], l + pre_pad[2], r + pre_pad[3]]
            if op == "Conv":
                node = emit(n, "conv2d", x, {"out_channels": int(w.shape[0]), "kernel": kernel, "stride": strides,
                                             "padding": pads}, {"weight": w, "bias": b})
                channels = int(w.shape[0])
            elif op == "MaxPool":
                if any(pre_pad):
                    raise ImportFailure(f"{where}: a zero Pad before MaxPool is not its padding (-inf); not supported")
                node = emit(n, "maxpool", x, {"kernel": kernel, "stride": strides, "padding": pads})
                channels = x.shape[0]
            else:
                include = bool(a.get("count_include_pad", 0))
                if any(pre_pad):
                    if any((t, bo, l, r)) and not include:
                        raise ImportFailure(f"{where}: a Pad before AveragePool with its own pads and "
                                            "count_include_pad=0 is not supported")
                    include = True
                node = emit(n, "avgpool", x, {"kernel": kernel, "stride": strides, "padding": pads,
                                              "count_include_pad": include})
                channels = x.shape[0]
            oh = (h + t + bo - kernel[0]) // strides[0] + 1
            ow = (w_ + l + r - kernel[1]) // strides[1] + 1
            if oh < 1 or ow < 1:
                raise ImportFailure(f"{where}: window {kernel} does not fit the {h}x{w_} input")
            data[out] = _Data(node["name"], (channels, oh, ow))
            if op == "Conv" and consumers.get(out, 0) == 1:
                foldable[out] = node
        elif op in ("Gemm", "MatMul"):
            x = as_flat_or_map(resolved(first_data(), op))
            if len(x.shape) != 1:
                raise ImportFailure(f"{where}: needs a 2-D [N, K] input, gets per-sample {list(x.shape)} "
                                    "(Flatten first)")
            B = const(1, "B")
            if B.ndim != 2:
                raise ImportFailure(f"{where}: B has shape {list(B.shape)}, a 2-D constant is needed")
            if op == "Gemm":
                if a.get("transA", 0):
                    raise ImportFailure(f"{where}: transA=1 is not supported")
                weight = B if a.get("transB", 0) else B.T
                weight = weight * np.float32(a.get("alpha", 1.0)) if a.get("alpha", 1.0) != 1.0 else weight
                C = const(2, "C")
                bias = None
                if C is not None:
                    if C.ndim == 2 and C.shape[0] != 1:
                        raise ImportFailure(f"{where}: C of shape {list(C.shape)} is not a per-unit bias")
                    bias = np.broadcast_to(C.reshape(-1) if C.ndim == 2 else C, (weight.shape[0],)) \
                        * np.float32(a.get("beta", 1.0))
            else:
                weight, bias = B.T, None
            if weight.shape[1] != x.shape[0]:
                raise ImportFailure(f"{where}: weight takes {weight.shape[1]} inputs, the value has {x.shape[0]}")
            if x.hwc is not None:
                # The ONNX input index of engine feature (c, h, w) is (h, w, c): permute the columns.
                h, w_, c = x.hwc
                weight = weight[:, np.arange(h * w_ * c).reshape(h, w_, c).transpose(2, 0, 1).reshape(-1)]
            node = emit(n, "dense", x, {"units": int(weight.shape[0])}, {"weight": weight, "bias": bias})
            data[out] = _Data(node["name"], (int(weight.shape[0]),))
            if consumers.get(out, 0) == 1:
                foldable[out] = node
        elif op == "Add" and all(is_data[:2]):
            x, y = as_flat_or_map(resolved(data[ins[0]], op)), as_flat_or_map(resolved(data[ins[1]], op))
            if x.shape != y.shape or x.layout != y.layout or x.hwc != y.hwc:
                raise ImportFailure(f"{where}: adds per-sample shapes {list(x.onnx_shape())} and "
                                    f"{list(y.onnx_shape())}; only equal shapes are supported")
            node = emit(n, "add", x, extra_inputs=(y.value,))
            data[out] = _Data(node["name"], x.shape, layout=x.layout, hwc=x.hwc)
        elif op in ("Add", "Sub", "Mul", "Div", "BatchNormalization"):
            # A per-channel constant affine: folded into the Conv or Gemm/MatMul just before it when
            # nothing else reads that node's output (CNTK's separate bias Add, MatMul + Add, an exported
            # BatchNormalization after a convolution), else a scale_shift node (BatchNorm after pooling).
            di = 0 if is_data[0] else 1
            src = ins[di]
            node = foldable.pop(src, None)
            x = None
            if node is None:
                x = as_flat_or_map(resolved(data[src], op))
                if op == "BatchNormalization" and x.layout != "nchw":
                    raise ImportFailure(f"{where}: a BatchNormalization of a value the graph holds as "
                                        f"{list(x.onnx_shape())} ({x.layout}) normalizes axis 1, which is not the "
                                        "engine's channel axis here")

            def channel_values(b, what):
                v = per_channel(node, b, where, what) if node is not None else per_channel_of(x, b, where, what)
                return v.astype(np.float64)
            def bn_param(i, what):
                # BatchNormalization's parameters are 1-D, one per channel (ONNX axis 1), not broadcast.
                channels = x.shape[0] if node is None else (node["attrs"]["out_channels"] if node["op"] == "conv2d"
                                                            else node["attrs"]["units"])
                v = np.asarray(const(i, what), np.float64)
                if v.ndim != 1 or v.shape[0] != channels:
                    raise ImportFailure(f"{where}: {what} has shape {list(v.shape)}, expected [{channels}] "
                                        "(one per channel)")
                return v
            if op == "BatchNormalization":
                if di != 0 or len(n.output) > 1 and any(n.output[1:]) or a.get("training_mode", 0):
                    raise ImportFailure(f"{where}: only inference-mode BatchNormalization (one output) is supported")
                gamma, beta, mean, var = (bn_param(i, nm)
                                          for i, nm in ((1, "scale"), (2, "B"), (3, "mean"), (4, "var")))
                # In float64, stored as float32: scale = gamma / sqrt(var + eps), shift = beta - mean * scale.
                scale = gamma / np.sqrt(var + float(a.get("epsilon", 1e-5)))
                shift = beta - mean * scale
            else:
                cst = channel_values(const(1 - di, f"the {op} operand"), f"the {op} operand")
                ones = np.ones_like(cst)
                if op == "Add":
                    scale, shift = ones, cst
                elif op == "Sub" and di == 0:
                    scale, shift = ones, -cst
                elif op == "Sub":
                    scale, shift = -ones, cst  # constant - x
                elif op == "Mul":
                    scale, shift = cst, np.zeros_like(cst)
                elif op == "Div" and di == 0:
                    scale, shift = 1.0 / cst, np.zeros_like(cst)
                else:
                    raise ImportFailure(f"{where}: a constant divided by a computed value is not supported")
            if node is not None:
                fold_affine(node, scale, shift)
                data[out] = data[src]
                if consumers.get(out, 0) == 1:
                    foldable[out] = node
            else:
                ss = emit(n, "scale_shift", x, params={"scale": scale.astype(np.float32),
                                                       "shift": shift.astype(np.float32)})
                data[out] = _Data(ss["name"], x.shape, layout=x.layout, hwc=x.hwc)
        elif op == "Concat":
            if not all(is_data):
                raise ImportFailure(f"{where}: joins computed values with constants; format v1's concat joins "
                                    "computed values only")
            xs = [as_flat_or_map(resolved(data[v], op)) for v in ins]
            first = xs[0]
            rank = len(first.onnx_shape()) + 1  # with the batch axis
            axis = int(a.get("axis", 1))
            axis = axis + rank if axis < 0 else axis
            channel_axis = rank - 1 if first.layout == "nhwc" else 1
            shapes = [list(x.onnx_shape()) for x in xs]
            if any(x.layout != first.layout for x in xs) or first.layout not in ("nchw", "nhwc"):
                raise ImportFailure(f"{where}: joins values held as {[x.layout for x in xs]}; only values all "
                                    "channels-first or all channels-last are supported")
            if axis != channel_axis:
                raise ImportFailure(f"{where}: concatenates per-sample {shapes} along axis {a.get('axis', 1)}; "
                                    "format v1's concat joins channels (axis 1 of [N, C, H, W] or [N, K], "
                                    "axis 3 of channels-last [N, H, W, C])")
            if any(x.hwc is not None for x in xs):
                raise ImportFailure(f"{where}: concatenates flattened channels-last maps, whose element order the "
                                    "engine (which flattens channels first) does not keep across the join")
            if any(len(x.shape) != len(first.shape) or tuple(x.shape[1:]) != tuple(first.shape[1:]) for x in xs):
                raise ImportFailure(f"{where}: concatenates per-sample {shapes}; all but the channel axis must "
                                    "be equal")
            node = emit(n, "concat", first, extra_inputs=[x.value for x in xs[1:]])
            data[out] = _Data(node["name"], (sum(x.shape[0] for x in xs),) + tuple(first.shape[1:]),
                              layout=first.layout)
        elif op in ("GlobalAveragePool", "GlobalMaxPool"):
            x = resolved(first_data(), op)
            if len(x.shape) != 3 or x.layout != "nchw":
                raise ImportFailure(f"{where}: needs an [N, C, H, W] input, gets per-sample {list(x.onnx_shape())}")
            attrs = {"kernel": [x.shape[1], x.shape[2]], "stride": [1, 1], "padding": [0, 0, 0, 0]}
            if op == "GlobalAveragePool":
                attrs["count_include_pad"] = False
            node = emit(n, "avgpool" if op == "GlobalAveragePool" else "maxpool", x, attrs)
            data[out] = _Data(node["name"], (x.shape[0], 1, 1))
        elif op in ("Relu", "Tanh", "Sigmoid"):
            x = as_flat_or_map(resolved(first_data(), op))
            node = emit(n, op.lower(), x)
            data[out] = _Data(node["name"], x.shape, layout=x.layout, hwc=x.hwc)
        elif op in ("Identity", "Dropout"):
            if op == "Dropout" and len(n.output) > 1 and any(n.output[1:]):
                raise ImportFailure(f"{where}: a Dropout whose mask output is used is not supported")
            data[out] = data[ins[0]]
        elif op == "Transpose":
            x = resolved(first_data(), op)
            perm = list(a.get("perm", []))
            if x.layout == "nhwc" and perm == [0, 3, 1, 2]:
                data[out] = _Data(x.value, x.shape)  # back to the engine's NCHW: nothing to compute
            elif x.layout == "nchw" and len(x.shape) == 3 and perm == [0, 2, 3, 1]:
                data[out] = _Data(x.value, x.shape, layout="nhwc")
            else:
                raise ImportFailure(f"{where}: Transpose {perm} of per-sample {list(x.onnx_shape())} "
                                    f"({x.layout}); only NHWC <-> NCHW of an image map is supported")
        elif op == "Unsqueeze":
            x = resolved(first_data(), op)
            axes = list(a["axes"]) if "axes" in a else [int(v) for v in const(1, "axes").reshape(-1)]
            if x.layout == "hw" and axes in ([3], [-1]):
                data[out] = _Data(x.value, x.shape, layout="nhwc")
            elif x.layout == "hw" and axes in ([1], [-3]):
                data[out] = _Data(x.value, x.shape)
            else:
                raise ImportFailure(f"{where}: Unsqueeze {axes} of per-sample {list(x.onnx_shape())}; only adding "
                                    "the channel axis to an [N, H, W] image is supported")
        elif op == "Flatten":
            x = resolved(first_data(), op)
            axis = a.get("axis", 1)
            if axis not in (1, -len(x.shape)):
                raise ImportFailure(f"{where}: axis={axis} does not keep the batch dimension; only axis=1")
            data[out] = to_flat(n, x)
        elif op == "Reshape":
            x = resolved(first_data(), op)
            target = [int(v) for v in const(1, "the target shape").tolist()]
            oshape = x.onnx_shape()
            k = int(np.prod(oshape))
            ok_batch = (BATCH, static_batch) if static_batch else (BATCH,)
            if a.get("allowzero", 0) == 0:
                full = (BATCH,) + tuple(oshape)
                target = [full[i] if v == 0 and i < len(full) else v for i, v in enumerate(target)]
            shown = "[" + ", ".join("N" if v == BATCH else str(v) for v in target) + "]"
            bad = ImportFailure(f"{where}: reshape of per-sample {list(oshape)} to {shown}; supported: to [N, K], "
                                "and a [N, K] or [N, H, W] image to [N, H, W, 1], [N, 1, H, W] or [N, H, W]")
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
            if len(per_t) == 1:
                data[out] = to_flat(n, x)
            elif x.layout in ("raw_flat", "hw") or (len(x.shape) == 3 and x.shape[0] == 1 and x.hwc is None):
                # A one-channel image, however the ONNX graph holds it: the engine's [1, H, W] map.
                if len(x.shape) != 3 or x.shape[0] != 1:
                    raise bad
                h, w_ = x.shape[1], x.shape[2]
                if per_t == [h, w_]:
                    data[out] = _Data(x.value, x.shape, layout="hw")
                elif per_t == [h, w_, 1]:
                    data[out] = _Data(x.value, x.shape, layout="nhwc")
                elif per_t == [1, h, w_]:
                    data[out] = _Data(x.value, x.shape)
                else:
                    raise bad
            else:
                raise bad
        elif op == "Softmax":
            x = as_flat_or_map(resolved(first_data(), op))
            axis = a.get("axis", 1 if opset < 13 else -1)
            if len(x.shape) != 1 or axis not in (1, -1):
                raise ImportFailure(f"{where}: only softmax over the features of a 2-D [N, K] value is supported "
                                    f"(per-sample {list(x.shape)}, axis {axis})")
            node = emit(n, "softmax", x)
            data[out] = _Data(node["name"], x.shape, hwc=x.hwc)
        elif op == "Pad":
            x = resolved(first_data(), op)
            if a.get("mode", "constant") != "constant":
                raise ImportFailure(f"{where}: mode {a['mode']!r} is not supported (only constant)")
            if opset < 11:
                pads, value = list(a["pads"]), float(a.get("value", 0.0))
            else:
                pads = [int(v) for v in const(1, "pads").tolist()]
                cv = const(2, "constant_value")
                value = float(cv.reshape(-1)[0]) if cv is not None and cv.size else 0.0
                if len(ins) > 3 and ins[3]:
                    raise ImportFailure(f"{where}: the axes input of Pad is not supported")
            if len(pads) != 8 or len(x.shape) != 3 or x.layout != "nchw":
                raise ImportFailure(f"{where}: only padding of an [N, C, H, W] value is supported")
            if pads[0] or pads[1] or pads[4] or pads[5]:
                raise ImportFailure(f"{where}: pads {pads} pad the batch or channel axis")
            if min(pads) < 0:
                raise ImportFailure(f"{where}: negative pads (cropping) are not supported")
            tblr = [pads[2], pads[6], pads[3], pads[7]]
            if x.value == spec["name"] and not nodes:
                if any(input_pad) and value != pad_value:
                    raise ImportFailure(f"{where}: pads the input with {value}, on top of zero padding")
                input_pad = [p + q for p, q in zip(input_pad, tblr)]
                pad_value = value
                shape = (x.shape[0], x.shape[1] + tblr[0] + tblr[1], x.shape[2] + tblr[2] + tblr[3])
                data[out] = _Data(spec["name"], shape)
            else:
                if value != 0.0:
                    raise ImportFailure(f"{where}: only zero padding can be folded into the next Conv or "
                                        "AveragePool")
                padded = (x.shape[0], x.shape[1] + tblr[0] + tblr[1], x.shape[2] + tblr[2] + tblr[3])
                data[out] = _Data(None, padded, pad=tblr, src=x)
        else:  # pragma: no cover - SUPPORTED and this chain are kept in step
            raise AssertionError(op)

    outputs = []
    for o in g.output:
        if o.name not in data or data[o.name].value is None or data[o.name].value == spec["name"]:
            raise ImportFailure(f"{path}: output '{o.name}' is not computed by a supported node")
        d = data[o.name]
        if d.hwc is not None or (d.layout == "nhwc" and d.shape[0] > 1):
            raise ImportFailure(f"{path}: output '{o.name}' is in channels-last order, which the engine (channels "
                                "first) does not reproduce")
        outputs.append(d.value)
    if not nodes:
        raise ImportFailure(f"{path}: the graph has no nodes to export")
    if any(input_pad):
        spec["preprocess"]["pad"] = input_pad
        spec["preprocess"]["pad_value"] = pad_value
    graph = {"name": name}
    if description:
        graph["description"] = description
    graph.update({"weights": {"file": f"{name}.safetensors", "sha256": "0" * 64}, "input": spec})
    if labels is not None:
        graph["labels"] = list(labels)
    graph.update({"nodes": nodes, "outputs": outputs})
    return graph, tensors, user_pad, layout, static_batch


def onnx_source(model, spec: dict, user_pad: list[int], layout: str, static_batch: int | None):
    """Raw uint8 [N, C, H, W] -> the ONNX model's first output, the input prepared as the user's
    code would (stated scaling and padding; flattened for a [N, K] input). A model exported with a
    fixed batch size is run in slices of that size."""
    run_feeds, label = onnx_reference.evaluator(model)
    name = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}][0]

    def run(batch: np.ndarray) -> np.ndarray:
        x = ic.user_preprocess(spec, user_pad, batch)
        if layout == "raw_flat":
            x = x.reshape(len(x), -1)
        elif layout == "hw":
            x = x[:, 0]
        elif layout == "nhwc":
            x = x.transpose(0, 2, 3, 1)
        if not static_batch:
            return np.asarray(run_feeds({name: np.ascontiguousarray(x)}), np.float32)
        outs = []
        for i in range(0, len(x), static_batch):
            chunk = x[i:i + static_batch]
            short = static_batch - len(chunk)
            if short:
                chunk = np.concatenate([chunk, np.zeros((short,) + chunk.shape[1:], chunk.dtype)])
            outs.append(np.asarray(run_feeds({name: np.ascontiguousarray(chunk)}), np.float32)[:len(chunk) - short])
        return np.concatenate(outs)
    return ic.labeled(run, label)


def load(args, like):
    model = load_onnx(args.source)
    name = ic.model_name(args, like)
    labels = ic.labels_arg(args, like)
    producer = f"{model.producer_name} {model.producer_version}".strip() or "unknown producer"
    description = args.description or (f"imported from ONNX file {pathlib.Path(args.source).name} "
                                       f"({producer}, opset {onnx_reference.opset_of(model)})")
    graph, tensors, user_pad, layout, static_batch = graph_from_onnx(
        model, args, like, name=name, labels=labels, description=description, path=args.source)
    return graph, tensors, onnx_source(model, graph["input"], user_pad, layout, static_batch)


def register(sub) -> None:
    from .export_cli import _common
    p = sub.add_parser(
        "onnx", help="an ONNX model (torch.onnx.export, tf2onnx, keras2onnx, CNTK, ...)",
        description="Import an ONNX model. Data-path ops: " + ", ".join(SUPPORTED) + "; constant subgraphs "
                    "(Shape/Gather/Unsqueeze/Concat shape arithmetic) are evaluated at import time; any other op "
                    "is an error naming the node. Inputs [N, C, H, W], channels-last [N, H, W, C] or [N, H, W] "
                    "(the NHWC<->NCHW Transposes are removed and the first Gemm/MatMul's columns permuted), or "
                    "[N, K]; a fixed batch size is run as any batch. BatchNormalization and per-channel constant "
                    "Add/Sub/Mul/Div fold into the Conv or Gemm/MatMul just before them, else become a "
                    "scale_shift node (e.g. BatchNorm after pooling); Concat of computed values along the channel "
                    "axis becomes a concat node. "
                    "The model's float input becomes a uint8 input with the preprocessing you state "
                    "(--scale, default 1/255; --mean; --std; --pad). The check runs the ONNX model itself "
                    "(onnx.reference if installed, else a NumPy evaluator) next to the graph and the engine.")
    p.add_argument("source", help="ONNX model file (.onnx)")
    p.add_argument("--pad", help="zero padding the user's code adds around each raw image before the model: P "
                                 "or T,B,L,R (default: the model's input size minus the image size, halved)")
    _common(p)
    p.set_defaults(load=load, export_checked=ic.export_checked)
