"""The Open Inference Protocol over HTTP/REST (aiohttp), with Triton's binary tensor extension
(`Inference-Header-Content-Length`), which tritonclient.http uses by default. The body is read up to
a limit derived from the largest batch the server accepts; the JSON is parsed, and every input
checked against the model, before a tensor is built."""
from __future__ import annotations

import json
import logging

import numpy as np
from aiohttp import web

from .model import OUTPUT_DATATYPES
from .validation import NOT_FOUND, TOO_LARGE, UNAVAILABLE, RequestError, check_outputs, check_shape, from_bytes, \
    from_json, reject_json_constant
from .service import InferenceService

LOG = logging.getLogger("cnnengine.serve")
JSON_BYTES_PER_VALUE = {"UINT8": 8, "FP32": 32}  # generous room for a value, its comma and spaces
HEADROOM = 64 * 1024
IN_FLIGHT_BODIES = 32


def body_limit(service: InferenceService) -> int:
    """The largest request body accepted: a full batch as JSON text (which outgrows its binary form)."""
    return HEADROOM + max(m.max_batch * m.image_elements * JSON_BYTES_PER_VALUE[m.datatype]
                          for m in service.models.values())


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _errors(request: web.Request, handler):
    """Every refusal is a JSON body with a one-line reason; nothing else reaches the client."""
    try:
        return await handler(request)
    except RequestError as e:
        return _error(e.http_status, str(e))
    except web.HTTPRequestEntityTooLarge:
        return _error(TOO_LARGE[0], "request body is larger than the server accepts")
    except web.RequestPayloadError:  # a body cut short, or a Content-Encoding it does not have
        return _error(400, "request body could not be read")
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return _error(e.status, e.reason)
    except Exception:  # noqa: BLE001 - logged in full here, one line to the client
        LOG.exception("internal error on %s %s", request.method, request.rel_url.path[:200])
        return _error(500, "internal server error")


