#!/usr/bin/env python3
"""Accuracy of each model at each precision, on its test set: the model is
calibrated for int8 on the first --calibration-images of its training set (`engine calibrate`,
--method), then `engine run --precision P` on the test set for fp32 and each of --precisions, with
the outputs dumped; printed and written as JSON: accuracy, the share of images whose class differs
from fp32's, and max |p - p_fp32| over every probability.

    .venv/bin/python benchmarks/precision_report.py --backend reference --json precision-reference.json

The reference backend emulates fp16, bf16 and int8 (engine/reference/reduced_precision.hpp); GPU
backends report the precisions they compute (others are refused, and listed as such).

--check holds every row to its precision's bound (BOUNDS, stated in docs/design/precision.md) and exits 1
when one is missed or a precision is refused.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

from cnnengine import datasets
from cnnengine.export import engine_binary

REPO = pathlib.Path(__file__).resolve().parents[1]

MODELS = [("lenet5", "mnist"), ("lenet5-fashion", "fashion"), ("seed002-cnn", "mnist"), ("seed003-mlp", "mnist")]

# Per precision: the largest share of test images whose class may differ from fp32's, and the largest
# accuracy change (points). fp16 keeps 11 significant bits: the required bound (>= 99.9 % the
# same class, accuracy within 0.1 point). bf16 keeps 8, a rounding 8x coarser, and a model whose fp32
# margins are thin (lenet5-fashion: 90.75 % accurate, many images between two classes) changes more
# classes without losing accuracy: >= 99.7 % the same class, accuracy within 0.1 point. int8: the
# required accuracy within 0.5 point, and >= 99 % the same class.
BOUNDS = {"fp16": (0.001, 0.1), "bf16": (0.003, 0.1), "int8": (0.01, 0.5)}


def check_rows(rows):
    """The bound each row misses (a list of lines; empty when every row holds)."""
    fp32 = {r["model"]: r["accuracy"] for r in rows if r.get("precision") == "fp32" and "accuracy" in r}
    missed = []
    for r in rows:
        prec = r.get("precision")
        if "refused" in r:
            missed.append(f"{r['model']} {prec}: refused ({r['refused']})")
            continue
        if prec not in BOUNDS:
            continue
        changed, points = BOUNDS[prec]
        if r["class_changed"] > changed + 1e-12:  # shares of a count: exact to far below that
            missed.append(f"{r['model']} {prec}: {100 * r['class_changed']:.2f} % of classes changed "
                          f"(bound {100 * changed:.1f} %)")
        delta = 100 * abs(r["accuracy"] - fp32[r["model"]])
        if delta > points + 1e-9:
            missed.append(f"{r['model']} {prec}: accuracy moved {delta:.2f} points (bound {points})")
    return missed


def run(engine, *args):
    proc = subprocess.run([str(engine), "-q", *map(str, args)], capture_output=True, text=True)
    return proc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="reference")
    ap.add_argument("--precisions", default="fp16,bf16,int8")
    ap.add_argument("--calibration-images", type=int, default=1000)
    ap.add_argument("--method", default="max", choices=["max", "percentile"])
    ap.add_argument("--percentile", type=float, default=99.99)
    ap.add_argument("--engine", default=None, help="engine binary (default: build/engine or $ENGINE_BIN)")
    ap.add_argument("--json")
    ap.add_argument("--check", action="store_true", help="exit 1 when a row misses its precision's bound")
    ap.add_argument("--limit", type=int, default=None, help="only the first N test images (default: all)")
    a = ap.parse_args(argv)
    engine = pathlib.Path(a.engine) if a.engine else engine_binary()
    if engine is None:
        ap.error("no engine binary: build it first (scripts/setup.sh) or pass --engine")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for name, dataset in MODELS:
            model = REPO / "models" / f"{name}.json"
            train_images, _ = datasets.dataset_files(dataset, "train")
            test_images, test_labels = datasets.dataset_files(dataset, "test")
            cal = tmp / f"{name}-calibrated.json"
            extra = ["--percentile", a.percentile] if a.method == "percentile" else []
            p = run(engine, "calibrate", model, train_images, "-o", cal, "--images", a.calibration_images,
                    "--method", a.method, *extra)
            if p.returncode != 0:
                sys.exit(f"calibrating {name} failed: {p.stderr.strip()}")
            probs = {}
            for prec in ["fp32"] + a.precisions.split(","):
                dump = tmp / f"{name}-{prec}.npy"
                limit = ["--limit", a.limit] if a.limit else []
                p = run(engine, "run", cal, test_images, "--labels", test_labels, "--backend", a.backend,
                        "--precision", prec, "--json", "--dump-outputs", dump, *limit)
                if p.returncode != 0:
                    rows.append({"model": name, "precision": prec, "backend": a.backend, "refused": p.stderr.strip()})
                    print(f"{name:15s} {prec:5s} refused: {p.stderr.strip()}")
                    continue
                r = json.loads(p.stdout)
                probs[prec] = np.load(dump)
                row = {"model": name, "dataset": dataset, "precision": prec, "backend": a.backend,
                       "images": r["images"], "accuracy": r["accuracy"]}
                if prec != "fp32":
                    ref = probs["fp32"]
                    row["class_changed"] = float((probs[prec].argmax(1) != ref.argmax(1)).mean())
                    row["max_abs_dp"] = float(np.abs(probs[prec].astype(np.float64) - ref).max())
                rows.append(row)
                print(f"{name:15s} {prec:5s} accuracy {100 * row['accuracy']:6.2f}%"
                      + (f"  class changed {100 * row['class_changed']:.2f}%  max |dp| {row['max_abs_dp']:.2e}"
                         if prec != "fp32" else ""), flush=True)
    if a.json:
        pathlib.Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(a.json).write_text(json.dumps({
            "backend": a.backend, "calibration": {"images": a.calibration_images, "method": a.method,
                                                   "percentile": a.percentile if a.method == "percentile" else None},
            "rows": rows}, indent=1) + "\n")
    if a.check:
        missed = check_rows(rows)
        for line in missed:
            print(f"bound missed: {line}")
        print("every row within its precision's bound" if not missed else f"{len(missed)} bound(s) missed")
        return 1 if missed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
