"""The zoo's models as PyTorch modules, and the registry that names them.

Every model takes a preprocessed float32 [N, C, H, W] batch and returns class probabilities (the
engine's models end in softmax); `logits(x)` is the same network without the softmax, for training.
`REGISTRY[name]` is a `ZooEntry`: the constructor, one raw sample's shape [C, H, W], the data set
it is shaped for, and the preprocessing (uint8 pixels -> the float input) stated in its export.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

MNIST_PRE = {"scale": 1.0 / 255.0, "mean": [0.1307], "std": [0.3081]}
CIFAR_PRE = {"scale": 1.0 / 255.0, "mean": [0.4914, 0.4822, 0.4465], "std": [0.2470, 0.2435, 0.2616]}


class ZooNet(nn.Module):
    """A network whose `body` maps the input to logits; forward adds the softmax."""

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def logits(self, x):
        return self.body(x)

    def forward(self, x):
        return torch.softmax(self.body(x), dim=1)


def conv(cin, cout, k=3, pad="same", stride=1):
    p = k // 2 if pad == "same" else 0
    return nn.Conv2d(cin, cout, k, stride=stride, padding=p)


def conv_bn_relu(cin, cout, stride=1):
    return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


def keras_cnn():
    """The Keras MNIST tutorial's CNN (its dropout layers are identities at inference)."""
    return ZooNet(nn.Sequential(
        conv(1, 32, pad="valid"), nn.ReLU(), conv(32, 64, pad="valid"), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 12 * 12, 128), nn.ReLU(), nn.Linear(128, 10)))


def vgg_stack(cin, widths, hw, dense, bn):
    """Two 'same' 3x3 convolutions per width, each followed by (BatchNorm and) ReLU, then a maxpool."""
    layers = []
    for w in widths:
        for _ in range(2):
            layers += conv_bn_relu(cin, w) if bn else [conv(cin, w), nn.ReLU()]
            cin = w
        layers.append(nn.MaxPool2d(2))
        hw //= 2
    layers += [nn.Flatten(), nn.Linear(cin * hw * hw, dense), nn.ReLU(), nn.Linear(dense, 10)]
    return nn.Sequential(*layers)


def vgg_mnist():
    return ZooNet(vgg_stack(1, (32, 64, 128), 28, 128, bn=False))


def conv_bn_relu_net():
    """Three conv + BatchNorm + ReLU blocks (the BatchNorms fold into the convolutions on import)."""
    return ZooNet(nn.Sequential(
        *conv_bn_relu(1, 32), nn.MaxPool2d(2), *conv_bn_relu(32, 64), nn.MaxPool2d(2), *conv_bn_relu(64, 64),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 10)))


class ConcatBranches(nn.Module):
    """A stem, two branches (1x1 and 3x3) joined by a channel concat, then a small head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv(1, 16), nn.ReLU())
        self.branch1 = nn.Sequential(conv(16, 16, k=1), nn.ReLU())
        self.branch3 = nn.Sequential(conv(16, 24), nn.ReLU())
        self.head = nn.Sequential(nn.MaxPool2d(2), conv(40, 32), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                  nn.Linear(32 * 7 * 7, 10))

    def forward(self, x):
        s = self.stem(x)
        return self.head(torch.cat([self.branch1(s), self.branch3(s)], dim=1))


def concat_branches():
    return ZooNet(ConcatBranches())


def mlp(*widths):
    layers = [nn.Flatten()]
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return ZooNet(nn.Sequential(*layers[:-1]))


def lenet5(act, pool):
    """LeNet-5 on 28x28 with padding 2 in the first convolution (the classic 32x32 input)."""
    return ZooNet(nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), act(), pool(2), nn.Conv2d(6, 16, 5), act(), pool(2), nn.Flatten(),
        nn.Linear(400, 120), act(), nn.Linear(120, 84), act(), nn.Linear(84, 10)))


def cifar_vgg():
    return ZooNet(vgg_stack(3, (32, 64, 128), 32, 128, bn=True))


class BasicBlock(nn.Module):
    """ResNet's basic block; a 1x1 convolution with BatchNorm projects the shortcut where the shape
    changes (option B of the ResNet paper)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.shortcut(x))


