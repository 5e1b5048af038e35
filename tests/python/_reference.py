"""An independent float64 numpy implementation of the format-v1 ops, written from the spec's
formulas with loops over window offsets, to test the torch interpreter against."""
import numpy as np


def conv2d(x, w, b, stride, padding):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    t, bo, l, r = padding
    xp = np.zeros((n, c, h + t + bo, wd + l + r))
    xp[:, :, t:t + h, l:l + wd] = x
    oh = (h + t + bo - kh) // stride[0] + 1
    ow = (wd + l + r - kw) // stride[1] + 1
    y = np.zeros((n, o, oh, ow))
    for p in range(kh):
        for q in range(kw):
            patch = xp[:, :, p:p + stride[0] * (oh - 1) + 1:stride[0], q:q + stride[1] * (ow - 1) + 1:stride[1]]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, p, q])
    if b is not None:
        y += b[None, :, None, None]
    return y


def pool(x, kernel, stride, padding, kind, count_include_pad=True):
    n, c, h, wd = x.shape
    kh, kw = kernel
    t, bo, l, r = padding
    fill = -np.inf if kind == "max" else 0.0
    xp = np.full((n, c, h + t + bo, wd + l + r), fill)
    xp[:, :, t:t + h, l:l + wd] = x
    inside = np.zeros((h + t + bo, wd + l + r))
    inside[t:t + h, l:l + wd] = 1
    oh = (h + t + bo - kh) // stride[0] + 1
    ow = (wd + l + r - kw) // stride[1] + 1
    y = np.full((n, c, oh, ow), -np.inf if kind == "max" else 0.0)
    cnt = np.zeros((oh, ow))
    for p in range(kh):
        for q in range(kw):
            sl = (slice(p, p + stride[0] * (oh - 1) + 1, stride[0]), slice(q, q + stride[1] * (ow - 1) + 1, stride[1]))
            patch = xp[(slice(None), slice(None)) + sl]
            if kind == "max":
                y = np.maximum(y, patch)
            else:
                y += patch
                cnt += inside[sl]
    if kind == "avg":
        y = y / (kh * kw) if count_include_pad else y / cnt
    return y


def run(model, x):
    """Runs a format-v1 Model on a raw batch; returns {value name: float64 array}."""
    g, tensors = model.graph, model.tensors
    inp = g["input"]
    if inp["dtype"] == "uint8":
        pre = inp["preprocess"]
        f32 = np.float32
        y = (x.astype(f32) * f32(pre["scale"]) - np.asarray(pre["mean"], f32)[None, :, None, None]) \
            / np.asarray(pre["std"], f32)[None, :, None, None]
        t, b, l, r = pre.get("pad", [0, 0, 0, 0])
        y = np.pad(y, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=f32(pre.get("pad_value", 0.0)))
    else:
        y = x
    vals = {inp["name"]: y.astype(np.float64)}
    remaining = list(g["nodes"])
    while remaining:
        for n in remaining:
            if all(v in vals for v in n["inputs"]):
                break
        remaining.remove(n)
        a = n.get("attrs", {})
        ts = {k: tensors[v].astype(np.float64) for k, v in n.get("tensors", {}).items()}
        x0 = vals[n["inputs"][0]]
        op = n["op"]
        if op == "conv2d":
            out = conv2d(x0, ts["weight"], ts.get("bias"), a.get("stride", [1, 1]), a.get("padding", [0] * 4))
        elif op in ("avgpool", "maxpool"):
            out = pool(x0, a["kernel"], a.get("stride", a["kernel"]), a.get("padding", [0] * 4),
                       op[:3], a.get("count_include_pad", True))
        elif op == "relu":
            out = np.maximum(x0, 0)
        elif op == "tanh":
            out = np.tanh(x0)
        elif op == "sigmoid":
            out = 1 / (1 + np.exp(-x0))
        elif op == "flatten":
            out = x0.reshape(len(x0), -1)
        elif op == "dense":
            out = x0 @ ts["weight"].T + (ts["bias"] if "bias" in ts else 0)
        elif op == "softmax":
            e = np.exp(x0 - x0.max(1, keepdims=True))
            out = e / e.sum(1, keepdims=True)
        elif op == "add":
            out = x0 + vals[n["inputs"][1]]
        elif op == "scale_shift":
            view = (1, -1) + (1,) * (x0.ndim - 2)
            out = x0 * ts["scale"].reshape(view) + ts["shift"].reshape(view)
        elif op == "concat":
            out = np.concatenate([vals[v] for v in n["inputs"]], axis=1)
        else:
            raise AssertionError(f"_reference.run: op {op!r} not implemented")
        vals[n["name"]] = out
    return vals