def _json(request_body: bytes):
    try:
        return json.loads(request_body, parse_constant=reject_json_constant)
    except RecursionError:
        raise RequestError("request JSON is nested too deeply") from None
    except UnicodeDecodeError:
        raise RequestError("request JSON is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise RequestError(f"request body is not JSON: {e.msg} at offset {e.pos}") from None
    except ValueError:  # an integer of more digits than Python converts
        raise RequestError("request JSON holds a number too long to read") from None


def _split_body(request: web.Request, body: bytes) -> tuple[bytes, memoryview]:
    header = request.headers.get("Inference-Header-Content-Length")
    if header is None:
        return body, memoryview(b"")
    if not (header.isascii() and header.isdigit() and len(header) <= 18) or int(header) > len(body):
        raise RequestError(f"Inference-Header-Content-Length {header[:20]!r} is not a length within the "
                           f"{len(body)}-byte body")
    return body[:int(header)], memoryview(body)[int(header):]


def _parse_infer(model, doc, binary: memoryview):
    """(images, {output name: binary?}, request id) from a parsed request, the tensor built last, once
    everything else has been checked; RequestError otherwise."""
    if not isinstance(doc, dict):
        raise RequestError("request must be a JSON object")
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise RequestError(f"request must have 'inputs' with exactly one tensor ('{model.input_name}')")
    top = doc.get("parameters") or {}
    if not isinstance(top, dict):
        raise RequestError("request 'parameters' must be an object")
    binary_default = top.get("binary_data_output") is True
    requested = doc.get("outputs")
    if requested is not None and (not isinstance(requested, list) or not all(isinstance(o, dict) for o in requested)):
        raise RequestError("'outputs' must be a list of objects")
    names = check_outputs([o.get("name") for o in requested or []])
    binary_of = {n: binary_default for n in names}
    for o in requested or []:
        p = o.get("parameters") or {}
        if not isinstance(p, dict):
            raise RequestError("output 'parameters' must be an object")
        if p.get("classification"):
            raise RequestError("the classification extension is not supported: ask for output 'classes'")
        if "binary_data" in p:
            binary_of[o["name"]] = p["binary_data"] is True

    tensor = inputs[0]
    batch = check_shape(model, tensor.get("name"), tensor.get("datatype"), tensor.get("shape"))
    params = tensor.get("parameters") or {}
    if not isinstance(params, dict):
        raise RequestError("input 'parameters' must be an object")
    size = params.get("binary_data_size")
    if size is not None:
        if type(size) is not int or not 0 <= size <= len(binary):
            raise RequestError(f"binary_data_size {str(size)[:20]} does not fit the {len(binary)} bytes of binary data")
        if "data" in tensor:
            raise RequestError("an input has both 'data' and binary_data_size")
        if size != len(binary):
            raise RequestError(f"{len(binary) - size} bytes of binary data beyond the input's")
        images = from_bytes(model, batch, binary)
    else:
        if len(binary):
            raise RequestError("binary data after the JSON header, but no input has a binary_data_size")
        images = from_json(model, batch, tensor.get("data"))
    request_id = doc.get("id")
    return images, binary_of, request_id if isinstance(request_id, str) else None


def _response(model, request_id, binary_of: dict[str, bool], outputs: dict[str, np.ndarray]) -> web.Response:
    entries, chunks = [], []
    for name, want_binary in binary_of.items():
        array = outputs[name]
        entry = {"name": name, "datatype": OUTPUT_DATATYPES[name], "shape": list(array.shape)}
        if want_binary:
            raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = array.reshape(-1).tolist()
        entries.append(entry)
    doc = {"model_name": model.name, "model_version": "1", "outputs": entries}
    if request_id is not None:
        doc["id"] = request_id
    header = json.dumps(doc).encode()
    if not chunks:
        return web.Response(body=header, content_type="application/json")
    return web.Response(body=b"".join([header, *chunks]), content_type="application/octet-stream",
                        headers={"Inference-Header-Content-Length": str(len(header))})


def make_app(service: InferenceService) -> web.Application:
    def model_of(request: web.Request):
        m = service.model(request.match_info["model"])
        if request.match_info.get("version", "1") not in ("1", ""):
            raise RequestError(f"model '{m.name}' has no version {request.match_info['version'][:20]!r}", NOT_FOUND)
        return m

    @web.middleware
    async def auth(request: web.Request, handler):
        if not request.path.startswith("/v2/health/"):  # probes stay open, as Kubernetes calls them
            service.check_token(request.headers.get("Authorization"))
        return await handler(request)

    async def server_metadata(_):
        return web.json_response(service.metadata())

    async def live(_):
        return web.Response()

    async def ready(_):
        return web.Response(status=200 if service.ready else 400)

    async def model_metadata(request):
        return web.json_response(model_of(request).metadata())

    async def model_ready(request):
        return web.Response(status=200 if model_of(request).name in service.batchers else 400)

    async def model_config(request):
        return web.json_response(model_of(request).config())

    async def infer(request: web.Request):
        name = request.match_info["model"]
        status = 500
        try:
            model = model_of(request)
            header, binary = _split_body(request, await read_body(request))
            images, binary_of, request_id = _parse_infer(model, _json(header), binary)
            response = _response(model, request_id, binary_of, await service.infer(model, images, list(binary_of)))
            status = 200
            return response
        except RequestError as e:
            status = e.http_status
            raise
        finally:
            service.count(name, status)

    limit = body_limit(service)
    reading = [0]  # bytes of request bodies being read or decoded now, by their declared length

    async def read_body(request: web.Request) -> bytes:
        """The body, refused at once when its declared length is over the limit. Large bodies (over
        HEADROOM, or of undeclared length, counted full-size) are read at most IN_FLIGHT_BODIES
        full-size ones' worth at a time: past that, a large request is refused as busy rather than
        held in memory. Small requests are never refused for it, so clients that trickle large
        bodies cannot starve them."""
        declared = request.content_length if request.content_length is not None else limit
        if declared > limit:
            raise RequestError("request body is larger than the server accepts", TOO_LARGE)
        if declared <= HEADROOM:
            return await request.read()
        if reading[0] + declared > IN_FLIGHT_BODIES * limit:
            raise RequestError("the server is reading too many large requests; try again", UNAVAILABLE)
        reading[0] += declared
        try:
            return await request.read()
        finally:
            reading[0] -= declared

    app = web.Application(middlewares=[_errors, auth], client_max_size=limit)
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        app.router.add_get(prefix, model_metadata)
        app.router.add_get(prefix + "/ready", model_ready)
        app.router.add_get(prefix + "/config", model_config)
        app.router.add_post(prefix + "/infer", infer)
    app.router.add_get("/v2", server_metadata)
    app.router.add_get("/v2/health/live", live)
    app.router.add_get("/v2/health/ready", ready)
    return app


def make_metrics_app(service: InferenceService) -> web.Application:
    @web.middleware
    async def auth(request: web.Request, handler):
        service.check_token(request.headers.get("Authorization"))
        return await handler(request)

    async def metrics(_):
        return web.Response(body=service.metrics.text(), content_type="text/plain", charset="utf-8")

    app = web.Application(middlewares=[_errors, auth])
    app.router.add_get("/metrics", metrics)
    return app

