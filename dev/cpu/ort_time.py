#!/usr/bin/env python3
"""ONNX Runtime, one intra-op thread, images per thread-CPU-second (best of 5 x 0.2 s) for the same
model and batches as dev/cpu/cpu_time.cpp: the engine/ORT ratio on a shared machine.
  /work/main/.venv/bin/python dev/cpu/ort_time.py MODEL.json|MODEL.onnx [1,64,1024]"""
import pathlib
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))


def random_feed(inp, n, rng):
    """A batch of n random inputs for ONNX Runtime input `inp` (uint8 pixels or float32 in [0, 1))."""
    shape = [n] + [d if isinstance(d, int) else 1 for d in inp.shape][1:]
    if "uint8" in inp.type:
        return {inp.name: rng.integers(0, 256, size=shape, dtype=np.uint8)}
    return {inp.name: rng.random(size=shape, dtype=np.float32)}


def session(path, threads=1):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def main():
    model = sys.argv[1]
    batches = [int(b) for b in (sys.argv[2] if len(sys.argv) > 2 else "1,64,1024").split(",")]
    tmp = tempfile.TemporaryDirectory()
    if model.endswith(".onnx"):
        path = model
    else:
        import bench_cpu_peers as peers
        from cnnengine import model_format as mf
        m = mf.read_model(model)
        path = pathlib.Path(tmp.name) / "m.onnx"
        peers.export_onnx(mf.to_torch(m).eval(), dict(m.graph["input"]), path)
    s = session(path)
    inp = s.get_inputs()[0]
    rng = np.random.default_rng(0)
    for n in batches:
        feed = random_feed(inp, n, rng)
        s.run(None, feed)
        best = 1e30
        for _ in range(5):
            calls, t0 = 0, time.thread_time()
            t = t0
            while t - t0 < 0.2:
                s.run(None, feed)
                calls += 1
                t = time.thread_time()
            best = min(best, (t - t0) / calls)
        print(f"{pathlib.Path(model).stem:16s} batch {n:5d}  ort {n / best:9.0f} img/s")


if __name__ == "__main__":
    main()
