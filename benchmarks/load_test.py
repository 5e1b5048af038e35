#!/usr/bin/env python3
"""Bounded load test of cnnengine-serve (tools/serve): C concurrent clients, each sending requests of B MNIST test
images back to back for D seconds over loopback, then throughput, latency percentiles and the batch
sizes the server formed (from its metrics). Stops by itself.

  benchmarks/load_test.py --start models/lenet5.json [--serve-args "--backend cpu --instances 2"]
  benchmarks/load_test.py --http 127.0.0.1:8000 --metrics http://127.0.0.1:8002/metrics --model lenet5

--start runs cnnengine-serve on free loopback ports for the test's length; otherwise the server is given.
Every response's classes are checked against the engine (cnnengine on the cpu backend), so a load test
that returns wrong answers fails (exit 1), as does any failed request."""
import argparse
import json
import pathlib
import shlex
import statistics
import sys
import threading
import time

import numpy as np

from cnnengine import datasets
from cnnengine.serve import OUTPUT_CLASSES, ServerProcess, input_dims, scrape_metrics

REPO = pathlib.Path(__file__).resolve().parents[1]


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


def mnist_test_images(count):
    for d in (REPO.parent / "shared" / "data" / "mnist", pathlib.Path("/work/shared/data/mnist")):
        f = d / "t10k-images-idx3-ubyte.gz"
        if f.is_file():
            return datasets.read_idx(f)[:count]
    return datasets.read_idx(datasets.mnist_files("test")[0])[:count]


def client_loop(protocol, url, model, input_name, images, expected, batch, deadline, shape, out, errors, seed):
    if protocol == "grpc":
        import tritonclient.grpc as tc
    else:
        import tritonclient.http as tc
    client = tc.InferenceServerClient(url)
    rng = np.random.default_rng(seed)
    latencies = []
    wrong = 0
    try:
        while time.monotonic() < deadline:
            start = int(rng.integers(0, len(images) - batch + 1))
            x = np.ascontiguousarray(images[start:start + batch].reshape((batch, *shape)))
            inp = tc.InferInput(input_name, list(x.shape), "UINT8")
            inp.set_data_from_numpy(x)
            t0 = time.perf_counter()
            try:
                result = client.infer(model, [inp], outputs=[tc.InferRequestedOutput(OUTPUT_CLASSES)])
            except Exception as e:  # counted, reported, and the test fails
                errors.append(str(e))
                continue
            latencies.append(time.perf_counter() - t0)
            wrong += int(np.count_nonzero(result.as_numpy(OUTPUT_CLASSES).reshape(-1) != expected[start:start + batch]))
    finally:
        client.close()
    out.append((latencies, wrong))


def run_load(args, http_url, grpc_url, metrics_url):
    import cnnengine
    engine_model = cnnengine.load(args.model_file, backend="cpu")
    images = mnist_test_images(args.images)
    expected = engine_model.predict(images)
    shape = input_dims(engine_model.input_shape)
    model = args.model or engine_model.name
    url = grpc_url if args.protocol == "grpc" else http_url

    before = scrape_metrics(metrics_url, model)
    results, errors, threads = [], [], []
    t_start = time.monotonic()
    deadline = t_start + args.duration
    for c in range(args.clients):
        t = threading.Thread(target=client_loop, args=(args.protocol, url, model, engine_model.input_name, images, expected, args.batch,
                                                       deadline, shape, results, errors, c))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t_start
    after = scrape_metrics(metrics_url, model)

    latencies = sorted(x for lat, _ in results for x in lat)
    wrong = sum(w for _, w in results)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    executions = delta.get("cnnengine_inference_exec_count", 0.0)
    inferences = delta.get("cnnengine_inference_count", 0.0)
    requests = len(latencies)
    report = {
        "model": model, "protocol": args.protocol, "clients": args.clients, "images_per_request": args.batch,
        "seconds": round(elapsed, 2), "requests": requests, "failed_requests": len(errors),
        "wrong_classes": wrong,
        "requests_per_s": round(requests / elapsed, 1),
        "images_per_s": round(requests * args.batch / elapsed, 1),
        "latency_ms": {"p50": round(percentile(latencies, 50) * 1e3, 3),
                       "p90": round(percentile(latencies, 90) * 1e3, 3),
                       "p99": round(percentile(latencies, 99) * 1e3, 3),
                       "mean": round(statistics.fmean(latencies) * 1e3, 3) if latencies else None},
        # The server's own counters over the test: images it ran, and the batches (model executions)
        # it formed from them; their ratio is the mean batch the dynamic batcher formed.
        "server": {"inferences": int(inferences), "executions": int(executions),
                   "mean_batch_formed": round(inferences / executions, 2) if executions else None,
                   "mean_queue_us": round(delta.get("cnnengine_inference_queue_duration_us", 0.0)
                                          / max(1.0, delta.get("cnnengine_inference_request_success", 0.0)), 1),
                   "mean_compute_us_per_batch": round(delta.get("cnnengine_inference_compute_duration_us", 0.0)
                                                      / max(1.0, executions), 1)},
    }
    if errors:
        report["first_error"] = errors[0]
    return report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--start", metavar="MODEL.json", help="start tools/serve with this model for the test")
    p.add_argument("--serve-args", default="", help="extra tools/serve arguments with --start (one string)")
    p.add_argument("--model-file", default=str(REPO / "models" / "lenet5.json"),
                   help="graph file of the served model, for the expected classes (default: lenet5; --start's)")
    p.add_argument("--model", help="served model name (default: the graph file's)")
    p.add_argument("--http", default="127.0.0.1:8000", help="server's HTTP address without --start")
    p.add_argument("--grpc", default="127.0.0.1:8001", help="server's gRPC address without --start")
    p.add_argument("--metrics", default="http://127.0.0.1:8002/metrics", help="server metrics URL without --start")
    p.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--duration", type=float, default=10.0, help="seconds (default: %(default)s)")
    p.add_argument("--batch", type=int, default=1, help="images per request (default: %(default)s)")
    p.add_argument("--images", type=int, default=2000, help="MNIST test images to draw requests from")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    args = p.parse_args(argv)
    if args.clients < 1 or args.batch < 1 or not 0 < args.duration <= 600 or args.images < args.batch:
        p.error("need clients >= 1, batch >= 1, 0 < duration <= 600 and images >= batch")

    if args.start:
        args.model_file = args.start
        with ServerProcess([args.start], shlex.split(args.serve_args)) as server:
            report = run_load(args, server.http_url, server.grpc_url, server.metrics_url)
        report["serve_args"] = args.serve_args
    else:
        report = run_load(args, args.http, args.grpc, args.metrics)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        pathlib.Path(args.json).write_text(text + "\n")
    return 1 if report["failed_requests"] or report["wrong_classes"] or not report["requests"] else 0


if __name__ == "__main__":
    sys.exit(main())
