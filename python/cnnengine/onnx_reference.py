"""A small NumPy evaluator of ONNX graphs, for the ops the ONNX importer reads and the shape
arithmetic that torch.onnx writes around them (Shape, Gather, Concat, Slice, ...).

onnx.reference.ReferenceEvaluator exists from onnx 1.13; Debian's python3-onnx is 1.12, so this
module stands in for it as the "source framework" of the importer's check (`evaluator()` picks
ReferenceEvaluator when the installed onnx has it). It follows the ONNX operator specifications in
NCHW and shares no code with onnx_import.py, so a wrong translation (pads order, transB, a
Reshape) shows up as a check failure. The importer does use `run_node` to fold the constant
subgraphs (pads, shapes) that torch.onnx computes with ops the engine has no use for.
"""
from __future__ import annotations

import numpy as np

F32 = np.float32


def _attrs(node) -> dict:
    from onnx import helper
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf8")
        out[a.name] = v
    return out


def _to_array(t) -> np.ndarray:
    from onnx import numpy_helper
    return numpy_helper.to_array(t)


def _np_dtype(onnx_type: int):
    try:
        from onnx import helper
        return helper.tensor_dtype_to_np_dtype(onnx_type)
    except AttributeError:  # onnx < 1.13
        from onnx import mapping
        return mapping.TENSOR_TYPE_TO_NP_TYPE[onnx_type]


# --------------------------------------------------------------------------------------------------
# Windows (Conv, pools)

def _window_pads(x_shape, kernel, strides, dilations, pads, auto_pad):
    """[(begin, end)] per spatial axis."""
    n_sp = len(kernel)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(n_sp):
            size = x_shape[2 + i]
            o = -(-size // strides[i])
            total = max((o - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size, 0)
            small = total // 2
            out.append((small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small))
        return out
    if auto_pad == "VALID":
        return [(0, 0)] * n_sp
    pads = pads or [0] * (2 * n_sp)
    return [(pads[i], pads[i + n_sp]) for i in range(n_sp)]


def _windows(xp, kernel, strides, dilations, out_hw):
    """Yields (p, q, view [N, C, OH, OW]) for each kernel offset."""
    oh, ow = out_hw
    for p in range(kernel[0]):
        for q in range(kernel[1]):
            r0, c0 = p * dilations[0], q * dilations[1]
            yield p, q, xp[:, :, r0:r0 + strides[0] * (oh - 1) + 1:strides[0],
                           c0:c0 + strides[1] * (ow - 1) + 1:strides[1]]


def _out_hw(padded_hw, kernel, strides, dilations):
    return tuple((padded_hw[i] - ((kernel[i] - 1) * dilations[i] + 1)) // strides[i] + 1 for i in range(2))


def conv(x, w, b, a):
    if a.get("group", 1) != 1:
        raise NotImplementedError("Conv with group != 1")
    kernel = list(w.shape[2:])
    strides = a.get("strides", [1, 1])
    dil = a.get("dilations", [1, 1])
    pads = _window_pads(x.shape, kernel, strides, dil, a.get("pads"), a.get("auto_pad", "NOTSET"))
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    oh, ow = _out_hw(xp.shape[2:], kernel, strides, dil)
    y = np.zeros((x.shape[0], w.shape[0], oh, ow), F32)
    for p, q, win in _windows(xp, kernel, strides, dil, (oh, ow)):
        y += np.einsum("nchw,oc->nohw", win, w[:, :, p, q]).astype(F32)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def pool(x, a, kind):
    if a.get("ceil_mode", 0):
        raise NotImplementedError("pooling with ceil_mode")
    kernel = a["kernel_shape"]
    strides = a.get("strides", [1] * len(kernel))
    dil = a.get("dilations", [1] * len(kernel))
    pads = _window_pads(x.shape, kernel, strides, dil, a.get("pads"), a.get("auto_pad", "NOTSET"))
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads), constant_values=fill)
    inside = np.pad(np.ones(x.shape[2:], F32), tuple(pads))
    oh, ow = _out_hw(xp.shape[2:], kernel, strides, dil)
    acc = np.full((x.shape[0], x.shape[1], oh, ow), fill, F32)
    count = np.zeros((oh, ow), F32)
    for p, q, win in _windows(xp, kernel, strides, dil, (oh, ow)):
        if kind == "max":
            acc = np.maximum(acc, win)
        else:
            acc = acc + win
            r0, c0 = p * dil[0], q * dil[1]
            count += inside[r0:r0 + strides[0] * (oh - 1) + 1:strides[0], c0:c0 + strides[1] * (ow - 1) + 1:strides[1]]
    if kind == "avg":
        acc = acc / (kernel[0] * kernel[1] if a.get("count_include_pad", 0) else count)
    return acc.astype(F32)


# --------------------------------------------------------------------------------------------------
# Ops: f(inputs, attrs, opset) -> list of outputs; a missing optional input is None

def _slice(inputs, a, opset):
    data = inputs[0]
    if opset < 10:
        starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
    else:
        starts, ends = inputs[1].tolist(), inputs[2].tolist()
        axes = inputs[3].tolist() if len(inputs) > 3 and inputs[3] is not None else None
        steps = inputs[4].tolist() if len(inputs) > 4 and inputs[4] is not None else None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * data.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        ax = ax + data.ndim if ax < 0 else ax
        dim = data.shape[ax]
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        index[ax] = slice(s, None if e < 0 else e, st)
    return [data[tuple(index)]]


def _unsqueeze(inputs, a, opset):
    axes = a["axes"] if opset < 13 else inputs[1].tolist()
    y = inputs[0]
    rank = y.ndim + len(axes)
    for ax in sorted(ax + rank if ax < 0 else ax for ax in axes):
        y = np.expand_dims(y, ax)
    return [y]


def _squeeze(inputs, a, opset):
    axes = a.get("axes") if opset < 13 else (inputs[1].tolist() if len(inputs) > 1 and inputs[1] is not None else None)
    if axes is None:
        return [np.squeeze(inputs[0])]
    return [np.squeeze(inputs[0], axis=tuple(ax + inputs[0].ndim if ax < 0 else ax for ax in axes))]


def _reshape(inputs, a, opset):
    x, shape = inputs[0], [int(v) for v in inputs[1].tolist()]
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if v == 0 else v for i, v in enumerate(shape)]
    return [x.reshape(shape)]


