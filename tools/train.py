#!/usr/bin/env python3
"""Train the seeds' LeNet-5 on MNIST or Fashion-MNIST and write it as format v1.

    .venv/bin/python tools/train.py --dataset mnist -o models/lenet5.json
    .venv/bin/python tools/train.py --dataset fashion -o models/lenet5-fashion.json
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cnnengine._bootstrap import ensure_venv  # noqa: E402

ensure_venv(__file__)
from cnnengine.train import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
