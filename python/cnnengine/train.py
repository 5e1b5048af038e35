"""Training of the seeds' LeNet-5 on MNIST or Fashion-MNIST (CPU, deterministic).

The architecture is fixed (lenet5.py); what differs per dataset is the recipe in RECIPES: Adam with
a linear warm-up and cosine decay, and light augmentation (random shifts; horizontal flips for
Fashion-MNIST, whose classes are mirror-symmetric) that the small tanh network needs to reach 90%
on Fashion-MNIST. The trained module is exported with the same code path as cnnengine-export, checked,
read back from disk, and its test accuracy is measured on the written files.
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time

import numpy as np

# Chosen on a 5,000-image validation split held out of train (--val 5000), never on the test set,
# within a 10-minute CPU training budget; models/README.md has the candidates and their accuracies.
RECIPES = {
    # epochs, batch, lr, weight decay, max shift (pixels), horizontal flip
    "mnist": dict(epochs=30, batch_size=128, lr=2e-3, weight_decay=0.0, shift=2, flip=False),
    "fashion": dict(epochs=60, batch_size=128, lr=2e-3, weight_decay=0.0, shift=1, flip=True),
}
DEFAULT_OUTPUT = {"mnist": "models/lenet5.json", "fashion": "models/lenet5-fashion.json"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="train", description="Train the seeds' LeNet-5 and write it as format v1.")
    p.add_argument("--dataset", choices=sorted(RECIPES), default="mnist")
    p.add_argument("--epochs", type=int, help="default: the dataset's recipe")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--lr", type=float, help="peak Adam learning rate")
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--shift", type=int, help="largest random shift in pixels (0: none)")
    p.add_argument("--flip", type=int, choices=[0, 1], help="random horizontal flips (1) or not (0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--val", type=int, default=0,
                   help="hold out the last VAL training images and report accuracy on them each epoch "
                        "(for choosing a recipe without looking at the test set)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu",
                   help="torch device to train on (default cpu; the committed models are trained on the CPU)")
    p.add_argument("-o", "--output", help="graph file to write (default models/lenet5[-fashion].json)")
    p.add_argument("--no-write", action="store_true", help="train and evaluate only")
    p.add_argument("--no-engine", action="store_true", help="leave the engine out of the export check")
    args = p.parse_args(argv)
    for k, v in RECIPES[args.dataset].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.flip = bool(args.flip)
    args.output = args.output or DEFAULT_OUTPUT[args.dataset]
    return args


def _progress(msg: str, final: bool = False) -> None:
    if sys.stdout.isatty():
        sys.stdout.write("\r\033[K" + msg + ("\n" if final else ""))
        sys.stdout.flush()
    elif final:
        print(msg, flush=True)


def augment(x, gen, shift: int, flip: bool):
    """Random integer shifts (zero fill) and optional horizontal flips of a uint8 [N, 1, H, W] batch."""
    import torch
    n, _, h, w = x.shape
    if flip:
        mask = torch.rand(n, generator=gen) < 0.5
        x = torch.where(mask[:, None, None, None], x.flip(3), x)
    if shift > 0:
        padded = torch.nn.functional.pad(x, (shift, shift, shift, shift))
        dy = torch.randint(0, 2 * shift + 1, (n,), generator=gen)
        dx = torch.randint(0, 2 * shift + 1, (n,), generator=gen)
        rows = (dy[:, None] + torch.arange(h)[None, :])[:, :, None]
        cols = (dx[:, None] + torch.arange(w)[None, :])[:, None, :]
        x = padded[torch.arange(n)[:, None, None], 0, rows, cols][:, None]
    return x


def evaluate(forward, images, labels, batch: int = 1000) -> tuple[int, np.ndarray]:
    """(correct count, predicted classes) of `forward` (uint8 batch -> scores) over the whole set."""
    import torch
    preds = []
    with torch.no_grad():
        for i in range(0, len(images), batch):
            preds.append(forward(images[i:i + batch]).argmax(1))
    pred = torch.cat(preds).numpy()
    return int((pred == labels.numpy()).sum()), pred


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    import torch.nn.functional as F

    from . import datasets, lenet5
    from . import export_core as export
    from .model_format import read_model, to_torch

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        # cuBLAS is deterministic only with a fixed workspace; it must be set before its first use.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    train_files, test_files = datasets.dataset_files(args.dataset, "train"), datasets.dataset_files(args.dataset, "test")
    x_train, y_train = (torch.from_numpy(a) for a in datasets.load(args.dataset, "train"))
    x_test, y_test = (torch.from_numpy(a) for a in datasets.load(args.dataset, "test"))
    if args.val:
        x_val, y_val = x_train[-args.val:], y_train[-args.val:]
        x_train, y_train = x_train[:-args.val], y_train[:-args.val]
    print(f"dataset {args.dataset}: train {len(x_train)} from {train_files[0]}, test {len(x_test)} from "
          f"{test_files[0]}" + (f", validation {args.val} (held out of train)" if args.val else ""))
    print(f"recipe: epochs {args.epochs}, batch {args.batch_size}, Adam lr {args.lr:g} (warm-up 1 epoch, "
          f"cosine decay), weight decay {args.weight_decay:g}, shift ±{args.shift}px, flip {args.flip}, "
          f"seed {args.seed}, {args.threads} threads, device {device}", flush=True)

    module = lenet5.build_module()
    assert sum(p.numel() for p in module.parameters()) == lenet5.PARAMETERS
    module.to(device)
    net = lenet5.logits(module)
    opt = torch.optim.Adam(module.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps_per_epoch = math.ceil(len(x_train) / args.batch_size)
    total = steps_per_epoch * args.epochs
    warm = steps_per_epoch

    def lr_factor(step):
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)

    t_start = time.time()
    for epoch in range(1, args.epochs + 1):
        module.train()
        t0 = time.time()
        perm = torch.randperm(len(x_train), generator=gen)
        loss_sum, correct, seen = 0.0, 0, 0
        for k in range(steps_per_epoch):
            idx = perm[k * args.batch_size:(k + 1) * args.batch_size]
            xb = augment(x_train[idx], gen, args.shift, args.flip).to(device)
            yb = y_train[idx].to(device)
            out = net(lenet5.preprocess(xb))
            loss = F.cross_entropy(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += float(loss) * len(idx)
            correct += int((out.argmax(1) == yb).sum())
            seen += len(idx)
            if k % 20 == 0:
                _progress(f"epoch {epoch}/{args.epochs} [{seen}/{len(x_train)}] loss {loss_sum / seen:.4f}")
        msg = (f"epoch {epoch:>2}/{args.epochs}  loss {loss_sum / seen:.4f}  train acc {100 * correct / seen:.2f}%  "
               f"lr {sched.get_last_lr()[0]:.2e}  {time.time() - t0:.1f}s")
        if args.val:
            module.eval()
            c, _ = evaluate(lambda b: net(lenet5.preprocess(b.to(device))).cpu(), x_val, y_val)
            msg += f"  val acc {100 * c / len(x_val):.2f}%"
        _progress(msg, final=True)
    train_seconds = time.time() - t_start
    module.eval().to("cpu")
    print(f"training took {train_seconds:.0f}s ({train_seconds / args.epochs:.1f}s per epoch)")

    c_mod, _ = evaluate(lambda b: module(lenet5.preprocess(b)), x_test, y_test)
    print(f"test accuracy (trained module, PyTorch float32): {100 * c_mod / len(x_test):.2f}% "
          f"({c_mod}/{len(x_test)})")
    if args.no_write:
        return 0

    command = "scripts/train_lenet5.py " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    description = (f"LeNet-5 (seeds' variant, 61,706 parameters) trained on {args.dataset} train "
                   f"({len(x_train)} images), seed {args.seed}, {args.epochs} epochs, Adam lr {args.lr:g} "
                   f"with warm-up and cosine decay, batch {args.batch_size}, shifts ±{args.shift}px"
                   f"{', horizontal flips' if args.flip else ''}; reproduce with: {command}")
    graph, tensors = export.graph_from_torch_module(
        module, lenet5.input_spec(), name=os.path.splitext(os.path.basename(args.output))[0],
        labels=lenet5.labels_for(args.dataset), description=description)
    check_images = x_test[:1000].numpy()
    model, report = export.export_checked(
        args.output, graph, tensors, export.torch_source(module, graph), lambda g: check_images,
        use_engine=not args.no_engine, producer="scripts/train_lenet5.py")

    # The figure that matters is the written files' accuracy, run by the reference interpreter.
    written = read_model(args.output)
    ref = to_torch(written).eval()
    c_ref, _ = evaluate(ref, x_test, y_test)
    weights = os.path.join(os.path.dirname(args.output), written.graph["weights"]["file"])
    print(f"wrote {args.output} and {weights} ({os.path.getsize(weights):,} bytes, sha256 "
          f"{written.graph['weights']['sha256'][:16]}...)")
    print(f"test accuracy ({args.output} via the reference interpreter, float32): "
          f"{100 * c_ref / len(x_test):.2f}% ({c_ref}/{len(x_test)}) on {test_files[0]}")
    if c_ref != c_mod:
        print("error: the written model's accuracy differs from the trained module's", file=sys.stderr)
        return 1
    return 0