def _softmax(inputs, a, opset):
    x = inputs[0]
    if opset < 13:
        axis = a.get("axis", 1)
        axis = axis + x.ndim if axis < 0 else axis
        flat = x.reshape(int(np.prod(x.shape[:axis])), -1)
        e = np.exp(flat - flat.max(axis=1, keepdims=True))
        return [(e / e.sum(axis=1, keepdims=True)).reshape(x.shape).astype(x.dtype)]
    axis = a.get("axis", -1)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return [(e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)]


def _pad(inputs, a, opset):
    x = inputs[0]
    if opset < 11:
        pads, value = a["pads"], a.get("value", 0.0)
    else:
        pads = inputs[1].tolist()
        value = inputs[2].item() if len(inputs) > 2 and inputs[2] is not None and inputs[2].size else 0.0
        if len(inputs) > 3 and inputs[3] is not None:  # opset 18 axes
            axes = [ax + x.ndim if ax < 0 else ax for ax in inputs[3].tolist()]
            full = [0] * (2 * x.ndim)
            for i, ax in enumerate(axes):
                full[ax], full[ax + x.ndim] = pads[i], pads[i + len(axes)]
            pads = full
    mode = a.get("mode", "constant")
    r = x.ndim
    if min(pads) < 0:
        raise NotImplementedError("Pad with negative pads")
    width = [(pads[i], pads[i + r]) for i in range(r)]
    if mode == "constant":
        return [np.pad(x, width, constant_values=value)]
    return [np.pad(x, width, mode={"reflect": "reflect", "edge": "edge"}[mode])]


def _flatten(inputs, a, opset):
    x = inputs[0]
    axis = a.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return [x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)]


def _gemm(inputs, a, opset):
    A, B = inputs[0], inputs[1]
    C = inputs[2] if len(inputs) > 2 else None
    if a.get("transA", 0):
        A = A.T
    if a.get("transB", 0):
        B = B.T
    y = F32(a.get("alpha", 1.0)) * (A @ B)
    if C is not None:
        y = y + F32(a.get("beta", 1.0)) * C
    return [y.astype(F32)]


