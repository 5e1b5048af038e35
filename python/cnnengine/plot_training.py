"""Draw the learning curve that `engine train` writes (OUT.curve.json) as a PNG.

    python3 -m cnnengine.plot_training OUT.curve.json -o OUT.curve.png

Left: every step's batch loss (thin) and each epoch's training and validation loss; right: each
epoch's training and validation accuracy. `engine train` runs this itself after training, with a
Python that has this package installed; beyond the package it needs only matplotlib.
"""
import argparse
import json
import os
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("curve", help="OUT.curve.json written by engine train")
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    args = p.parse_args(argv)
    with open(args.curve, encoding="utf-8") as f:
        doc = json.load(f)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = doc["epochs"]
    steps = doc["steps"]
    n_epochs = len(epochs)
    # Steps on the epoch axis: step i of epoch e sits at e - 1 + (its index in the epoch + 1) / count.
    xs, counts = [], {}
    for e in steps["epoch"]:
        counts[e] = counts.get(e, 0) + 1
    seen = {}
    for e in steps["epoch"]:
        seen[e] = seen.get(e, 0) + 1
        xs.append(e - 1 + seen[e] / counts[e])
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot(xs, steps["loss"], lw=0.5, alpha=0.4, color="tab:blue", label="batch loss")
    ex = [r["epoch"] for r in epochs]
    ax_loss.plot(ex, [r["loss"] for r in epochs], "o-", color="tab:blue", label="training loss (epoch)")
    if any(r["val_loss"] is not None for r in epochs):
        ax_loss.plot(ex, [r["val_loss"] for r in epochs], "s-", color="tab:orange", label="validation loss")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("cross-entropy")
    ax_loss.set_yscale("log")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    ax_acc.plot(ex, [100 * r["accuracy"] for r in epochs], "o-", color="tab:blue", label="training")
    if any(r["val_accuracy"] is not None for r in epochs):
        ax_acc.plot(ex, [100 * r["val_accuracy"] for r in epochs], "s-", color="tab:orange", label="validation")
    best = doc.get("best_epoch")
    if best:
        ax_acc.axvline(best, color="gray", ls=":", label=f"kept: epoch {best}")
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.grid(alpha=0.3)
    ax_acc.legend()
    run = doc.get("run", {})
    fig.suptitle(f"{run.get('model', '')}: {run.get('optimizer', '')}, batch {run.get('batch', '')}, "
                 f"{n_epochs} epoch{'s' if n_epochs != 1 else ''}, backend {run.get('backend', '')}", fontsize=10)
    fig.tight_layout()
    tmp = args.output + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
