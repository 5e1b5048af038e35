"""Malformed HTTP requests, group by group, against one server: each is refused with a 4xx and a
one-line JSON reason (no traceback, no server path), and after each group a valid request over HTTP
and gRPC is still answered with the engine's exact bits. Over 300 requests in all."""
import gzip
import http.client
import json
import random
import socket
import time

import pytest

from harness import MAX_BATCH, REPO, assert_still_serving

INFER = "/v2/models/lenet5/infer"
BIG = [2**31, 2**32 + 1, 2**62, 2**63 - 1, 2**63, 2**64, 2**100, 10**30]


def request(name="image", shape=(1, 28, 28), datatype="UINT8", data=None, **extra) -> dict:
    tensor = {"name": name, "shape": list(shape) if isinstance(shape, tuple) else shape, "datatype": datatype,
              "data": [0] * 784 if data is None else data}
    return {"inputs": [tensor], **extra}


def body(doc) -> bytes:
    return json.dumps(doc).encode()


def shape_cases():
    cases = []
    for n in BIG + [-1, 0, -(2**63), MAX_BATCH + 1, 100000]:
        cases.append(body(request(shape=[n, 28, 28], data=[0])))
        cases.append(body(request(shape=[n, 28, 28])))
    for dims in ([4294967324, 28], [28, 2147483648], [2**63 - 1, 2**63 - 1], [28], [28, 28, 1], [27, 28], [0, 0],
                 [-28, -28], [1, 28, 28], [784]):
        cases.append(body(request(shape=[1, *dims])))
    cases.append(body(request(shape=[2147483648, 2147483648], datatype="FP32", data=[0.0])))
    for shape in ([], [1], [1, 28], [1, 1, 28, 28], [1] * 64, ["1", 28, 28], [1.5, 28, 28], [True, 28, 28],
                  [None, 28, 28], [[1], 28, 28], "1,28,28", 784, None, {"n": 1}, [1, 28.0, 28], [1e400, 28, 28]):
        cases.append(body(request(shape=shape)))
    rng = random.Random(11)  # random ranks and sizes, none the model's
    while len(cases) < 120:
        shape = [rng.choice([rng.randrange(-3, 300), rng.randrange(2**64)]) for _ in range(rng.randrange(1, 6))]
        if shape[1:] != [28, 28] or not 1 <= shape[0] <= MAX_BATCH:
            cases.append(body(request(shape=shape, data=[1] * rng.choice([0, 1, 784]))))
    return cases


def nesting_cases():
    deep = [b"[" * 100000, b"{\"a\":" * 100000, b"[" * 100000 + b"]" * 100000,
            b'{"inputs":' + b"[" * 50000 + b"]" * 50000 + b"}"]
    data_deep = "[" * 10000 + "0" + "]" * 10000
    deep.append(('{"inputs":[{"name":"image","shape":[1,28,28],"datatype":"UINT8","data":' + data_deep + "}]}").encode())
    for depth in range(4, 12):  # nested deeper than the rank (3)
        nested = 0
        for _ in range(depth):
            nested = [nested]
        deep.append(body(request(data=nested)))
    deep.append(body(request(data=[[[0] * 28] * 28, 0])))       # ragged
    deep.append(body(request(data=[[0] * 28] * 27)))             # too few rows
    deep.append(body(request(data=[[[[0] * 28] * 28]])))         # one level too deep
    return deep


def value_cases():
    bad = [256, -1, 1000, 2**70, -(2**70), 1.5, 0.0, 1e308, True, False, None, "1", "x", [], {}]
    cases = [body(request(data=[0] * 783 + [v])) for v in bad]
    cases += [body(request(data=[v] * 784)) for v in bad]
    cases += [b'{"inputs":[{"name":"image","shape":[1,28,28],"datatype":"UINT8","data":[' + b"0," * 783 + c + b"]}]}"
              for c in (b"NaN", b"Infinity", b"-Infinity", b"1e999", b"0x10", b"00", b"+1", b"'1'", b"9" * 5000)]
    cases.append(b'{"inputs":[{"name":"image","shape":[' + b"1" * 5000 + b',28,28],"datatype":"UINT8","data":[0]}]}')
    cases += [body(request(data=[0] * n)) for n in (0, 1, 783, 785, 1568)]
    cases.append(body(request(data="AAAA")))
    cases.append(body(request(data={"a": 1})))
    return cases


