#!/usr/bin/env python3
"""ONNX Runtime on a dedicated machine, wall time: per model (the zoo's model.onnx), thread count
and batch, images/s of the best and the median of `reps` rounds of at least `seconds` each, printed
as dev/cpu/zoo_time.cpp prints the engine's.
  python3 dev/cpu/ort_wall.py ZOO MODELS THREADS BATCHES [reps=3] [seconds=0.1]"""
import sys
import time

import numpy as np
import onnxruntime as ort


def session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def main():
    zoo, models, threads, batches = sys.argv[1:5]
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    seconds = float(sys.argv[6]) if len(sys.argv) > 6 else 0.1
    rng = np.random.default_rng(0)
    for name in models.split(","):
        for t in (int(x) for x in threads.split(",")):
            s = session(f"{zoo}/{name}/model.onnx", t)
            inp = s.get_inputs()[0]
            shape = [d if isinstance(d, int) else 1 for d in inp.shape]
            for n in (int(b) for b in batches.split(",")):
                if "uint8" in inp.type:
                    x = rng.integers(0, 256, size=[n] + shape[1:], dtype=np.uint8)
                else:
                    x = rng.random(size=[n] + shape[1:], dtype=np.float32)
                feed = {inp.name: x}
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
