"""One server process: loads every model, then serves HTTP, gRPC and metrics on one event loop until
SIGTERM or SIGINT (or until its supervisor is gone). It tells the supervisor it is ready by writing
a line to the file descriptor --ready-fd names. Started by cnnengine.serving.supervisor."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import sys
from importlib import metadata

from aiohttp import web

from . import grpc_api, http_api
from .metrics import Metrics
from .model import ServedModel
from .options import parse_args, read_secrets
from .service import InferenceService

LOG = logging.getLogger("cnnengine.serve")
PARENT_CHECK_S = 1.0


def load_models(args) -> dict[str, ServedModel]:
    """Every model and instance, loaded before anything listens; raises with the engine's message."""
    import cnnengine
    models: dict[str, ServedModel] = {}
    for path in args.models:
        instances = [cnnengine.load(path, backend=args.backend, precision=args.precision,
                                    max_batch=args.max_batch, threads=args.threads)
                     for _ in range(args.instances)]
        name = instances[0].name
        raw_shape = instances[0].info()["input"]["raw_shape"]
        if len(raw_shape) != 3:
            raise ValueError(f"{path}: model '{name}' takes input of shape {raw_shape}, not an image [C, H, W]; "
                             f"the server serves image models")
        if name in models:
            raise ValueError(f"two models are named '{name}' ({path} is the second)")
        models[name] = ServedModel(name, instances, args.max_batch, args.max_queue_delay_us, args.precision)
        m = instances[0]
        LOG.info("%s: %s %s -> %d classes on %s (%s), %d instance(s)", name, m.input_dtype, list(m.input_shape),
                 m.classes, m.backend, m.device, args.instances)
    return models


def host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _version() -> str:
    try:
        return metadata.version("cnnengine")
    except metadata.PackageNotFoundError:
        return "0"


async def serve(args, models: dict[str, ServedModel], token: str | None, tls: tuple[bytes, bytes] | None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    service = InferenceService(models, Metrics(args.restarts), token, _version())
    service.start()

    ssl_context = None
    if tls:
        ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_context.load_cert_chain(args.tls_cert, args.tls_key)
    runners = []
    for app, port in ((http_api.make_app(service), args.http_port),
                      (http_api.make_metrics_app(service), args.metrics_port)):
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, args.address, port, ssl_context=ssl_context, reuse_port=False).start()
        runners.append(runner)
    grpc_server = grpc_api.make_server(service, host_port(args.address, args.grpc_port), tls)
    await grpc_server.start()

    scheme = "https" if tls else "http"
    LOG.info("serving %s on HTTP %s://%s, gRPC %s, metrics %s://%s/metrics%s", ", ".join(models), scheme,
             host_port(args.address, args.http_port), host_port(args.address, args.grpc_port), scheme,
             host_port(args.address, args.metrics_port), " (bearer token required)" if token else "")
    if args.ready_fd >= 0:
        os.write(args.ready_fd, b"ready\n")
        os.close(args.ready_fd)

    parent = os.getppid()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), PARENT_CHECK_S)
        except asyncio.TimeoutError:
            if os.getppid() != parent:  # the supervisor is gone: nobody would restart or stop us
                LOG.warning("the supervisor has exited; stopping")
                break
    service.ready = False
    await grpc_server.stop(grace=2.0)
    for runner in runners:
        await runner.cleanup()
    await service.close()


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="serve: %(message)s", stream=sys.stderr)
    # Until the loop's handlers are installed, a stop request ends the start-up at once.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))
    try:
        token, tls = read_secrets(args)
        models = load_models(args)
    except OSError as e:
        # The engine's FileNotFoundError carries its whole message as strerror (file name included).
        message = e.strerror if str(e.filename) in (e.strerror or "") else f"{e.filename}: {e.strerror}"
        print(f"serve: error: {message}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - EngineError, ValueError, OSError: one line, exit 1
        print(f"serve: error: {e}", file=sys.stderr)
        return 1
    try:
        asyncio.run(serve(args, models, token, tls))
    except OSError as e:
        print(f"serve: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
