#!/usr/bin/env python3
"""Stands in for build/engine in the exporter's tests: parses the documented CLI
(`engine run MODEL DATA --backend reference --dump-outputs FILE.npy`) and answers with the reference
interpreter, optionally perturbed by $FAKE_ENGINE_OFFSET, to test both outcomes of the check."""
import argparse
import os

import numpy as np

from cnnengine import datasets, model_format

p = argparse.ArgumentParser()
p.add_argument("cmd", choices=["run"])
p.add_argument("model")
p.add_argument("data")
p.add_argument("--backend", required=True)
p.add_argument("--dump-outputs", required=True)
a = p.parse_args()
import torch  # noqa: E402

model = model_format.read_model(a.model)
x = datasets.read_idx(a.data)
x = x.reshape((len(x),) + tuple(model.graph["input"]["shape"]))
with torch.no_grad():
    y = model_format.to_torch(model)(torch.from_numpy(x)).numpy()
y = y + np.float32(float(os.environ.get("FAKE_ENGINE_OFFSET", "0")))
np.save(a.dump_outputs, y.astype(np.float32))
