#!/usr/bin/env python3
"""Random-weight format-v1 models of the zoo's shapes, for benchmarking the cpu backend before the zoo
exists (speed only: the weights are random, so accuracy means nothing).

  /work/main/.venv/bin/python dev/cpu/make_models.py OUT_DIR
"""
import hashlib
import json
import pathlib
import sys

import numpy as np
from safetensors.numpy import save_file


class Builder:
    def __init__(self, name, shape):
        self.name, self.shape, self.nodes, self.tensors = name, list(shape), [], {}
        self.rng = np.random.default_rng(0)
        self.shapes = {"image": list(shape)}

    def conv(self, x, oc, k, stride=1, same=True, act="relu"):
        c, h, w = self.shapes[x]
        p = (k - 1) // 2 if same else 0
        n = f"conv{len(self.nodes)}"
        self.tensors[n + ".weight"] = (self.rng.standard_normal((oc, c, k, k)) * np.sqrt(2 / (c * k * k))).astype("f4")
        self.tensors[n + ".bias"] = (self.rng.standard_normal(oc) * 0.05).astype("f4")
        self.nodes.append({"name": n, "op": "conv2d", "inputs": [x], "attrs": {"out_channels": oc, "kernel": [k, k],
                           "stride": [stride, stride], "padding": [p, p, p, p]},
                           "tensors": {"weight": n + ".weight", "bias": n + ".bias"}})
        ho, wo = (h + 2 * p - k) // stride + 1, (w + 2 * p - k) // stride + 1
        self.shapes[n] = [oc, ho, wo]
        return self.act(n, act)

    def act(self, x, act):
        if not act:
            return x
        n = f"{act}{len(self.nodes)}"
        self.nodes.append({"name": n, "op": act, "inputs": [x]})
        self.shapes[n] = self.shapes[x]
        return n

    def pool(self, x, k=2):
        c, h, w = self.shapes[x]
        n = f"pool{len(self.nodes)}"
        self.nodes.append({"name": n, "op": "maxpool", "inputs": [x], "attrs": {"kernel": [k, k], "stride": [k, k]}})
        self.shapes[n] = [c, h // k, w // k]
        return n

    def flatten(self, x):
        n = f"flatten{len(self.nodes)}"
        self.nodes.append({"name": n, "op": "flatten", "inputs": [x]})
        self.shapes[n] = [int(np.prod(self.shapes[x]))]
        return n

    def dense(self, x, units, act="relu"):
        k = self.shapes[x][0]
        n = f"fc{len(self.nodes)}"
        self.tensors[n + ".weight"] = (self.rng.standard_normal((units, k)) * np.sqrt(2 / k)).astype("f4")
        self.tensors[n + ".bias"] = (self.rng.standard_normal(units) * 0.05).astype("f4")
        self.nodes.append({"name": n, "op": "dense", "inputs": [x], "attrs": {"units": units},
                           "tensors": {"weight": n + ".weight", "bias": n + ".bias"}})
        self.shapes[n] = [units]
        return self.act(n, act)

    def binary(self, op, xs):
        n = f"{op}{len(self.nodes)}"
        self.nodes.append({"name": n, "op": op, "inputs": list(xs)})
        s = list(self.shapes[xs[0]])
        if op == "concat":
            s[0] = sum(self.shapes[x][0] for x in xs)
        self.shapes[n] = s
        return n

    def write(self, out):
        out.mkdir(parents=True, exist_ok=True)
        st = out / f"{self.name}.safetensors"
        save_file(self.tensors, str(st))
        c = self.shape[0]
        m = {"format": "cnn-engine-model", "version": 1, "name": self.name, "description": "random weights (dev/cpu)",
             "weights": {"file": st.name, "sha256": hashlib.sha256(st.read_bytes()).hexdigest()},
             "input": {"name": "image", "dtype": "uint8", "shape": self.shape,
                       "preprocess": {"scale": 1 / 255, "mean": [0.0] * c, "std": [1.0] * c}},
             "labels": [str(i) for i in range(10)], "nodes": self.nodes, "outputs": [self.nodes[-1]["name"]]}
        (out / f"{self.name}.json").write_text(json.dumps(m, indent=1))


def vgg(name, shape, out):
    b = Builder(name, shape)
    x = "image"
    for oc in (32, 64, 128):
        x = b.conv(x, oc, 3); x = b.conv(x, oc, 3); x = b.pool(x)
    head(b, x); b.write(out)


def head(b, x, hidden=(128,)):
    x = b.flatten(x)
    for u in hidden:
        x = b.dense(x, u)
    x = b.dense(x, 10, act=None)
    b.act(x, "softmax")


def main(out):
    b = Builder("keras-cnn", [1, 28, 28])
    x = b.conv("image", 32, 3, same=False); x = b.conv(x, 64, 3, same=False); x = b.pool(x)
    head(b, x); b.write(out)

    vgg("vgg-mnist", [1, 28, 28], out)

    b = Builder("mlp", [1, 28, 28])
    head(b, "image", (512, 256)); b.write(out)

    b = Builder("two-conv-pool", [1, 28, 28])  # 2 convs 5x5, 2 maxpools, 2 dense
    x = b.conv("image", 32, 5); x = b.pool(x); x = b.conv(x, 64, 5); x = b.pool(x)
    head(b, x, (256,)); b.write(out)

    b = Builder("branches", [1, 28, 28])  # 4 convs in two branches, concat
    a = b.conv("image", 16, 3); a = b.conv(a, 32, 3)
    c = b.conv("image", 16, 5); c = b.conv(c, 32, 5)
    x = b.binary("concat", [a, c]); x = b.pool(x)
    head(b, x, ()); b.write(out)

    vgg("cifar-vgg", [3, 32, 32], out)

    b = Builder("resnet20", [3, 32, 32])
    x = b.conv("image", 16, 3)
    for stage, oc in enumerate((16, 32, 64)):
        for blk in range(3):
            stride = 2 if stage > 0 and blk == 0 else 1
            y = b.conv(x, oc, 3, stride=stride); y = b.conv(y, oc, 3, act=None)
            sc = b.conv(x, oc, 1, stride=stride, act=None) if stride == 2 else x
            x = b.act(b.binary("add", [y, sc]), "relu")
    x = b.pool(x, 8)
    head(b, x, ()); b.write(out)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
