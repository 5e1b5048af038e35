"""Malformed gRPC requests against one server: each refused with an error status and a one-line
message (no traceback, no server path), a valid request answered correctly after each group; then a
bounded concurrent run in which one client sends malformed requests (HTTP and gRPC) among eight
clients sending valid ones, none of which may fail."""
import threading
import time

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from harness import MAX_BATCH, REPO, assert_still_serving, valid_grpc, valid_http
from test_malformed_http import INFER, body, request, send

BIG = [2**31, 2**32 + 1, 2**40, 2**62, 2**63 - 1, -1, -2, 0, -(2**31), -(2**63), MAX_BATCH + 1, 100000]


def infer_request(shape=(1, 28, 28), datatype="UINT8", name="image", raw=(bytes(784),), model="lenet5", **kw):
    r = service_pb2.ModelInferRequest(model_name=model, **kw)
    r.inputs.add(name=name, datatype=datatype, shape=list(shape))
    r.raw_input_contents.extend(raw)
    return r


def grpc_cases():
    cases = [infer_request(shape=[n, 28, 28]) for n in BIG]
    cases += [infer_request(shape=[1, *d]) for d in ([4294967324, 28], [28, 2**62], [28], [28, 28, 1], [27, 28])]
    cases += [infer_request(shape=s) for s in ([], [1], [1, 1, 28, 28], [784], [1, 28, 28, 1], [1] * 32)]
    cases += [infer_request(raw=r) for r in ((), (bytes(783),), (bytes(785),), (bytes(784), bytes(784)), (b"\xde\xad",))]
    cases += [infer_request(datatype=d) for d in ("FP32", "INT8", "uint8", "", "BYTES")]
    cases += [infer_request(name=n) for n in ("pixels", "", "x" * 10000)]
    cases += [infer_request(model=m) for m in ("nope", "", "x" * 10000, "../lenet5")]
    cases.append(infer_request(model_version="7"))
    r = infer_request(raw=())
    r.inputs[0].contents.uint_contents.extend([256] + [0] * 783)
    cases.append(r)
    r = infer_request(raw=())
    r.inputs[0].contents.fp32_contents.extend([0.0] * 784)
    cases.append(r)
    r = infer_request(raw=())
    r.inputs[0].contents.uint_contents.extend([0] * 100)
    cases.append(r)
    r = infer_request()
    r.inputs[0].contents.uint_contents.extend([0] * 784)  # contents and raw contents
    cases.append(r)
    r = infer_request()
    r.outputs.add(name="nope")
    cases.append(r)
    r = infer_request()
    r.inputs.add(name="image", datatype="UINT8", shape=[1, 28, 28])
    cases.append(r)
    r = service_pb2.ModelInferRequest(model_name="lenet5")
    cases.append(r)  # no inputs
    cases.append(infer_request(shape=[2**62, 28, 28], raw=(bytes(784),)))
    return cases


def call(channel, request, timeout=30):
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    return stub.ModelInfer(request, timeout=timeout)


def assert_refused(err: grpc.RpcError):
    assert err.code() != grpc.StatusCode.OK
    message = err.details() or ""
    assert "Traceback" not in message and str(REPO) not in message and "\n" not in message, message


def test_malformed_grpc_requests_are_refused_alone(server, images, expected):
    sent = 0
    with grpc.insecure_channel(server.grpc_url) as channel:
        for case in grpc_cases():
            with pytest.raises(grpc.RpcError) as err:
                call(channel, case)
            assert_refused(err.value)
            sent += 1
        assert_still_serving(server, images, expected)
        # Bytes that are no ModelInferRequest, and a message over the server's size limit.
        raw_call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                       request_serializer=lambda b: b, response_deserializer=lambda b: b)
        for garbage in (b"\xff" * 50, b"\x0a\xff\xff\xff\xff\x0f", bytes(range(256)) * 4, b"\x12" * 999,
                        b"\x0a\x05lenet", b"\x22\x03\x0a\x01\xff", b"\x08" * 10):
            with pytest.raises(grpc.RpcError) as err:
                raw_call(garbage, timeout=30)
            assert_refused(err.value)
            # refused as a bad request, not as an error inside the server
            assert err.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), err.value
            sent += 1
        with pytest.raises(grpc.RpcError) as err:
            call(channel, infer_request(shape=[2**16, 28, 28], raw=(bytes(2**16 * 784),)))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        sent += 1
    assert_still_serving(server, images, expected)
    assert sent >= 50, sent


def test_one_malformed_client_among_eight_valid_ones(server, images, expected):
    """The issue's case: a request declaring [2^62, 28, 28] with 784 bytes, sent among valid ones,
    failed every request batched with it. Here it fails alone."""
    stop = time.monotonic() + 6
    failures, answered, refused = [], [0], [0]
    lock = threading.Lock()

    def valid_client(i):
        rng = np.random.default_rng(i)
        while time.monotonic() < stop:
            n = int(rng.integers(1, 9))
            start = int(rng.integers(0, len(images) - n))
            try:
                send_fn = valid_grpc if i % 2 else valid_http
                got = send_fn(server, images[start:start + n])
                ok = np.array_equal(got, expected[start:start + n])
            except Exception as e:  # noqa: BLE001 - any failure of a valid request fails the test
                ok, got = False, e
            with lock:
                answered[0] += 1
                if not ok:
                    failures.append(repr(got)[:300])

    def malformed_client():
        bad_http = [body(request(shape=[2**31, 28, 28], data=[0])), body(request(data=[256] * 784)), b"[" * 100000]
        with grpc.insecure_channel(server.grpc_url) as channel:
            k = 0
            while time.monotonic() < stop:
                k += 1
                try:
                    call(channel, infer_request(shape=[2**62, 28, 28]) if k % 2 else grpc_cases()[k % 40])
                except grpc.RpcError:
                    refused[0] += 1
                status, _ = send(server, "POST", INFER, bad_http[k % 3])
                refused[0] += 400 <= status < 500

    threads = [threading.Thread(target=valid_client, args=(i,)) for i in range(8)]
    threads.append(threading.Thread(target=malformed_client))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures[:5]
    assert answered[0] > 50 and refused[0] > 50, (answered, refused)
    assert_still_serving(server, images, expected)
