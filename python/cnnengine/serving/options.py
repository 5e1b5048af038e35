"""cnnengine-serve's command line, shared by the supervisor and the server process it starts (which
gets the same arguments plus two of its own)."""
from __future__ import annotations

import argparse
from typing import Sequence


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cnnengine-serve",
        description="Serve format v1 models over the Open Inference Protocol (KServe v2, HTTP and gRPC), each "
                    "under the name its graph file gives it; the server runs as a child process that is "
                    "restarted if it dies.")
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
                   help="largest batch the server forms or accepts in one request; requests are refused "
                        "above it before anything is allocated (default: %(default)s)")
    p.add_argument("--max-queue-delay-us", type=int, default=0,
                   help="how long the batcher may hold a request to batch it with later ones; with 0 it "
                        "batches what queued while the engine ran (default: %(default)s)")
    p.add_argument("--instances", type=int, default=1,
                   help="model instances per model, each with its own engine executable (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0, help="CPU backends: threads per instance (0: all cores)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16", "int8"],
                   help="as engine run --precision: fp16 / bf16 on tensor cores with --backend cudnn, emulated by "
                        "the reference backend; a backend that does not compute it refuses before the server starts")
    p.add_argument("--token-file", metavar="FILE",
                   help="file holding a bearer token that every request but health probes must carry "
                        "(Authorization: Bearer TOKEN, over HTTP, gRPC and metrics)")
    p.add_argument("--tls-cert", metavar="PEM", help="TLS certificate chain: HTTP, gRPC and metrics over TLS")
    p.add_argument("--tls-key", metavar="PEM", help="TLS private key for --tls-cert")
    p.add_argument("--restart-limit", type=int, default=5,
                   help="restarts in a row, each failing to become ready, before the supervisor gives up "
                        "(default: %(default)s)")
    # Given by the supervisor to the server process it starts.
    p.add_argument("--ready-fd", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--restarts", type=int, default=0, help=argparse.SUPPRESS)
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    for name in ("max_batch", "instances", "restart_limit"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.max_queue_delay_us < 0:
        p.error("--max-queue-delay-us must be >= 0")
    for port in ("http_port", "grpc_port", "metrics_port"):
        if not 1 <= getattr(args, port) <= 65535:
            p.error(f"--{port.replace('_', '-')} must be a TCP port (1..65535)")
    if bool(args.tls_cert) != bool(args.tls_key):
        p.error("--tls-cert and --tls-key go together")
    return args


def read_secrets(args) -> tuple[str | None, tuple[bytes, bytes] | None]:
    """The bearer token and the TLS (key, certificate) the options name; OSError or ValueError with
    a one-line message when a file is missing or empty."""
    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.readline().strip()
        if not token:
            raise ValueError(f"{args.token_file}: the token file is empty")
    tls = None
    if args.tls_cert:
        with open(args.tls_key, "rb") as k, open(args.tls_cert, "rb") as c:
            tls = (k.read(), c.read())
    return token, tls
