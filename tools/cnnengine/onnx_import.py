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
             "Reshape", "Softmax", "Pad", "Identity")
FOLDABLE = ("Constant", "ConstantOfShape", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice",
            "Transpose", "Cast", "Reshape", "Identity", "Add", "Sub", "Mul", "Div", "Flatten")
BATCH = 1_000_000_007  # stands for the (unknown) batch size in folded shapes


class _Data:
    """A value computed per sample: the format value that holds it and its per-sample shape."""

    def __init__(self, value: str | None, shape: tuple[int, ...], pad=None, src=None):
        self.value = value      # format value name (None for a pending pad)
        self.shape = shape
        self.pad = pad          # [t, b, l, r] of a Pad not yet folded into its consumer
        self.src = src          # the _Data a pending pad applies to


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
    """(graph, tensors, user pad, input rank, static batch or None)."""
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
    if len(dims) not in (2, 4) or any(d is None for d in dims[1:]):
        raise ImportFailure(f"{path}: input '{inp.name}' has shape {dims}; supported: [N, C, H, W] or [N, K] "
                            "with known sizes after the batch")
    static_batch = dims[0] if dims[0] else None
    per = tuple(int(d) for d in dims[1:])
    spec, user_pad = ic.input_spec(args, like, per, "the ONNX model")
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
    dense_without_bias: dict[str, dict] = {}  # ONNX value -> dense node that an Add may give a bias

    if len(per) == 3:
        data[inp.name] = _Data(spec["name"], per)
    else:
        flat = {"name": ic.node_name("flatten", "flatten", taken), "op": "flatten", "inputs": [spec["name"]]}
        nodes.append(flat)
        data[inp.name] = _Data(flat["name"], per)

    def emit(onnx_node, op, x: _Data, attrs=None, params=None, extra_inputs=()):
        nname = ic.node_name(onnx_node.name or onnx_node.output[0], op, taken)
        return ic.append_node(nodes, tensors, nname, op, [x.value, *extra_inputs], attrs, params)

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
            full = np.asarray((BATCH,) + data[ins[0]].shape, np.int64)
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
            if len(x.shape) != 3:
                raise ImportFailure(f"{where}: needs an [N, C, H, W] input, gets per-sample {list(x.shape)}")
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
        elif op in ("Gemm", "MatMul"):
            x = resolved(first_data(), op)
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
            node = emit(n, "dense", x, {"units": int(weight.shape[0])}, {"weight": weight, "bias": bias})
            data[out] = _Data(node["name"], (int(weight.shape[0]),))
            if bias is None and consumers.get(out, 0) == 1:
                dense_without_bias[out] = node
        elif op == "Add":
            both = all(is_data[:2])
            if both:
                x, y = resolved(data[ins[0]], op), resolved(data[ins[1]], op)
                if x.shape != y.shape:
                    raise ImportFailure(f"{where}: adds per-sample shapes {list(x.shape)} and {list(y.shape)}; "
                                        "only equal shapes are supported")
                node = emit(n, "add", x, extra_inputs=(y.value,))
                data[out] = _Data(node["name"], x.shape)
            else:
                di = 0 if is_data[0] else 1
                src = ins[di]
                b = const(1 - di, "the added constant")
                node = dense_without_bias.pop(src, None)
                if node is None:
                    raise ImportFailure(f"{where}: adding a constant is only supported as the bias of the "
                                        "MatMul/Gemm just before it")
                units = node["attrs"]["units"]
                try:
                    bias = np.broadcast_to(np.asarray(b, np.float32).reshape(-1) if b.ndim <= 2 and
                                           (b.ndim < 2 or b.shape[0] == 1) else b, (units,))
                except ValueError:
                    raise ImportFailure(f"{where}: constant of shape {list(b.shape)} is not a bias of "
                                        f"{units} units") from None
                tname = f"{node['name']}.bias"
                node["tensors"]["bias"] = tname
                tensors[tname] = np.ascontiguousarray(bias, np.float32)
                data[out] = data[src]
        elif op in ("Relu", "Tanh", "Sigmoid"):
            x = resolved(first_data(), op)
            node = emit(n, op.lower(), x)
            data[out] = _Data(node["name"], x.shape)
        elif op == "Identity":
            data[out] = data[ins[0]]
        elif op == "Flatten":
            x = resolved(first_data(), op)
            axis = a.get("axis", 1)
            if axis not in (1, -len(x.shape)):
                raise ImportFailure(f"{where}: axis={axis} does not keep the batch dimension; only axis=1")
            if len(x.shape) == 1:
                data[out] = x
            else:
                node = emit(n, "flatten", x)
                data[out] = _Data(node["name"], (int(np.prod(x.shape)),))
        elif op == "Reshape":
            x = resolved(first_data(), op)
            target = [int(v) for v in const(1, "the target shape").tolist()]
            k = int(np.prod(x.shape))
            ok_batch = (BATCH, static_batch) if static_batch else (BATCH,)
            if a.get("allowzero", 0) == 0:
                target = [BATCH if (i == 0 and v == 0) else (x.shape[i - 1] if v == 0 else v)
                          for i, v in enumerate(target)]
            good = len(target) == 2 and (
                (target[0] in ok_batch and target[1] in (-1, k)) or (target[0] == -1 and target[1] == k))
            if not good:
                shown = "[" + ", ".join("N" if v == BATCH else str(v) for v in target) + "]"
                raise ImportFailure(f"{where}: reshape of per-sample {list(x.shape)} to {shown}; only a reshape "
                                    f"to 2-D [N, {k}] is supported")
            if len(x.shape) == 1:
                data[out] = x
            else:
                node = emit(n, "flatten", x)
                data[out] = _Data(node["name"], (k,))
        elif op == "Softmax":
            x = resolved(first_data(), op)
            axis = a.get("axis", 1 if opset < 13 else -1)
            if len(x.shape) != 1 or axis not in (1, -1):
                raise ImportFailure(f"{where}: only softmax over the features of a 2-D [N, K] value is supported "
                                    f"(per-sample {list(x.shape)}, axis {axis})")
            node = emit(n, "softmax", x)
            data[out] = _Data(node["name"], x.shape)
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
            if len(pads) != 8 or len(x.shape) != 3:
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
        outputs.append(data[o.name].value)
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
    return graph, tensors, user_pad, len(per), static_batch