def truncated_cases():
    full = body(request(shape=[2, 28, 28], data=[7] * 1568))
    cuts = sorted({int(len(full) * f) for f in [i / 41 for i in range(1, 41)]})
    return [full[:c] for c in cuts]


def garbage_cases():
    rng = random.Random(7)
    cases = [bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 7, 100, 5000]))) for _ in range(30)]
    cases += [b"", b"null", b"0", b"[]", b'"inputs"', b"{}", b'{"inputs":null}', b'{"inputs":{}}',
              b'{"inputs":[]}', b'{"inputs":[null]}', b'{"inputs":[1]}', b"\xef\xbb\xbf{}", "{\"é\":1}".encode("latin-1"),
              b'{"inputs": [' + b'{"name":"image"},' * 1000 + b"{}]}"]
    return cases


def type_cases():
    cases = [body(request(datatype=d)) for d in ("FP32", "INT8", "uint8", "BYTES", "BF16", "", 5, None, ["UINT8"])]
    cases += [body(request(name=n)) for n in ("pixels", "", None, 7, "Image", "image " * 1000, ["image"])]
    base = request()
    cases += [body({**base, "outputs": o}) for o in ([{"name": "nope"}], [{"name": None}], "classes", [1], {"name": "x"},
                                                       [{"name": "classes", "parameters": {"classification": 3}}],
                                                       [{"name": "classes", "parameters": 5}])]
    cases += [body({**base, "parameters": p}) for p in (5, "x", [1])]
    cases.append(body({"inputs": [request()["inputs"][0]] * 2}))
    cases.append(body({"inputs": [{**request()["inputs"][0], "parameters": 7}]}))
    return cases


def binary_cases():
    cases = []
    header = json.dumps({"inputs": [{"name": "image", "shape": [1, 28, 28], "datatype": "UINT8",
                                     "parameters": {"binary_data_size": 784}}]}).encode()
    for data, length in ((bytes(783), len(header)), (bytes(785), len(header)), (bytes(784), len(header) + 1),
                         (bytes(784), len(header) - 1), (bytes(784), 10**12), (bytes(784), -1), (bytes(784), "x"),
                         (bytes(784), b"\xc2\xb2"), (bytes(784), b"\xef\xbc\x91\xef\xbc\x92"), (bytes(784), "1_0"),
                         (bytes(784), "9" * 5000),
                         (b"", len(header)), (bytes(784), 0)):
        cases.append((header + data, {"Inference-Header-Content-Length": length if isinstance(length, bytes)
                                      else str(length)}))
    for size in (-1, 10**12, "784", 1.5, None, 2**64):
        h = json.dumps({"inputs": [{"name": "image", "shape": [1, 28, 28], "datatype": "UINT8",
                                    "parameters": {"binary_data_size": size}}]}).encode()
        cases.append((h + bytes(784), {"Inference-Header-Content-Length": str(len(h))}))
    h = json.dumps({"inputs": [{"name": "image", "shape": [2**62, 28, 28], "datatype": "UINT8",
                                "parameters": {"binary_data_size": 784}}]}).encode()
    cases.append((h + bytes(784), {"Inference-Header-Content-Length": str(len(h))}))
    cases.append((body(request()) + bytes(10), {"Inference-Header-Content-Length": str(len(body(request())))}))
    cases.append((bytes(5 * 2**20), {}))  # over the body limit
    cases.append((body(request()), {"Content-Encoding": "gzip"}))  # says gzip, is not
    # 20 MB of JSON in 20 KB of gzip: refused at the limit as it is inflated
    cases.append((gzip.compress(b"[" + b"0," * 10_000_000 + b"0]"), {"Content-Encoding": "gzip"}))
    return cases


def route_cases():
    ok = body(request())
    return [("POST", "/v2/models/nope/infer", ok), ("POST", "/v2/models/" + "x" * 5000 + "/infer", ok),
            ("POST", "/v2/models/lenet5/versions/2/infer", ok), ("POST", "/v2/models/../../etc/passwd/infer", ok),
            ("POST", "/v2/models/%00/infer", ok), ("POST", "/v2/models/lenet5/infer/extra", ok),
            ("GET", INFER, b""), ("PUT", INFER, ok), ("DELETE", INFER, b""), ("POST", "/v2/models/lenet5", ok),
            ("GET", "/v2/models/nope", b""), ("GET", "/v2/models/nope/config", b""), ("GET", "/nope", b""),
            ("GET", "/v2/models/lenet5/versions/9/config", b""), ("POST", "/v2/repository/index", b"{}"),
            ("POST", "/v2/models/lenet5/load", b"{}"), ("GET", "/v2/models/lenet5/stats", b"")]


