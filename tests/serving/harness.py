"""What the serving suites share (conftest.py makes its fixtures theirs): the model, MNIST test
images and the engine's own answers for them,
a server started as a user starts it (the cnnengine-serve command on free loopback ports), and the
check that a valid request is still answered correctly over HTTP and gRPC."""
import os
import pathlib

import numpy as np
import pytest

import cnnengine
from cnnengine import datasets
from cnnengine.serve import OUTPUT_PROBABILITIES, ServerProcess

REPO = pathlib.Path(__file__).resolve().parents[2]
LENET = REPO / "models" / "lenet5.json"
MAX_BATCH = 64
pytest.importorskip("tritonclient.grpc")
pytest.importorskip("aiohttp")


def mnist_images(count: int) -> np.ndarray:
    shared = pathlib.Path(os.environ.get("CNN_SHARED_DATA", REPO.parent / "shared" / "data"))
    f = shared / "mnist" / "t10k-images-idx3-ubyte.gz"
    return datasets.read_idx(f if f.is_file() else datasets.mnist_files("test")[0])[:count]


@pytest.fixture(scope="module")
def images():
    return mnist_images(64)


@pytest.fixture(scope="module")
def expected(images):
    return cnnengine.load(LENET, backend="cpu").run(images)


def start_server(tmp_path_factory, *extra, **kwargs) -> tuple[ServerProcess, pathlib.Path]:
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed by the fixture that owns the server
    server = ServerProcess([LENET], ["--backend", "cpu", "--max-batch", str(MAX_BATCH), "--threads", "1", *extra],
                           log=log, **kwargs)
    server.log_path = log_path
    return server, log_path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s, log_path = start_server(tmp_path_factory)
    with s:
        yield s
    s.log.close()
    print(log_path.read_text(errors="replace")[-4000:])  # shown by pytest when a test fails


def _infer(tc, client, x, headers) -> np.ndarray:
    try:
        inp = tc.InferInput("image", list(x.shape), "UINT8")
        inp.set_data_from_numpy(x)
        return client.infer("lenet5", [inp], headers=headers).as_numpy(OUTPUT_PROBABILITIES)
    finally:
        client.close()


def valid_http(server, x, headers=None, ssl_context=None) -> np.ndarray:
    import tritonclient.http as tc
    return _infer(tc, tc.InferenceServerClient(server.http_url, ssl=ssl_context is not None,
                                               ssl_context_factory=(lambda: ssl_context) if ssl_context else None),
                  x, headers)


def valid_grpc(server, x, headers=None) -> np.ndarray:
    import tritonclient.grpc as tc
    return _infer(tc, tc.InferenceServerClient(server.grpc_url), x, headers)


def assert_still_serving(server, images, expected) -> None:
    """A valid request over each protocol is answered, bit for bit the engine's answer."""
    assert server.proc.poll() is None, "the supervisor exited"
    assert np.array_equal(valid_http(server, images[:3]), expected[:3])
    assert np.array_equal(valid_grpc(server, images[3:8]), expected[3:8])