class ResNet20(nn.Module):
    """ResNet-20 for CIFAR-10: a 16-channel stem, three stages of three basic blocks (16, 32, 64
    channels), global average pooling, a dense layer."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(*conv_bn_relu(3, 16))
        blocks, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                blocks.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def resnet20():
    return ZooNet(ResNet20())


@dataclasses.dataclass(frozen=True)
class ZooEntry:
    build: object          # () -> ZooNet
    shape: tuple           # one raw sample, [C, H, W]
    dataset: str           # "mnist" (trained briefly) or "cifar-random" (seeded random weights)
    description: str
    train_images: int = 0  # MNIST training images seen (one pass), 0 for random weights

    @property
    def preprocess(self) -> dict:
        return MNIST_PRE if self.dataset == "mnist" else CIFAR_PRE


REGISTRY: dict[str, ZooEntry] = {
    "keras-cnn": ZooEntry(keras_cnn, (1, 28, 28), "mnist",
                          "Keras tutorial CNN: conv3x3 32, conv3x3 64, maxpool, dense 128, dense 10", 12800),
    "vgg-mnist": ZooEntry(vgg_mnist, (1, 28, 28), "mnist",
                          "VGG-style: 2x32, 2x64, 2x128 'same' conv3x3, three maxpools, dense 128, dense 10", 6400),
    "conv-bn-relu": ZooEntry(conv_bn_relu_net, (1, 28, 28), "mnist",
                             "three conv3x3 + BatchNorm + ReLU blocks (32, 64, 64), two maxpools, dense 10", 12800),
    "concat-branches": ZooEntry(concat_branches, (1, 28, 28), "mnist",
                                "stem conv3x3 16, branches conv1x1 16 and conv3x3 24 joined by concat, "
                                "conv3x3 32, dense 10", 12800),
    "mlp-512-256": ZooEntry(lambda: mlp(784, 512, 256, 10), (1, 28, 28), "mnist", "MLP 784-512-256-10, ReLU",
                            60000),
    "mlp-128": ZooEntry(lambda: mlp(784, 128, 10), (1, 28, 28), "mnist", "MLP 784-128-10, ReLU", 60000),
    "lenet5-relu-pad2": ZooEntry(lambda: lenet5(nn.ReLU, nn.MaxPool2d), (1, 28, 28), "mnist",
                                 "LeNet-5, ReLU and maxpool, padding 2 in the first convolution", 30000),
    "lenet5-tanh-avgpool": ZooEntry(lambda: lenet5(nn.Tanh, nn.AvgPool2d), (1, 28, 28), "mnist",
                                    "LeNet-5, tanh and average pooling, padding 2 in the first convolution", 30000),
    "cifar-vgg": ZooEntry(cifar_vgg, (3, 32, 32), "cifar-random",
                          "VGG-style on CIFAR-10 shapes: 2x32, 2x64, 2x128 conv3x3 + BatchNorm + ReLU, three "
                          "maxpools, dense 128, dense 10"),
    "resnet20": ZooEntry(resnet20, (3, 32, 32), "cifar-random",
                         "ResNet-20 on CIFAR-10 shapes: residual adds, BatchNorm folded, projection shortcuts, "
                         "global average pooling"),
}


def load(name: str, state_dict_path, map_location="cpu") -> ZooNet:
    """The zoo model `name` with the weights of its torch.pt (a state_dict; loads with weights_only)."""
    model = REGISTRY[name].build()
    model.load_state_dict(torch.load(state_dict_path, map_location=map_location, weights_only=True))
    return model.eval()
