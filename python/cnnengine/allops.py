"""A small format v1 graph that uses every op, for tools that need one without training anything:
the fuzzers' seed corpus (tests/fuzz/make_seeds.py) and the malformed-input corpus
(tests/python/corpus/make_malformed_corpus.py). Only numpy; no torch."""
from __future__ import annotations

import numpy as np


def allops_model(*, size: int, kernel: int, pad: int, seed: int, conv_scale: float, dense_scale: float,
                 description: str) -> tuple[dict, dict[str, np.ndarray]]:
    """uint8 [1, size, size] input zero-padded by `pad`, conv 4@kernel x kernel, relu, maxpool 2x2,
    avgpool 3x3 (count_include_pad false), tanh and sigmoid branches joined by add, flatten, dense 10,
    softmax; outputs prob and the logits. Returns the graph (weights' sha256 left empty for the caller)
    and its float32 tensors (normal(0, 1) times the scales; biases times 0.1)."""
    rng = np.random.default_rng(seed)
    maps = (size + 2 * pad - kernel + 1) // 2
    tensors = {
        "c1.weight": (rng.standard_normal((4, 1, kernel, kernel)) * conv_scale).astype(np.float32),
        "c1.bias": (rng.standard_normal(4) * 0.1).astype(np.float32),
        "d1.weight": (rng.standard_normal((10, 4 * maps * maps)) * dense_scale).astype(np.float32),
        "d1.bias": (rng.standard_normal(10) * 0.1).astype(np.float32),
    }
    graph = {
        "format": "cnn-engine-model",
        "version": 1,
        "name": "allops",
        "description": description,
        "weights": {"file": "allops.safetensors", "sha256": ""},
        "input": {"name": "image", "dtype": "uint8", "shape": [1, size, size],
                  "preprocess": {"scale": 0.003921568859368563, "mean": [0.1307], "std": [0.3081],
                                 "pad": [pad] * 4, "pad_value": 0.0}},
        "labels": [str(i) for i in range(10)],
        "nodes": [
            {"name": "c1", "op": "conv2d", "inputs": ["image"],
             "attrs": {"kernel": [kernel, kernel], "stride": [1, 1], "padding": [0, 0, 0, 0], "out_channels": 4},
             "tensors": {"weight": "c1.weight", "bias": "c1.bias"}},
            {"name": "r1", "op": "relu", "inputs": ["c1"]},
            {"name": "p1", "op": "maxpool", "inputs": ["r1"], "attrs": {"kernel": [2, 2]}},
            {"name": "a1", "op": "avgpool", "inputs": ["p1"],
             "attrs": {"kernel": [3, 3], "stride": [1, 1], "padding": [1, 1, 1, 1], "count_include_pad": False}},
            {"name": "t1", "op": "tanh", "inputs": ["a1"]},
            {"name": "s1", "op": "sigmoid", "inputs": ["p1"]},
            {"name": "sum", "op": "add", "inputs": ["t1", "s1"]},
            {"name": "f1", "op": "flatten", "inputs": ["sum"]},
            {"name": "d1", "op": "dense", "inputs": ["f1"], "attrs": {"units": 10},
             "tensors": {"weight": "d1.weight", "bias": "d1.bias"}},
            {"name": "prob", "op": "softmax", "inputs": ["d1"]},
        ],
        "outputs": ["prob", "d1"],
    }
    return graph, tensors
