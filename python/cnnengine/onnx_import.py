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
states (--preset, or --scale/--mean/--std; --pad). A model whose input goes first through a Div,
Mul, Sub or Add of a constant scales its own input: it is fed raw values (scale 1) unless the user
states otherwise, and such leading scale_shift nodes move into the input's preprocessing.
The check runs the ONNX model itself (onnx.reference.ReferenceEvaluator when the installed onnx has
it, else onnx_reference) next to the exported graph and the engine.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np

from . import import_common as ic
from . import onnx_reference
from .export_core import graph_object
from .export_args import add_common_args
from .import_common import ImportFailure
from .importers import onnx_ops

SUPPORTED = tuple(onnx_ops.HANDLERS)
FOLDABLE = ("Constant", "ConstantOfShape", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice",
            "Transpose", "Cast", "Reshape", "Identity", "Add", "Sub", "Mul", "Div", "Flatten")


def load_onnx(path):
    import onnx
    try:
        model = onnx.load(str(path))
    except Exception as e:  # onnx raises DecodeError and others
        raise ImportFailure(f"{path}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    return model


def _model_input(g, consts: dict, path: str):
    """The graph's one float input: (its ValueInfo, per-sample shape in the engine, how the ONNX graph
    holds it (nchw, nhwc, hw, raw_flat), the fixed batch size or None)."""
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
    if len(per) == 2:
        return inp, (1,) + per, "hw", static_batch
    if len(per) == 1:
        return inp, per, "raw_flat", static_batch
    layout = "nchw"
    readers = [n for n in g.node if inp.name in n.input]
    to_nchw = [n for n in readers
               if n.op_type == "Transpose" and list(onnx_reference._attrs(n).get("perm", [])) == [0, 3, 1, 2]]
    if readers and len(to_nchw) == len(readers):
        layout = "nhwc"  # tf2onnx: the channels-last input goes through Transpose(0, 3, 1, 2)
    elif per[0] not in (1, 3) and per[2] in (1, 3):
        layout = "nhwc"
    return inp, ((per[2], per[0], per[1]) if layout == "nhwc" else per), layout, static_batch


def _fold_constant(b: onnx_ops.OnnxBuild, node: onnx_ops.OnnxNode) -> bool:
    """Evaluates `node` at import time when it can (all inputs constant, or the Shape of a computed
    value); True when it did."""
    n, ins = node.n, node.ins
    if not any(node.is_data) and node.op in FOLDABLE and all((not v) or v in b.consts for v in ins):
        try:
            outs = onnx_reference.run_node(n, [b.consts[v] if v else None for v in ins], b.opset)
        except Exception as e:
            raise node.fail(f"cannot evaluate this constant node: {e}") from None
        for name_, val in zip(n.output, outs):
            if name_:
                b.consts[name_] = np.asarray(val)
        return True
    if node.op == "Shape" and node.is_data[0]:
        full = np.asarray((onnx_ops.BATCH,) + b.data[ins[0]].onnx_shape(), np.int64)
        b.consts[n.output[0]] = full[node.a.get("start", 0):node.a.get("end", None)]
        return True
    return False


def _check_supported(node: onnx_ops.OnnxNode) -> None:
    n, op = node.n, node.op
    if n.domain not in ("", "ai.onnx") or op not in onnx_ops.HANDLERS:
        raise node.fail(f"op {op}{' (domain ' + n.domain + ')' if n.domain else ''} is not supported; supported "
                        f"ops: {', '.join(SUPPORTED)}")
    if not any(node.is_data):
        raise node.fail("none of its inputs is computed from the model input and it cannot be evaluated at "
                        "import time")
    if len([o for o in n.output if o]) != 1:
        raise node.fail(f"only the first output is supported, the node has {len(n.output)}")


def _outputs(b: onnx_ops.OnnxBuild, g, path: str) -> list[str]:
    outputs = []
    for o in g.output:
        d = b.data.get(o.name)
        if d is None or d.value is None or d.value == b.spec["name"]:
            raise ImportFailure(f"{path}: output '{o.name}' is not computed by a supported node")
        if d.hwc is not None or (d.layout == "nhwc" and d.shape[0] > 1):
            raise ImportFailure(f"{path}: output '{o.name}' is in channels-last order, which the engine (channels "
                                "first) does not reproduce")
        outputs.append(d.value)
    return outputs


LEADING_AFFINE = ("Div", "Mul", "Sub", "Add")


def _scales_own_input(g, input_name: str, consts: dict) -> bool:
    """Whether the model's input goes first through one Div/Mul/Sub/Add of a constant (x / 255,
    x - mean): the model then preprocesses raw values itself."""
    constant = set(consts) | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    readers = [n for n in g.node if input_name in n.input]
    return (len(readers) == 1 and readers[0].op_type in LEADING_AFFINE and len(readers[0].input) == 2
            and any(v in constant for v in readers[0].input if v != input_name))


def _fold_leading_scale_shift(graph: dict, tensors: dict) -> int:
    """Moves scale_shift nodes that read the model input straight into its preprocessing:
    ((u * s - m) / std) * a + b is (u * s - (m - b * std / a)) / (std / a). Returns how many moved.
    Not with a preprocess pad, which the engine applies after the scaling."""
    pre = graph["input"]["preprocess"]
    moved = 0
    while not any(pre.get("pad", [0])):
        readers = [n for n in graph["nodes"] if graph["input"]["name"] in n["inputs"]]
        if len(readers) != 1 or readers[0]["op"] != "scale_shift":
            break
        node = readers[0]
        a = tensors[node["tensors"]["scale"]].astype(np.float64)
        b = tensors[node["tensors"]["shift"]].astype(np.float64)
        if len(a) != len(pre["std"]) or np.any(a <= 0):
            break
        std = np.asarray(pre["std"], np.float64)
        pre["mean"] = [float(x) for x in np.asarray(pre["mean"], np.float64) - b * std / a]
        pre["std"] = [float(x) for x in std / a]
        for role in ("scale", "shift"):
            del tensors[node["tensors"][role]]
        graph["nodes"].remove(node)
        for n in graph["nodes"]:
            n["inputs"] = [graph["input"]["name"] if v == node["name"] else v for v in n["inputs"]]
        graph["outputs"] = [graph["input"]["name"] if v == node["name"] else v for v in graph["outputs"]]
        moved += 1
    return moved


def graph_from_onnx(model, args, like, *, name: str, labels, description: str | None, path: str = "model"):
    """(graph, tensors, user pad, input layout (nchw, nhwc, hw, raw_flat), static batch or None,
    the input spec of what the user's code does before the ONNX model)."""
    g = model.graph
    consts: dict[str, np.ndarray] = {t.name: onnx_reference._to_array(t) for t in g.initializer}
    inp, model_shape, layout, static_batch = _model_input(g, consts, path)
    # A model that scales its own input is fed raw values (0..255) by its users.
    spec, user_pad = ic.input_spec(args, like, model_shape, "the ONNX model",
                                   default_scale=1.0 if _scales_own_input(g, inp.name, consts) else None)
    user_spec = json.loads(json.dumps(spec))
    consumers: dict[str, int] = {}
    for v in [v for n in g.node for v in n.input] + [o.name for o in g.output]:
        consumers[v] = consumers.get(v, 0) + 1
    b = onnx_ops.OnnxBuild(spec, user_pad, onnx_reference.opset_of(model), static_batch, consts, consumers)
    b.data[inp.name] = onnx_ops.Data(spec["name"], tuple(spec["shape"]) if layout == "raw_flat" else model_shape,
                                     layout=layout)
    for idx, n in enumerate(g.node):
        node = onnx_ops.OnnxNode(b, n, idx)
        if _fold_constant(b, node):
            continue
        _check_supported(node)
        onnx_ops.HANDLERS[node.op](b, node)
    outputs = _outputs(b, g, path)
    if not b.nodes:
        raise ImportFailure(f"{path}: the graph has no nodes to export")
    if any(b.input_pad):
        spec["preprocess"]["pad"] = b.input_pad
        spec["preprocess"]["pad_value"] = b.pad_value
    graph = graph_object(name, description, spec, labels, b.nodes, outputs)
    _fold_leading_scale_shift(graph, b.tensors)
    return graph, b.tensors, user_pad, layout, static_batch, user_spec


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
    run.user_spec, run.user_pad = spec, user_pad  # what the user's code does before the model
    return ic.labeled(run, label)


def load(args, like):
    model = load_onnx(args.source)
    name = ic.model_name(args, like)
    labels = ic.labels_arg(args, like)
    producer = f"{model.producer_name} {model.producer_version}".strip() or "unknown producer"
    description = args.description or (f"imported from ONNX file {pathlib.Path(args.source).name} "
                                       f"({producer}, opset {onnx_reference.opset_of(model)})")
    graph, tensors, user_pad, layout, static_batch, user_spec = graph_from_onnx(
        model, args, like, name=name, labels=labels, description=description, path=args.source)
    return graph, tensors, onnx_source(model, user_spec, user_pad, layout, static_batch)


def register(sub) -> None:
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
                    "(--preset, or --scale/--mean/--std; --pad), or (a leading Div/Mul/Sub/Add of a constant) "
                    "raw values that the model scales itself. The check runs the ONNX model itself "
                    "(onnx.reference if installed, else a NumPy evaluator) next to the graph and the engine.")
    p.add_argument("source", help="ONNX model file (.onnx)")
    p.add_argument("--pad", help="zero padding the user's code adds around each raw image before the model: P "
                                 "or T,B,L,R (default: the model's input size minus the image size, halved)")
    add_common_args(p)
    p.set_defaults(load=load, export_checked=ic.export_checked)
