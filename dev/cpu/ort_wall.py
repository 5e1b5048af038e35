#!/usr/bin/env python3
"""ONNX Runtime on a dedicated machine, wall time: per model (the zoo's model.onnx), thread count
and batch, images/s of the best and the median of `reps` rounds of at least `seconds` each, printed
as dev/cpu/zoo_time.cpp prints the engine's.
  python3 dev/cpu/ort_wall.py ZOO MODELS THREADS BATCHES [reps=3] [seconds=0.1]"""
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ort_time import random_feed, session  # noqa: E402


def main():
    zoo, models, threads, batches = sys.argv[1:5]
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    seconds = float(sys.argv[6]) if len(sys.argv) > 6 else 0.1
    rng = np.random.default_rng(0)
    for name in models.split(","):
        for t in (int(x) for x in threads.split(",")):
            s = session(f"{zoo}/{name}/model.onnx", t)
            inp = s.get_inputs()[0]
            for n in (int(b) for b in batches.split(",")):
                feed = random_feed(inp, n, rng)
                s.run(None, feed)
                rates = []
                for _ in range(reps):
                    calls, t0 = 0, time.perf_counter()
                    t1 = t0
                    while t1 - t0 < seconds:
                        s.run(None, feed)
                        calls += 1
                        t1 = time.perf_counter()
                    rates.append(n * calls / (t1 - t0))
                rates.sort()
                print(f"ort    {name:16s} -      threads {t:2d} batch {n:5d}  best {rates[-1]:10.0f}  median "
                      f"{rates[(len(rates) - 1) // 2]:10.0f} img/s", flush=True)


if __name__ == "__main__":
    main()