def _constant(inputs, a, opset):
    if "value" in a:
        return [_to_array(a["value"])]
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in a:
            return [np.asarray(a[key], dtype)]
    raise NotImplementedError(f"Constant with attributes {sorted(a)}")


def _constant_of_shape(inputs, a, opset):
    value = _to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
    return [np.full(tuple(int(v) for v in inputs[0].tolist()), value.reshape(-1)[0], dtype=value.dtype)]


def _shape(inputs, a, opset):
    s = np.asarray(inputs[0].shape, np.int64)
    return [s[a.get("start", 0):a.get("end", None)]]


def _batchnorm(inputs, a, opset):
    x, scale, bias, mean, var = inputs[:5]
    shape = (1, -1) + (1,) * (x.ndim - 2)
    eps = np.asarray(a.get("epsilon", 1e-5), x.dtype)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(shape)
    return [y.astype(x.dtype)]


OPS = {
    "BatchNormalization": _batchnorm,
    "GlobalAveragePool": lambda i, a, o: [i[0].mean(axis=(2, 3), keepdims=True).astype(i[0].dtype)],
    "GlobalMaxPool": lambda i, a, o: [i[0].max(axis=(2, 3), keepdims=True)],
    "Conv": lambda i, a, o: [conv(i[0], i[1], i[2] if len(i) > 2 else None, a)],
    "MaxPool": lambda i, a, o: [pool(i[0], a, "max")],
    "AveragePool": lambda i, a, o: [pool(i[0], a, "avg")],
    "Gemm": _gemm,
    "MatMul": lambda i, a, o: [np.matmul(i[0], i[1])],
    "Add": lambda i, a, o: [i[0] + i[1]],
    "Sub": lambda i, a, o: [i[0] - i[1]],
    "Mul": lambda i, a, o: [i[0] * i[1]],
    "Div": lambda i, a, o: [np.trunc(i[0] / i[1]).astype(i[0].dtype) if np.issubdtype(i[0].dtype, np.integer)
                            else i[0] / i[1]],
    "Relu": lambda i, a, o: [np.maximum(i[0], i[0].dtype.type(0))],
    "Tanh": lambda i, a, o: [np.tanh(i[0])],
    "Sigmoid": lambda i, a, o: [(1 / (1 + np.exp(-i[0]))).astype(i[0].dtype)],
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Softmax": _softmax,
    "Pad": _pad,
    "Identity": lambda i, a, o: [i[0]],
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    "Shape": _shape,
    "Gather": lambda i, a, o: [np.take(i[0], i[1], axis=a.get("axis", 0))],
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": lambda i, a, o: [np.concatenate([np.atleast_1d(v) for v in i], axis=a["axis"])],
    "Slice": _slice,
    "Transpose": lambda i, a, o: [np.transpose(i[0], a.get("perm"))],
    "Cast": lambda i, a, o: [i[0].astype(_np_dtype(a["to"]))],
}


def opset_of(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def run_node(node, inputs: list, opset: int) -> list:
    """Outputs of one node (inputs as arrays, None for an omitted optional input)."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in OPS:
        raise NotImplementedError(f"op {node.op_type}")
    while inputs and inputs[-1] is None:
        inputs = inputs[:-1]
    return OPS[node.op_type](inputs, _attrs(node), opset)


def run(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs, in order."""
    opset = opset_of(model)
    values = {t.name: _to_array(t) for t in model.graph.initializer}
    values.update(feeds)
    for node in model.graph.node:
        ins = [values[n] if n else None for n in node.input]
        outs = run_node(node, ins, opset)
        for name, v in zip(node.output, outs):
            if name:
                values[name] = v
    return [values[o.name] for o in model.graph.output]


def evaluator(model):
    """(run(feeds) -> first output, label): onnx.reference.ReferenceEvaluator when the installed
    onnx has it, else this module."""
    try:
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        return (lambda feeds: run(model, feeds)[0]), "ONNX, NumPy reference evaluator"
    ev = ReferenceEvaluator(model)
    return (lambda feeds: ev.run(None, feeds)[0]), "ONNX, onnx.reference.ReferenceEvaluator"
