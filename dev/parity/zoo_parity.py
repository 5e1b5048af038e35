"""Parity of a backend with an oracle on every zoo model's whole test set.

Runs `engine run` twice per model (the backend and precision under test, then the oracle: by
default the custom backend's per-node double path, `--no-fuse`) on the model's test images, MNIST's
10,000 for the MNIST models, the zoo's CIFAR-shaped images through the float32-input variant
(model-float.json, its preprocessed IDX written here when the zoo ships only the .npy), and prints
per model: images with the same class, those that differ where the oracle's top two are more than
--near-tie apart, and the largest output difference.

  python3 dev/parity/zoo_parity.py --zoo /tmp/zoo --engine build/engine --mnist data/mnist \
      --backend custom --precisions fp32,fp16 [--oracle-backend custom --oracle-flags=--no-fuse]

Exit status 1 when any model has a clear-margin class change at fp32.
"""
import argparse
import json
import pathlib
import shlex
import subprocess
import sys
import tempfile

import numpy as np


def float_images(zoo: pathlib.Path, name: str, info: dict, work: pathlib.Path) -> pathlib.Path:
    """The model's preprocessed test images as IDX float32 (big-endian), as the zoo builder writes."""
    shipped = zoo / name / info.get("test_images_float", "test-images-float.idx")
    if shipped.is_file():
        return shipped
    x = np.load(zoo / name / info["test_images"])
    pre = info["preprocess"]
    c = x.shape[1]
    f32 = np.float32
    a = (x.astype(f32) * f32(pre["scale"]) - np.asarray(pre["mean"], f32).reshape(1, c, 1, 1)) \
        / np.asarray(pre["std"], f32).reshape(1, c, 1, 1)
    path = work / f"{name}-float.idx"
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 0x0D, a.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in a.shape))
        f.write(a.astype(">f4").tobytes())
    return path


def outputs(engine, model, data, backend, flags, npy: pathlib.Path) -> np.ndarray:
    cmd = [engine, "run", str(model), str(data), "--backend", backend, "--dump-outputs", str(npy), *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
    return np.load(npy)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", required=True, type=pathlib.Path)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--mnist", required=True, type=pathlib.Path, help="folder with t10k-images-idx3-ubyte.gz")
    ap.add_argument("--models", help="comma-separated (default: every zoo model)")
    ap.add_argument("--backend", default="custom")
    ap.add_argument("--precisions", default="fp32")
    ap.add_argument("--flags", default="", help="extra flags for the backend under test")
    ap.add_argument("--oracle-backend", default="custom")
    ap.add_argument("--oracle-flags", default="--no-fuse")
    ap.add_argument("--near-tie", type=float, default=1e-5)
    args = ap.parse_args(argv)

    zoo = json.loads((args.zoo / "zoo.json").read_text())
    names = args.models.split(",") if args.models else sorted(zoo)
    bad = False
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        print("| model | precision | images | same class | clear-margin changes | max abs diff |")
        print("|---|---|---|---|---|---|")
        for name in names:
            info = zoo[name]
            if info["dataset"] == "mnist":
                model, data = args.zoo / name / "model.json", args.mnist / "t10k-images-idx3-ubyte.gz"
            else:
                model, data = args.zoo / name / "model-float.json", float_images(args.zoo, name, info, work)
            try:
                want = outputs(args.engine, model, data, args.oracle_backend, shlex.split(args.oracle_flags),
                               work / "oracle.npy")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"| {name} | oracle | failed: {e} |||")
                bad = True
                continue
            top2 = np.sort(want, axis=1)[:, -2:]
            clear = (top2[:, 1] - top2[:, 0]) > args.near_tie
            for p in args.precisions.split(","):
                try:
                    got = outputs(args.engine, model, data, args.backend,
                                  ["--precision", p, *shlex.split(args.flags)], work / "got.npy")
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"| {name} | {p} | failed: {e} |||")
                    bad = True
                    continue
                same = int((got.argmax(1) == want.argmax(1)).sum())
                changes = int(((got.argmax(1) != want.argmax(1)) & clear).sum())
                diff = float(np.abs(got.astype(np.float64) - want).max())
                print(f"| {name} | {p} | {len(want)} | {same} | {changes} | {diff:.3g} |", flush=True)
                bad |= p == "fp32" and changes > 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
