"""What the Keras and ONNX importers share about tensors: 'same' padding, window output sizes,
channels-last flatten order, and folding a per-channel affine (BatchNorm, a constant scale or
shift) into the conv2d/dense node that produces its input."""
from __future__ import annotations

import numpy as np


def same_pads(size: int, k: int, s: int, upper: bool = True) -> tuple[int, int]:
    """'same' padding of one axis: the odd extra row/column at the end (TensorFlow, ONNX
    SAME_UPPER) or at the start (ONNX SAME_LOWER)."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    small = total // 2
    return (small, total - small) if upper else (total - small, small)


def window_out(h: int, w: int, kernel, stride, pads) -> tuple[int, int]:
    """Output height and width of a window op over an h x w input padded by [t, b, l, r]."""
    return ((h + pads[0] + pads[1] - kernel[0]) // stride[0] + 1,
            (w + pads[2] + pads[3] - kernel[1]) // stride[1] + 1)


def nhwc_to_chw_rows(h: int, w: int, c: int) -> np.ndarray:
    """perm with perm[chw_index] = hwc_index: the channels-last flat index of each engine flat index."""
    return np.arange(h * w * c).reshape(h, w, c).transpose(2, 0, 1).reshape(-1)


def batchnorm_affine(gamma, beta, mean, var, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(scale, shift) in float64 of an inference-mode BatchNormalization:
    (x - mean) * gamma / sqrt(var + eps) + beta = x * scale + shift."""
    scale = np.asarray(gamma, np.float64) / np.sqrt(np.asarray(var, np.float64) + float(eps))
    shift = np.asarray(beta, np.float64) - np.asarray(mean, np.float64) * scale
    return scale, shift


def fold_affine(node: dict, tensors: dict, scale: np.ndarray, shift: np.ndarray) -> None:
    """A conv2d/dense node's output y becomes scale * y + shift (per channel/unit), in its weight and
    bias: computed in float64, stored as float32; a bias tensor NODE.bias is added when it has none."""
    wt = node["tensors"]["weight"]
    w64 = tensors[wt].astype(np.float64)
    tensors[wt] = (w64 * scale.reshape((-1,) + (1,) * (w64.ndim - 1))).astype(np.float32)
    bt = node["tensors"].get("bias")
    b64 = tensors[bt].astype(np.float64) if bt else np.zeros(len(scale))
    if not bt:
        bt = f"{node['name']}.bias"
        node["tensors"]["bias"] = bt
    tensors[bt] = (b64 * scale + shift).astype(np.float32)
