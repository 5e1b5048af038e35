"""cnnengine-serve: format v1 models served over the Open Inference Protocol (KServe v2: HTTP and
gRPC) with dynamic batching, health and readiness endpoints and Prometheus metrics, by the server in
cnnengine.serving, which checks every request before allocating anything for it. This process is its
supervisor. docs/design/serving.md has the protocol, the limits, measurements and how to scale out."""
from __future__ import annotations

import json
import logging
import pathlib
import sys
from typing import Sequence

from .serving.model import OUTPUT_CLASSES, OUTPUT_PROBABILITIES, input_dims  # noqa: F401 - the public names
from .serving.options import parse_args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="serve: %(message)s")
    from .serving.supervisor import Supervisor
    return Supervisor(argv, args.restart_limit).run()


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
    """cnnengine-serve (`python -m cnnengine.serve`, as the console script runs it) in a child process on
    loopback ports, ready (every model loaded) on __enter__, stopped (SIGTERM, then SIGKILL after
    `stop_timeout`) on __exit__. Its output goes to `log`."""

    def __init__(self, models: Sequence[str], extra_args: Sequence[str] = (), log=None,
                 start_timeout: float = 180.0, stop_timeout: float = 30.0, ssl_context=None):
        self.models = [str(m) for m in models]
        self.extra_args = list(extra_args)
        self.log = log
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.ssl_context = ssl_context  # an https client context for a server started with --tls-cert
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
        import urllib.request

        # No --address: the server's default (loopback) is what the tests see.
        cmd = [sys.executable, "-m", "cnnengine.serve", *self.models,
               "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
               "--metrics-port", str(self.metrics_port), *self.extra_args]
        self.proc = subprocess.Popen(cmd, stdout=self.log or subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout
        scheme = "https" if self.ssl_context else "http"
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"cnnengine-serve exited with {self.proc.returncode} before it was ready")
                try:
                    # Ready means every model is loaded: the server listens only after loading them.
                    with urllib.request.urlopen(f"{scheme}://{self.http_url}/v2/health/ready", timeout=5,
                                                context=self.ssl_context) as r:
                        if r.status == 200:
                            return self
                except OSError:  # not listening yet
                    pass
                time.sleep(0.2)
            raise TimeoutError(f"cnnengine-serve was not ready within {self.start_timeout:.0f} s")
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def server_pid(self) -> int | None:
        """The pid of the server process the supervisor runs now (None while there is none)."""
        for task in pathlib.Path(f"/proc/{self.proc.pid}/task").glob("*"):
            children = (task / "children").read_text().split()
            if children:
                return int(children[0])
        return None

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
    """The server's Prometheus counters for `model`, by name without prometheus_client's `_total`
    suffix (failures summed over status): cnnengine_inference_count (images),
    cnnengine_inference_exec_count (batches the model ran), cnnengine_inference_request_success and
    _failure, and the cumulative queue and compute durations in microseconds."""
    import urllib.request
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or f'model="{model}"' not in line:
            continue
        name = line.split("{", 1)[0]
        if name.endswith("_created"):
            continue
        name = name.removesuffix("_total")
        out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


if __name__ == "__main__":
    sys.exit(main())