def onnx_source(model, spec: dict, user_pad: list[int], rank: int, static_batch: int | None):
    """Raw uint8 [N, C, H, W] -> the ONNX model's first output, the input prepared as the user's
    code would (stated scaling and padding; flattened for a [N, K] input). A model exported with a
    fixed batch size is run in slices of that size."""
    run_feeds, label = onnx_reference.evaluator(model)
    name = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}][0]

    def run(batch: np.ndarray) -> np.ndarray:
        x = ic.user_preprocess(spec, user_pad, batch)
        if rank == 1:
            x = x.reshape(len(x), -1)
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
    graph, tensors, user_pad, rank, static_batch = graph_from_onnx(
        model, args, like, name=name, labels=labels, description=description, path=args.source)
    return graph, tensors, onnx_source(model, graph["input"], user_pad, rank, static_batch)


def register(sub) -> None:
    from .export_cli import _common
    p = sub.add_parser(
        "onnx", help="an ONNX model (e.g. written by torch.onnx.export)",
        description="Import an ONNX model. Data-path ops: " + ", ".join(SUPPORTED) + "; constant subgraphs "
                    "(shape arithmetic) are evaluated at import time; any other op is an error naming the "
                    "node. The model's float input becomes a uint8 input with the preprocessing you state "
                    "(--scale, default 1/255; --mean; --std; --pad). The check runs the ONNX model itself "
                    "(onnx.reference if installed, else a NumPy evaluator) next to the graph and the engine.")
    p.add_argument("source", help="ONNX model file (.onnx)")
    p.add_argument("--pad", help="zero padding the user's code adds around each raw image before the model: P "
                                 "or T,B,L,R (default: the model's input size minus the image size, halved)")
    _common(p)
    p.set_defaults(load=load, export_checked=ic.export_checked)
