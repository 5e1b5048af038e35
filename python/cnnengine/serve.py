"""cnnengine-serve: models served by a real Triton Inference Server (PyTriton brings the tritonserver
binary) over the Open Inference Protocol (KServe v2: HTTP and gRPC), with Triton's dynamic batching,
health and readiness endpoints and Prometheus metrics. docs/design/serving.md has the protocol details,
measurements and how to scale out."""
from __future__ import annotations

import argparse
import json
import logging
import pathlib
import signal
import sys
from typing import Sequence

import numpy as np

# The input keeps the name the graph file gives it (models/*.json: "image"); the outputs are these.
OUTPUT_PROBABILITIES = "probabilities"
OUTPUT_CLASSES = "classes"

LOG = logging.getLogger("cnnengine.serve")


def input_dims(input_shape: tuple[int, int, int]) -> tuple[int, ...]:
    """Per-image dims Triton is told: [H, W] for one-channel models (requests are [N, H, W]),
    [C, H, W] otherwise. Triton checks every request against them, so one model takes one rank."""
    c, h, w = input_shape
    return (h, w) if c == 1 else (c, h, w)


def make_infer_fn(model):
    """The function one Triton model instance runs: the batch Triton formed, through the engine."""
    from pytriton.decorators import batch

    @batch
    def infer(**inputs):
        images = inputs[model.input_name]
        # Triton has checked dtype and shape against the config already; the engine checks again
        # and its ValueError becomes the request's error response.
        probabilities = model.run(images)
        classes = probabilities.argmax(axis=1).astype(np.int64).reshape(-1, 1)
        return {OUTPUT_PROBABILITIES: probabilities, OUTPUT_CLASSES: classes}

    return infer


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="cnnengine-serve",
        description="Serve format v1 models through Triton Inference Server (KServe v2 over HTTP and gRPC), "
                    "each under the name its graph file gives it.")
    p.add_argument("models", nargs="+", metavar="MODEL.json", help="format v1 graph files")
    p.add_argument("--backend", default=None,
                   help="engine backend: cpu, reference, custom, cudnn (default: the best available)")
    p.add_argument("--address", default="127.0.0.1",
                   help="address HTTP, gRPC and metrics listen on (default: %(default)s, loopback only; "
                        "0.0.0.0 exposes the server on every interface)")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument("--max-batch", type=int, default=256,
                   help="largest batch Triton forms or accepts in one request (default: %(default)s)")
    p.add_argument("--max-queue-delay-us", type=int, default=100,
                   help="how long Triton may hold a request to batch it with later ones (default: %(default)s)")
    p.add_argument("--instances", type=int, default=1,
                   help="model instances per model, each with its own engine executable (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0, help="CPU backends: threads per instance (0: all cores)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16", "int8"],
                   help="as engine run --precision: fp16 / bf16 on tensor cores with --backend cudnn, emulated by "
                        "the reference backend; a backend that does not compute it refuses before the server starts")
    p.add_argument("--log-verbose", type=int, default=0, help="Triton's log verbosity (0: quiet)")
    args = p.parse_args(argv)
    for name in ("max_batch", "instances"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.max_queue_delay_us < 0:
        p.error("--max-queue-delay-us must be >= 0")
    for port in ("http_port", "grpc_port", "metrics_port"):
        if not 1 <= getattr(args, port) <= 65535:
            p.error(f"--{port.replace('_', '-')} must be a TCP port (1..65535)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="serve: %(message)s")

    import cnnengine
    from pytriton.triton import TritonConfig
    from tritonclient.utils import InferenceServerException

    # Every model and instance is loaded before the server starts: a bad file or backend fails here,
    # with the engine's message, not at the first request.
    served = {}
    for path in args.models:
        try:
            instances = [cnnengine.load(path, backend=args.backend, precision=args.precision,
                                        max_batch=args.max_batch, threads=args.threads)
                         for _ in range(args.instances)]
        except (cnnengine.EngineError, FileNotFoundError, ValueError) as e:
            # FileNotFoundError's strerror is the engine's message; str() would prefix "[Errno 2]".
            print(f"serve: error: {e.strerror if isinstance(e, FileNotFoundError) else e}", file=sys.stderr)
            return 1
        name = instances[0].name
        if name in served:
            print(f"serve: error: two models are named '{name}' ({served[name][0]} and {path})", file=sys.stderr)
            return 1
        served[name] = (path, instances)
        m = instances[0]
        LOG.info("%s (%s): %s %s -> %d classes on %s (%s), %d instance(s)", name, path, m.input_dtype,
                 list(m.input_shape), m.classes, m.backend, m.device, args.instances)

    config = TritonConfig(http_address=args.address, http_port=args.http_port,
                          grpc_address=args.address, grpc_port=args.grpc_port,
                          metrics_address=args.address, metrics_port=args.metrics_port, allow_metrics=True,
                          log_verbose=args.log_verbose, exit_on_error=True)
    # serve() blocks until SIGINT; SIGTERM (how supervisors and the tests stop it) does the same.
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    # PyTriton hands each model's configuration to Triton's Python stub over a local socket; on a
    # loaded machine the stub can try it before it is listening ("load failed for model ...:
    # ConnectionRefusedError" in get_config_from_handshake_server, seen in this project's CI on a
    # busy 2-core VM; pytriton#109 is the same handshake timing out). Nothing was served yet, so the
    # start is tried again, a bounded number of times.
    attempts = 3
    for attempt in range(1, attempts + 1):
        try:
            _serve_once(config, served, args)
            return 0
        except InferenceServerException as e:
            if "load failed for model" not in str(e) or attempt == attempts:
                raise
            LOG.warning("Triton could not load a model (attempt %d of %d): %s; starting again", attempt, attempts,
                        str(e).splitlines()[0])
    return 1


def _serve_once(config, served, args) -> None:
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton

    # Not `with Triton(...)`: that starts the server at once and loads each model as it is bound,
    # before _publish_metadata could add to its config. serve() starts it with every model bound.
    triton = Triton(config=config)
    try:
        for name, (path, instances) in served.items():
            m = instances[0]
            triton.bind(
                model_name=name,
                infer_func=[make_infer_fn(i) for i in instances],
                inputs=[Tensor(name=m.input_name, dtype=np.uint8 if m.input_dtype == np.uint8 else np.float32,
                               shape=input_dims(m.input_shape))],
                outputs=[Tensor(name=OUTPUT_PROBABILITIES, dtype=np.float32, shape=(m.classes,)),
                         Tensor(name=OUTPUT_CLASSES, dtype=np.int64, shape=(1,))],
                config=ModelConfig(max_batch_size=args.max_batch,
                                   batcher=DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us)),
                strict=True,
            )
            _publish_metadata(triton, name, m, path, args.precision)
        LOG.info("serving %s on HTTP %s:%d, gRPC %s:%d, metrics :%d", ", ".join(served), args.address,
                 args.http_port, args.address, args.grpc_port, args.metrics_port)
        triton.serve()
    finally:
        triton.stop()


def _publish_metadata(triton, name: str, model, path: str, precision: str = "fp32") -> None:
    """Labels and the engine's view of the model go into the model config's `parameters`, which
    Triton returns from GET /v2/models/NAME/config (gRPC: ModelConfig). PyTriton's public API has no
    field for them, so this fills the config it generates before the server loads it; the serving
    tests read them back, so a PyTriton change that loses them fails there."""
    for served in triton._model_manager.models:  # noqa: SLF001 - see the docstring
        if served.model_name == name:
            params = served._get_triton_model_config().backend_parameters  # noqa: SLF001
            params["labels"] = json.dumps(model.labels)
            params["engine_backend"] = model.backend
            params["engine_precision"] = precision
            params["engine_input"] = json.dumps({"name": model.input_name, "dtype": str(model.input_dtype),
                                                 "shape": list(model.input_shape)})
            params["engine_graph"] = str(pathlib.Path(path).resolve())
            return
    raise RuntimeError(f"PyTriton holds no model named {name!r} after bind()")


# ---- Starting a server from another program (the serving tests, benchmarks/load_test.py) ----

def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on loopback right now (the OS picks them)."""
    import socket
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


class ServerProcess:
    """cnnengine-serve (`python -m cnnengine.serve`) in a child process on loopback ports, ready (every model loaded) on __enter__,
    stopped (SIGTERM, then SIGKILL after `stop_timeout`) on __exit__. Its output goes to `log`."""

    def __init__(self, models: Sequence[str], extra_args: Sequence[str] = (), log=None,
                 start_timeout: float = 180.0, stop_timeout: float = 30.0):
        self.models = [str(m) for m in models]
        self.extra_args = list(extra_args)
        self.log = log
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.proc = None

    @property
    def model_names(self) -> list[str]:
        """The names the models are served under: each graph file's "name"."""
        return [json.loads(pathlib.Path(m).read_text())["name"] for m in self.models]

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def __enter__(self) -> "ServerProcess":
        import subprocess
        import time

        import tritonclient.http as httpclient

        # No --address: the server's default (loopback) is what the tests see.
        cmd = [sys.executable, "-m", "cnnengine.serve", *self.models,
               "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
               "--metrics-port", str(self.metrics_port), *self.extra_args]
        self.proc = subprocess.Popen(cmd, stdout=self.log or subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout
        client = httpclient.InferenceServerClient(self.http_url)
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"cnnengine-serve exited with {self.proc.returncode} before it was ready")
                try:
                    # The server is ready before PyTriton has loaded the models into it.
                    if client.is_server_ready() and all(client.is_model_ready(n) for n in self.model_names):
                        return self
                except Exception:  # not listening yet
                    pass
                time.sleep(0.5)
            raise TimeoutError(f"cnnengine-serve was not ready within {self.start_timeout:.0f} s")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        finally:
            client.close()

    def __exit__(self, *exc) -> None:
        import subprocess
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def scrape_metrics(url: str, model: str) -> dict[str, float]:
    """Triton's Prometheus counters for `model` (summed over versions): nv_inference_count (images),
    nv_inference_exec_count (batches the model ran), nv_inference_request_success/failure, and the
    cumulative queue and compute durations in microseconds."""
    import urllib.request
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or f'model="{model}"' not in line:
            continue
        name = line.split("{", 1)[0]
        out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


if __name__ == "__main__":
    sys.exit(main())
