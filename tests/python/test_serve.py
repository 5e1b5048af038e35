"""cnnengine-serve (tools/serve) through the real tritonclient over HTTP and gRPC: the server started here on free
loopback ports with two models, its metadata, health and metrics, MNIST test images classified equal
to the engine's own outputs bit for bit, malformed requests each refused while the server keeps
serving, and a short run of benchmarks/load_test.py."""
import json
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import cnnengine
import cnnengine.runtime  # noqa: F401
from cnnengine import datasets
from cnnengine.serve import OUTPUT_CLASSES, OUTPUT_PROBABILITIES, ServerProcess, scrape_metrics

from test_package import LENET, engine_run_dump, mnist_images_file

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
FASHION = REPO / "models" / "lenet5-fashion.json"
MAX_BATCH = 64
COUNT = 1000  # MNIST test images sent through the server: a subset keeps .ci/run short


@pytest.fixture(scope="module")
def mnist():
    return datasets.read_idx(mnist_images_file())[:COUNT]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log_path, "wb") as log:
        try:
            with ServerProcess([LENET, FASHION], ["--backend", "cpu", "--max-batch", str(MAX_BATCH),
                                                 "--max-queue-delay-us", "2000", "--instances", "2",
                                                 "--threads", "1"], log=log) as s:
                yield s
        finally:
            log.flush()
            print(log_path.read_text(errors="replace")[-4000:])  # shown by pytest when a test fails


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


def infer(module, client, model, x, input_name="image"):
    inp = module.InferInput(input_name, list(x.shape), {np.uint8: "UINT8", np.float32: "FP32"}[x.dtype.type])
    inp.set_data_from_numpy(x)
    r = client.infer(model, [inp], outputs=[module.InferRequestedOutput(OUTPUT_PROBABILITIES),
                                            module.InferRequestedOutput(OUTPUT_CLASSES)])
    return r.as_numpy(OUTPUT_PROBABILITIES), r.as_numpy(OUTPUT_CLASSES)


def assert_still_serving(http, grpc, mnist):
    expected = cnnengine.load(LENET, backend="cpu").run(mnist[:3])
    for module, client in ((httpclient, http), (grpcclient, grpc)):
        probabilities, _ = infer(module, client, "lenet5", mnist[:3])
        assert np.array_equal(probabilities, expected)


def test_health(http, grpc):
    for client in (http, grpc):
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("lenet5") and client.is_model_ready("lenet5-fashion")
        assert not client.is_model_ready("nope")


