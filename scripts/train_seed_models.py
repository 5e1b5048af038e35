#!/usr/bin/env python3
"""Train the seeds' two other models on MNIST with PyTorch (CPU) and write them as format v1.

    .venv/bin/python scripts/train_seed_models.py            # both, into models/
    .venv/bin/python scripts/train_seed_models.py --model cnn --val 5000 --no-write   # recipe choice

- seed002-cnn: seed 002's Keras CNN. 28x28 input; conv 4@2x2 relu and conv 4@2x2 relu, both with
  Keras 'same' padding (an even kernel pads one more at the bottom/right: [0, 1, 0, 1]) so the maps
  stay 28x28; max pool 4x4 stride 4 (7x7x4 = 196); dense 128 relu; dense 10 softmax; Adam.
  Seed 002 reported 94.85% after one epoch in Keras.
- seed003-mlp: seed 003's MLP. The flat 784-pixel input is the uint8 [1, 28, 28] image followed by
  a flatten node; dense 500 relu; dense 10 softmax. Seed 003 reported 80.9% test accuracy.

Node names follow what `cnnengine-export keras` gives a Keras model with layers named conv1, conv2,
pool, flatten, fc1, fc2 (a layer's activation becomes the node LAYER_ACT), so a Keras file of the
same model imports to the same graph (tests/python/test_seed_models.py checks that).

Training is deterministic (seed, 2 threads, deterministic algorithms): Adam with a one-epoch linear
warm-up then cosine decay, batch 128, cross-entropy on the logits, random shifts of up to 1 pixel,
20 epochs. The recipe was chosen on a 5,000-image validation split held out of the training set
(--val 5000), never on the test set. Dense layers are computed as 1x1 convolutions while training
(FastLinear below): Debian's torch has a generic BLAS, much slower than its oneDNN convolutions.
Each trained module is exported through the same code as `cnnengine-export torch` (checked against the reference interpreter and the engine's CPU backend),
read back, and its test accuracy measured on the written files; the engine's accuracy on the whole
test set is printed too when the engine is built.
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import shlex
import subprocess
import sys
import time
import warnings
from collections import OrderedDict

import numpy as np

SCALE = float(np.float32(1.0 / 255.0))
REPO = pathlib.Path(__file__).resolve().parents[1]

RECIPES = {
    # epochs, batch, peak lr, max shift in pixels
    "cnn": dict(epochs=20, batch_size=128, lr=3e-3, shift=1),
    "mlp": dict(epochs=20, batch_size=128, lr=1e-3, shift=1),
}
OUTPUTS = {"cnn": "models/seed002-cnn.json", "mlp": "models/seed003-mlp.json"}
SEED_REPORTED = {"cnn": "94.85% (seed 002, Keras, one epoch)", "mlp": "80.9% (seed 003)"}


def _fast_linear_class():
    import torch.nn.functional as F
    from torch import nn

    class FastLinear(nn.Linear):
        """nn.Linear computed as a 1x1 convolution. Debian's torch is built with a generic
        (reference) BLAS that runs nn.Linear's matrix products at ~3 GFLOP/s per core; the same
        products as 1x1 convolutions go through oneDNN at ~30. Same parameters, same math; the
        exporter sees an nn.Linear (a subclass) and writes a dense node."""

        def forward(self, x):
            y = F.conv2d(x[:, :, None, None], self.weight[:, :, None, None], self.bias)
            return y.flatten(1)
    return FastLinear


def build(kind: str):
    from torch import nn
    Linear = _fast_linear_class()
    if kind == "cnn":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that 'same' with an even kernel is asymmetric
            layers = OrderedDict([
                ("conv1", nn.Conv2d(1, 4, 2, padding="same")),   # pads [0, 1, 0, 1], as Keras does
                ("conv1_relu", nn.ReLU()),
                ("conv2", nn.Conv2d(4, 4, 2, padding="same")),
                ("conv2_relu", nn.ReLU()),
                ("pool", nn.MaxPool2d(4, stride=4)),
                ("flatten", nn.Flatten()),
                ("fc1", Linear(196, 128)),
                ("fc1_relu", nn.ReLU()),
                ("fc2", Linear(128, 10)),
                ("fc2_softmax", nn.Softmax(dim=1)),
            ])
    else:
        layers = OrderedDict([
            ("flatten", nn.Flatten()),
            ("fc1", Linear(784, 500)),
            ("fc1_relu", nn.ReLU()),
            ("fc2", Linear(500, 10)),
            ("fc2_softmax", nn.Softmax(dim=1)),
        ])
    return nn.Sequential(layers)


def input_spec() -> dict:
    return {"name": "image", "dtype": "uint8", "shape": [1, 28, 28],
            "preprocess": {"scale": SCALE, "mean": [0.0], "std": [1.0]}}


def engine_accuracy(model_path: pathlib.Path, images: pathlib.Path, labels: pathlib.Path) -> dict | None:
    from cnnengine import export
    engine = export.engine_binary()
    if engine is None:
        return None
    proc = subprocess.run([str(engine), "run", str(model_path), str(images), "--labels", str(labels),
                           "--backend", "cpu", "--json"], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"engine failed: {proc.stderr}")
    return json.loads(proc.stdout)


def train_one(kind: str, args) -> int:
    import torch
    import torch.nn.functional as F

    from cnnengine import datasets, export
    from cnnengine.model_format import read_model, to_torch
    from cnnengine.train import augment, evaluate

    recipe = dict(RECIPES[kind])
    for k in recipe:
        if getattr(args, k) is not None:
            recipe[k] = getattr(args, k)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x_train, y_train = (torch.from_numpy(a) for a in datasets.load("mnist", "train"))
    x_test, y_test = (torch.from_numpy(a) for a in datasets.load("mnist", "test"))
    if args.val:
        x_val, y_val = x_train[-args.val:], y_train[-args.val:]
        x_train, y_train = x_train[:-args.val], y_train[:-args.val]
    module = build(kind)
    net = module[:-1]  # logits, for a sound cross-entropy
    params = sum(p.numel() for p in module.parameters())
    print(f"== {kind}: {params:,} parameters; epochs {recipe['epochs']}, batch {recipe['batch_size']}, Adam lr "
          f"{recipe['lr']:g} (1-epoch warm-up, cosine decay), shifts ±{recipe['shift']}px, seed {args.seed}; "
          f"train {len(x_train)}" + (f", validation {args.val} (held out of train)" if args.val else ""), flush=True)
    opt = torch.optim.Adam(module.parameters(), lr=recipe["lr"])
    steps = math.ceil(len(x_train) / recipe["batch_size"])
    total = steps * recipe["epochs"]

    def factor(step):
        if step < steps:
            return (step + 1) / steps
        return 0.5 * (1 + math.cos(math.pi * (step - steps) / max(1, total - steps)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)

    t_start = time.time()
    for epoch in range(1, recipe["epochs"] + 1):
        module.train()
        t0 = time.time()
        perm = torch.randperm(len(x_train), generator=gen)
        loss_sum, correct = 0.0, 0
        for k in range(steps):
            idx = perm[k * recipe["batch_size"]:(k + 1) * recipe["batch_size"]]
            xb = augment(x_train[idx], gen, recipe["shift"], False)
            out = net(xb.to(torch.float32) * SCALE)
            loss = F.cross_entropy(out, y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += float(loss) * len(idx)
            correct += int((out.argmax(1) == y_train[idx]).sum())
        msg = (f"epoch {epoch:>2}/{recipe['epochs']}  loss {loss_sum / len(x_train):.4f}  "
               f"train acc {100 * correct / len(x_train):.2f}%  {time.time() - t0:.1f}s")
        if args.val:
            module.eval()
            c, _ = evaluate(lambda b: net(b.to(torch.float32) * SCALE), x_val, y_val)
            msg += f"  val acc {100 * c / len(x_val):.2f}%"
        print(msg, flush=True)
    seconds = time.time() - t_start
    module.eval()
    c_mod, _ = evaluate(lambda b: module(b.to(torch.float32) * SCALE), x_test, y_test)
    print(f"training took {seconds:.0f}s; test accuracy (trained module, PyTorch float32): "
          f"{100 * c_mod / len(x_test):.2f}% ({c_mod}/{len(x_test)}); the seed reported {SEED_REPORTED[kind]}")
    if args.no_write:
        return 0

    out = pathlib.Path(args.output_dir) / pathlib.Path(OUTPUTS[kind]).name
    rest, skip = [], False
    for a in args.argv:  # the command that retrains this one model
        if skip or a == "--model" or a.startswith("--model="):
            skip = a == "--model"
            continue
        rest.append(a)
    command = " ".join(["scripts/train_seed_models.py", "--model", kind] + [shlex.quote(a) for a in rest])
    what = ("seed 002's CNN: conv 4@2x2 relu, conv 4@2x2 relu (Keras 'same': pad [0,1,0,1]), maxpool 4x4/4, "
            "dense 128 relu, dense 10 softmax" if kind == "cnn" else
            "seed 003's MLP: 784 -> dense 500 relu -> dense 10 softmax")
    description = (f"{what}; {params:,} parameters; trained with PyTorch on MNIST train ({len(x_train):,} images), "
                   f"seed {args.seed}, {recipe['epochs']} epochs, Adam lr {recipe['lr']:g} with warm-up and cosine "
                   f"decay, batch {recipe['batch_size']}"
                   f"{', shifts ±%dpx' % recipe['shift'] if recipe['shift'] else ''}; reproduce with: {command}")
    graph, tensors = export.graph_from_torch_module(module, input_spec(), name=out.stem,
                                                    labels=[str(d) for d in range(10)], description=description)
    check_images = x_test[:1000].numpy()
    export.export_checked(out, graph, tensors, export.torch_source(module, graph), lambda g: check_images,
                          producer="scripts/train_seed_models.py")
    written = read_model(out)
    c_ref, _ = evaluate(to_torch(written).eval(), x_test, y_test)
    print(f"wrote {out}; test accuracy ({out.name} via the reference interpreter, float32): "
          f"{100 * c_ref / len(x_test):.2f}% ({c_ref}/{len(x_test)})")
    images, labels = datasets.mnist_files("test")
    eng = engine_accuracy(out, images, labels)
    if eng is not None:
        print(f"engine run {out} {images} --backend cpu: accuracy {100 * eng['accuracy']:.2f}% "
              f"({eng['correct']}/{eng['images']})")
    if c_ref != c_mod:
        print("error: the written model's accuracy differs from the trained module's", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="train_seed_models", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["cnn", "mlp", "both"], default="both")
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch-size", dest="batch_size", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--shift", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--val", type=int, default=0, help="hold out the last VAL training images for validation")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--output-dir", default=str(REPO / "models"))
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    args.argv = argv
    import torch
    warnings.filterwarnings("ignore", message="Using padding='same' with even kernel")
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    rc = 0
    for kind in (["cnn", "mlp"] if args.model == "both" else [args.model]):
        rc |= train_one(kind, args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
