"""The seeds' LeNet-5 (LeCun et al. 1998, as the project specifies it).

28x28 input zero-padded to 32x32, pixels scaled by float32(1/255); C1 conv 6@5x5 tanh; S2 average
pool 2; C3 conv 16@5x5 tanh, connected to all six S2 maps (not the paper's sparse table); S4 average
pool 2; F5 dense 120 tanh; F6 dense 84 tanh; F7 dense 10 softmax. 61,706 parameters.

The module is an nn.Sequential whose child names become the graph's node names, so
`export.export_module` turns it into format v1 without a name table.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
from torch import nn

from . import datasets

# The spec's preprocessing is float32 arithmetic: the scale is 1/255 rounded to float32 once.
SCALE = float(np.float32(1.0 / 255.0))
PAD = 2
PARAMETERS = 61_706


def build_module() -> nn.Sequential:
    return nn.Sequential(OrderedDict([
        ("pad", nn.ZeroPad2d(PAD)),  # becomes the input's preprocess pad on export
        ("c1", nn.Conv2d(1, 6, 5)),
        ("c1_tanh", nn.Tanh()),
        ("s2", nn.AvgPool2d(2, count_include_pad=True)),
        ("c3", nn.Conv2d(6, 16, 5)),
        ("c3_tanh", nn.Tanh()),
        ("s4", nn.AvgPool2d(2, count_include_pad=True)),
        ("flatten", nn.Flatten()),
        ("f5", nn.Linear(16 * 5 * 5, 120)),
        ("f5_tanh", nn.Tanh()),
        ("f6", nn.Linear(120, 84)),
        ("f6_tanh", nn.Tanh()),
        ("f7", nn.Linear(84, 10)),
        ("prob", nn.Softmax(dim=1)),
    ]))


def logits(module: nn.Sequential) -> nn.Sequential:
    """The same parameters without the final softmax, for a numerically sound cross-entropy."""
    return module[:-1]


def preprocess(images_u8: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 1, 28, 28] -> float32 as the model's module expects it (before its padding)."""
    return images_u8.to(torch.float32) * SCALE


def input_spec(shape=(1, 28, 28)) -> dict:
    """The graph's `input` object without the pad, which export takes from the module's ZeroPad2d."""
    return {"name": "image", "dtype": "uint8", "shape": list(shape),
            "preprocess": {"scale": SCALE, "mean": [0.0], "std": [1.0]}}


def labels_for(dataset: str) -> list[str]:
    return list(datasets.FASHION_LABELS if dataset == "fashion" else datasets.MNIST_LABELS)