def _listening_addresses(port):
    """The local addresses of sockets listening on `port` (TCP over IPv4 and IPv6), from /proc/net."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = pathlib.Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


def test_listens_on_loopback_only_by_default(server):
    from cnnengine.serve import parse_args
    assert parse_args(["model.json"]).address == "127.0.0.1"
    if not pathlib.Path("/proc/net/tcp").exists():
        pytest.skip("no /proc/net/tcp here")
    # 127.0.0.1, ::1, and 127.0.0.1 as an IPv4-mapped IPv6 address (gRPC's socket)
    loopback = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}
    for port in (server.http_port, server.grpc_port, server.metrics_port):
        addresses = _listening_addresses(port)
        assert addresses and set(addresses) <= loopback, (port, addresses)


def test_metadata_and_config(http, grpc):
    labels = json.loads(LENET.read_text())["labels"]
    md = http.get_model_metadata("lenet5")
    assert md["name"] == "lenet5"
    assert md["inputs"] == [{"name": "image", "datatype": "UINT8", "shape": [-1, 28, 28]}]
    assert {o["name"]: (o["datatype"], o["shape"]) for o in md["outputs"]} == {
        OUTPUT_PROBABILITIES: ("FP32", [-1, 10]), OUTPUT_CLASSES: ("INT64", [-1, 1])}
    gmd = grpc.get_model_metadata("lenet5", as_json=True)
    assert gmd["inputs"][0]["name"] == "image" and gmd["inputs"][0]["datatype"] == "UINT8"
    for client, config in ((http, http.get_model_config("lenet5")),
                           (grpc, grpc.get_model_config("lenet5", as_json=True)["config"])):
        assert int(config["max_batch_size"]) == MAX_BATCH
        assert "dynamic_batching" in config
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        assert json.loads(params["labels"]) == labels
        assert params["engine_backend"] == "cpu"
        assert params["engine_precision"] == "fp32"
        assert json.loads(params["engine_input"]) == {"name": "image", "dtype": "uint8", "shape": [1, 28, 28]}
        assert "engine_graph" not in params and str(REPO) not in json.dumps(config), config  # no file paths
    fashion = http.get_model_config("lenet5-fashion")
    assert json.loads(fashion["parameters"]["labels"]["string_value"])[0] == "T-shirt/top"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_mnist_through_the_server_equals_engine_run(tmp_path, server, http, grpc, mnist, protocol):
    module, client = (httpclient, http) if protocol == "http" else (grpcclient, grpc)
    expected = engine_run_dump(tmp_path, "cpu", COUNT)
    # Requests of every size from 1 to MAX_BATCH, so the server batches unlike requests together.
    got_p, got_c, start, size = [], [], 0, 1
    while start < COUNT:
        x = mnist[start:start + size]
        p, c = infer(module, client, "lenet5", x)
        assert p.shape == (len(x), 10) and c.shape == (len(x), 1)
        got_p.append(p)
        got_c.append(c.reshape(-1))
        start += len(x)
        size = size % MAX_BATCH + 1
    probabilities = np.concatenate(got_p)
    assert np.array_equal(probabilities, expected), f"max |diff| {np.abs(probabilities - expected).max()}"
    assert np.array_equal(np.concatenate(got_c), expected.argmax(axis=1))


def test_second_model_is_served_under_its_own_name(http, grpc, mnist):
    expected = cnnengine.load(FASHION, backend="cpu").run(mnist[:50])
    for module, client in ((httpclient, http), (grpcclient, grpc)):
        p, c = infer(module, client, "lenet5-fashion", mnist[:50])
        assert np.array_equal(p, expected)
        assert np.array_equal(c.reshape(-1), expected.argmax(axis=1))


def test_metrics_count_batches(server, http, mnist):
    before = scrape_metrics(server.metrics_url, "lenet5")
    for i in range(5):
        infer(httpclient, http, "lenet5", mnist[i * 8:(i + 1) * 8])
    # A request is counted as its handler returns, which may be a moment after the client has its
    # answer. Poll briefly.
    deadline = time.monotonic() + 10
    while True:
        after = scrape_metrics(server.metrics_url, "lenet5")
        done = after["cnnengine_inference_request_success"] - before["cnnengine_inference_request_success"] >= 5
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert after["cnnengine_inference_request_success"] - before["cnnengine_inference_request_success"] == 5
    assert after["cnnengine_inference_count"] - before["cnnengine_inference_count"] == 40
    assert 1 <= after["cnnengine_inference_exec_count"] - before["cnnengine_inference_exec_count"] <= 5


# ---- malformed requests: each an error response, and the server keeps serving ----

@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("case", ["dtype", "shape", "rank4", "unknown_model", "over_large_batch", "wrong_input_name"])
def test_malformed_requests_get_errors(http, grpc, mnist, protocol, case):
    module, client = (httpclient, http) if protocol == "http" else (grpcclient, grpc)
    model, name, x = "lenet5", "image", mnist[:2]
    if case == "dtype":
        x, expect = x.astype(np.float32), "FP32"
    elif case == "shape":
        x, expect = np.ascontiguousarray(x[:, :27, :]), "shape"
    elif case == "rank4":
        x, expect = x[:, None], "shape"
    elif case == "unknown_model":
        model, expect = "nope", "nope"
    elif case == "over_large_batch":
        x, expect = np.zeros((MAX_BATCH + 1, 28, 28), np.uint8), "batch"
    else:
        name, expect = "pixels", "pixels"
    with pytest.raises(InferenceServerException, match=f"(?i){expect}"):
        infer(module, client, model, x, input_name=name)
    assert_still_serving(http, grpc, mnist)


def post(server, path, body, headers=None):
    req = urllib.request.Request(f"http://{server.http_url}{path}", data=body, method="POST",
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.parametrize("body,headers", [
    (b"\x00\xffgarbage{{{", {}),
    (json.dumps({"inputs": [{"name": "image", "shape": [2, 28, 28], "datatype": "UINT8",
                             "data": [0] * 100}]}).encode(), {}),  # 100 values for 1568
    # Binary data shorter than the JSON header says: 784 bytes for a [2, 28, 28] tensor.
    (None, "binary_short"),
])
def test_http_garbage_and_wrong_sizes(server, http, grpc, mnist, body, headers):
    if headers == "binary_short":
        header = json.dumps({"inputs": [{"name": "image", "shape": [2, 28, 28], "datatype": "UINT8",
                                         "parameters": {"binary_data_size": 784}}]}).encode()
        body = header + bytes(784)
        headers = {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"}
    status, reply = post(server, "/v2/models/lenet5/infer", body, headers)
    assert status == 400, (status, reply)
    assert json.loads(reply)["error"]
    assert_still_serving(http, grpc, mnist)


@pytest.mark.parametrize("case", ["short_raw_content", "garbage_raw_content"])
def test_grpc_wrong_sizes(server, http, grpc, mnist, case):
    import grpc as grpclib
    request = service_pb2.ModelInferRequest(model_name="lenet5")
    tensor = request.inputs.add(name="image", datatype="UINT8", shape=[2, 28, 28])
    del tensor
    request.raw_input_contents.append(bytes(784) if case == "short_raw_content" else b"\xde\xad\xbe\xef" * 3)
    with grpclib.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpclib.RpcError) as err:
            stub.ModelInfer(request, timeout=30)
    assert err.value.code() == grpclib.StatusCode.INVALID_ARGUMENT, err.value
    assert_still_serving(http, grpc, mnist)


def test_load_test_script_reports_batches(server, tmp_path):
    out = tmp_path / "load.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "load_test.py"), "--model-file", str(LENET),
                        "--grpc", server.grpc_url, "--http", server.http_url, "--metrics", server.metrics_url,
                        "--clients", "4", "--duration", "2", "--images", "500", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(out.read_text())
    assert report["failed_requests"] == 0 and report["wrong_classes"] == 0 and report["requests"] > 0
    assert report["server"]["inferences"] >= report["requests"]
    assert report["server"]["mean_batch_formed"] >= 1
    assert report["latency_ms"]["p50"] <= report["latency_ms"]["p99"]


def test_serve_refuses_a_missing_model_before_starting(tmp_path):
    r = subprocess.run([sys.executable, "-m", "cnnengine.serve", str(tmp_path / "nope.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert f"serve: error: {tmp_path / 'nope.json'}: graph file not found" in r.stderr, r.stderr


def test_serve_refuses_a_precision_the_backend_does_not_compute():
    """--precision fp16 on the cpu backend: one line from the engine, before the server starts."""
    r = subprocess.run([sys.executable, "-m", "cnnengine.serve", "--backend", "cpu", "--precision", "fp16",
                        str(LENET)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    errors = [l for l in r.stderr.splitlines() if l.startswith("serve: error:")]
    assert len(errors) == 1 and "does not compute fp16" in errors[0], r.stderr
