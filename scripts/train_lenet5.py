#!/usr/bin/env python3
"""Train the seeds' LeNet-5 on MNIST or Fashion-MNIST and write it as format v1.

    .venv/bin/python scripts/train_lenet5.py --dataset mnist -o models/lenet5.json
    .venv/bin/python scripts/train_lenet5.py --dataset fashion -o models/lenet5-fashion.json

Needs the cnnengine package installed (scripts/setup.sh installs it into .venv)."""
import sys

from cnnengine.train import main

if __name__ == "__main__":
    sys.exit(main())
