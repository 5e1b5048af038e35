"""--token-file and --tls-cert/--tls-key: without the bearer token every request but the health
probes is refused (401 / UNAUTHENTICATED), with it served; over TLS the same; the token is in no
process's arguments and no file path in the model's metadata or configuration."""
import datetime
import json
import ssl
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from harness import REPO, start_server, valid_grpc, valid_http

TOKEN = "s3cret-token-for-the-test"


def _cmdlines():
    import pathlib
    for p in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
        try:
            yield p.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("secret") / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o600)
    return f


def _status(url, headers=None, context=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10,
                                    context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_bearer_token(tmp_path_factory, token_file, images, expected):
    server, _ = start_server(tmp_path_factory, "--token-file", str(token_file))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with server:
        base = f"http://{server.http_url}"
        assert _status(base + "/v2/health/ready")[0] == 200  # probes stay open
        for path in ("/v2/models/lenet5", "/v2/models/lenet5/config", "/v2"):
            status, reply = _status(base + path)
            assert status == 401 and "bearer token" in json.loads(reply)["error"]
            assert _status(base + path, {"Authorization": "Bearer wrong"})[0] == 401
            assert _status(base + path, auth)[0] == 200
        assert _status(server.metrics_url)[0] == 401 and _status(server.metrics_url, auth)[0] == 200
        with pytest.raises(Exception, match="(?i)bearer"):
            valid_http(server, images[:2])
        with pytest.raises(Exception, match="(?i)bearer"):
            valid_grpc(server, images[:2])
        assert np.array_equal(valid_http(server, images[:2], headers=auth), expected[:2])
        assert np.array_equal(valid_grpc(server, images[:2], headers={"authorization": f"Bearer {TOKEN}"}),
                              expected[:2])
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=10).ready
            with pytest.raises(grpc.RpcError) as err:
                stub.ModelMetadata(service_pb2.ModelMetadataRequest(name="lenet5"), timeout=10)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert not [c for c in _cmdlines() if TOKEN in c]
    server.log.close()


def _self_signed(directory):
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def test_tls(tmp_path_factory, images, expected):
    cert, key = _self_signed(tmp_path_factory.mktemp("tls"))
    context = ssl.create_default_context(cafile=str(cert))
    context.check_hostname = False  # the test connects to 127.0.0.1; the certificate names localhost
    server, _ = start_server(tmp_path_factory, "--tls-cert", str(cert), "--tls-key", str(key), ssl_context=context)
    with server:
        status, reply = _status(f"https://{server.http_url}/v2/models/lenet5/config", context=context)
        assert status == 200 and str(REPO) not in reply.decode()
        with pytest.raises(OSError):  # plain HTTP to a TLS port gets no answer
            urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready", timeout=5)
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(f"localhost:{server.grpc_port}", credentials) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            r = service_pb2.ModelInferRequest(model_name="lenet5")
            r.inputs.add(name="image", datatype="UINT8", shape=[2, 28, 28])
            r.raw_input_contents.append(images[:2].tobytes())
            reply = stub.ModelInfer(r, timeout=30)
            got = np.frombuffer(reply.raw_output_contents[0], dtype="<f4").reshape(2, 10)
            assert np.array_equal(got, expected[:2])
    server.log.close()


def test_refuses_missing_secret_files(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "cnnengine.serve", str(REPO / "models" / "lenet5.json"),
                        "--backend", "cpu", "--token-file", str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    errors = [line for line in r.stderr.splitlines() if line.startswith("serve: error:")]
    assert len(errors) == 1 and "nope" in errors[0] and "Traceback" not in r.stderr, r.stderr