def send(server, method, path, data=b"", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    try:
        conn.request(method, path, body=data, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def assert_refused(status, reply, what):
    assert 400 <= status < 500, (what[:200], status, reply[:300])
    text = reply.decode("utf-8", "replace")
    assert "Traceback" not in text and str(REPO) not in text and "site-packages" not in text, text
    if reply:
        error = json.loads(reply)["error"]
        assert error and "\n" not in error, error


SENT = {"count": 0}
GROUPS = {"shapes": shape_cases, "nesting": nesting_cases, "values": value_cases, "truncated": truncated_cases,
          "garbage": garbage_cases, "types": type_cases}


@pytest.mark.parametrize("group", list(GROUPS))
def test_malformed_bodies_are_refused_alone(server, images, expected, group):
    for case in GROUPS[group]():
        status, reply = send(server, "POST", INFER, case, {"Content-Type": "application/json"})
        assert_refused(status, reply, case)
        SENT["count"] += 1
    assert_still_serving(server, images, expected)


def test_binary_extension_mismatches_are_refused(server, images, expected):
    for data, headers in binary_cases():
        status, reply = send(server, "POST", INFER, data, headers)
        assert_refused(status, reply, data[:200] + str(headers).encode())
        SENT["count"] += 1
    assert_still_serving(server, images, expected)


def test_unknown_models_and_routes(server, images, expected):
    for method, path, data in route_cases():
        status, reply = send(server, method, path, data)
        assert_refused(status, reply, f"{method} {path[:80]}".encode())
        SENT["count"] += 1
    assert_still_serving(server, images, expected)


def test_huge_headers_and_urls(server, images, expected):
    for path, headers in (("/v2/models/lenet5/infer?" + "a" * 100000, {}), ("/" + "x" * 20000, {}),
                          (INFER, {"X-Big": "b" * 100000}), (INFER, {f"X-H{i}": "v" for i in range(2000)}),
                          (INFER, {"Content-Length": "99999999999999999999"}), (INFER, {"Content-Length": "-5"})):
        try:
            status, reply = send(server, "POST", path, body(request()), headers)
        except (ConnectionError, http.client.HTTPException):
            status, reply = 400, b""  # the server closed the connection: refused as well
        assert 400 <= status < 500, (path[:60], status)
        assert b"Traceback" not in reply
        SENT["count"] += 1
    assert_still_serving(server, images, expected)


def test_slow_and_vanishing_clients(server, images, expected):
    """Clients that send a request a few bytes at a time, or stop half way, hold only their own
    connection: valid requests are answered meanwhile."""
    request_bytes = (f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body(request()))}\r\n\r\n").encode() + body(request())
    slow = []
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", server.http_port))
        s.sendall(request_bytes[:10 + 97 * i])  # part of the headers or of the body, then nothing
        slow.append(s)
    for _ in range(3):
        for s in slow:
            s.send(b" ")
        assert_still_serving(server, images, expected)
        time.sleep(0.2)
    for s in slow:
        s.close()
    SENT["count"] += len(slow)
    trickling = []  # large bodies trickled by many clients: large ones are refused as busy, small ones served
    for _ in range(40):
        s = socket.create_connection(("127.0.0.1", server.http_port))
        s.sendall(f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: 400000\r\n\r\n".encode() + b"{")
        trickling.append(s)
    time.sleep(0.5)
    assert_still_serving(server, images, expected)
    status, reply = send(server, "POST", INFER, b"[" * 300000)
    assert status == 503 and b"too many large requests" in reply, (status, reply[:200])
    for s in trickling:
        s.close()
    SENT["count"] += len(trickling) + 1
    deadline = time.monotonic() + 10  # the server notices the closed connections
    while send(server, "POST", INFER, b"[" * 300000)[0] == 503 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert send(server, "POST", INFER, b"[" * 300000)[0] == 400
    for _ in range(10):  # declared a body over the limit, sent a little, went away
        s = socket.create_connection(("127.0.0.1", server.http_port))
        s.sendall(f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: 4000000\r\n\r\n".encode() + b"{" * 1000)
        s.close()
        SENT["count"] += 1
    assert_still_serving(server, images, expected)


def test_counted_over_300_malformed_requests(server):
    assert SENT["count"] >= 300, SENT["count"]
