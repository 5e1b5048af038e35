"""The Open Inference Protocol over gRPC (grpc.aio, with the KServe v2 / Triton protobufs that
tritonclient ships). gRPC refuses a message over the server's limit before parsing it; the parsed
request is checked against the model before a tensor is built."""
from __future__ import annotations

import logging

import grpc
import numpy as np
from google.protobuf.message import DecodeError
from tritonclient.grpc import model_config_pb2, service_pb2

from .model import OUTPUT_DATATYPES
from .validation import NOT_FOUND, RequestError, check_outputs, check_shape, from_bytes, from_json
from .service import InferenceService

LOG = logging.getLogger("cnnengine.serve")
HEADROOM = 64 * 1024
MAX_CONCURRENT_CALLS = 256


def message_limit(service: InferenceService) -> int:
    """The largest message accepted: a full batch as typed contents, the largest encoding (a uint32
    varint takes up to 5 bytes per value; raw bytes and fp32 contents take 1 or 4)."""
    return HEADROOM + max(m.max_batch * m.image_elements * 5 for m in service.models.values())


def _contents_array(model, batch: int, tensor):
    """The input from typed contents (uint_contents for UINT8, fp32_contents for FP32)."""
    c = tensor.contents
    values = list(c.uint_contents) if model.datatype == "UINT8" else list(c.fp32_contents)
    others = (len(c.int_contents) + len(c.int64_contents) + len(c.uint64_contents) + len(c.bool_contents)
              + len(c.bytes_contents) + len(c.fp64_contents)
              + (len(c.fp32_contents) if model.datatype == "UINT8" else len(c.uint_contents)))
    if others:
        field = "uint_contents" if model.datatype == "UINT8" else "fp32_contents"
        raise RequestError(f"input '{model.input_name}' is {model.datatype}: its contents go in {field}")
    if model.datatype == "FP32":
        values = np.asarray(values, dtype=np.float32).astype(float).tolist()
    return from_json(model, batch, values)


class Servicer:
    def __init__(self, service: InferenceService):
        self.s = service

    def _model(self, name, version):
        m = self.s.model(name)
        if version not in ("", "1"):
            raise RequestError(f"model '{m.name}' has no version {version[:20]!r}", NOT_FOUND)
        return m

    def _auth(self, context) -> None:
        self.s.check_token(dict(context.invocation_metadata()).get("authorization"))

    async def _abort(self, context, e: RequestError):
        await context.abort(getattr(grpc.StatusCode, e.grpc_code), str(e))

    async def ServerLive(self, request, context):
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=self.s.ready)

    async def ModelReady(self, request, context):
        try:
            m = self._model(request.name, request.version)
        except RequestError:
            return service_pb2.ModelReadyResponse(ready=False)
        return service_pb2.ModelReadyResponse(ready=m.name in self.s.batchers)

    async def ServerMetadata(self, request, context):
        try:
            self._auth(context)
        except RequestError as e:
            await self._abort(context, e)
        md = self.s.metadata()
        return service_pb2.ServerMetadataResponse(name=md["name"], version=md["version"], extensions=md["extensions"])

    async def _authorized_model(self, request, context):
        try:
            self._auth(context)
            return self._model(request.name, request.version)
        except RequestError as e:
            await self._abort(context, e)

    async def ModelMetadata(self, request, context):
        md = (await self._authorized_model(request, context)).metadata()
        r = service_pb2.ModelMetadataResponse(name=md["name"], versions=md["versions"], platform=md["platform"])
        for kind, entries in (("inputs", md["inputs"]), ("outputs", md["outputs"])):
            for t in entries:
                getattr(r, kind).add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        return r

    async def ModelConfig(self, request, context):
        cfg = (await self._authorized_model(request, context)).config()
        c = model_config_pb2.ModelConfig(name=cfg["name"], platform=cfg["platform"],
                                         max_batch_size=cfg["max_batch_size"])
        for kind, entries in (("input", cfg["input"]), ("output", cfg["output"])):
            for t in entries:
                getattr(c, kind).add(name=t["name"], data_type=model_config_pb2.DataType.Value(t["data_type"]),
                                     dims=t["dims"])
        c.dynamic_batching.SetInParent()
        c.dynamic_batching.max_queue_delay_microseconds = cfg["dynamic_batching"]["max_queue_delay_microseconds"]
        for k, v in cfg["parameters"].items():
            c.parameters[k].string_value = v["string_value"]
        return service_pb2.ModelConfigResponse(config=c)

    async def ModelInfer(self, request, context):
        status = 500
        try:
            self._auth(context)
            m = self._model(request.model_name, request.model_version)
            if len(request.inputs) != 1:
                raise RequestError(f"request must have exactly one input ('{m.input_name}'), not {len(request.inputs)}")
            tensor = request.inputs[0]
            batch = check_shape(m, tensor.name, tensor.datatype, list(tensor.shape))
            if len(request.raw_input_contents) > 1:
                raise RequestError(f"{len(request.raw_input_contents)} raw_input_contents for one input")
            for o in request.outputs:
                if "classification" in o.parameters:
                    raise RequestError("the classification extension is not supported: ask for output 'classes'")
            names = check_outputs([o.name for o in request.outputs])
            if request.raw_input_contents:  # the tensor is built last, once everything else is checked
                if tensor.HasField("contents"):
                    raise RequestError("an input has both contents and raw_input_contents")
                images = from_bytes(m, batch, request.raw_input_contents[0])
            else:
                images = _contents_array(m, batch, tensor)
            outputs = await self.s.infer(m, images, names)
            status = 200
        except RequestError as e:
            status = e.http_status
            self.s.count(request.model_name, status)
            await self._abort(context, e)
        except Exception:  # noqa: BLE001 - logged in full here, one line to the client
            LOG.exception("internal error on ModelInfer")
            self.s.count(request.model_name, status)
            await context.abort(grpc.StatusCode.INTERNAL, "internal server error")
        self.s.count(m.name, status)
        r = service_pb2.ModelInferResponse(model_name=m.name, model_version="1", id=request.id)
        for name in names:
            array = outputs[name]
            r.outputs.add(name=name, datatype=OUTPUT_DATATYPES[name], shape=list(array.shape))
            r.raw_output_contents.append(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
        return r


# The calls served; any other method of the service is answered UNIMPLEMENTED by grpc.
METHODS = ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelConfig", "ModelInfer")


def _handlers(servicer: Servicer) -> grpc.GenericRpcHandler:
    """The service's handlers, as the generated code registers them but for the request parser: bytes
    that are no valid message get INVALID_ARGUMENT from here instead of a parse exception inside
    grpc (UNKNOWN to the client, a traceback in the server's log for each such request)."""
    handlers = {}
    for name in METHODS:
        request_type = getattr(service_pb2, f"{name}Request")
        response_type = getattr(service_pb2, f"{name}Response")
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            _refusing_unparsed(getattr(servicer, name)), request_deserializer=_parse_or_none(request_type),
            response_serializer=response_type.SerializeToString)
    return grpc.method_handlers_generic_handler("inference.GRPCInferenceService", handlers)


def _parse_or_none(message_type):
    def parse(data: bytes):
        try:
            return message_type.FromString(data)
        except DecodeError:
            return None
    return parse


def _refusing_unparsed(method):
    async def call(request, context):
        if request is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the request is not a valid protobuf message")
        return await method(request, context)
    return call


def make_server(service: InferenceService, address: str, tls: tuple[bytes, bytes] | None) -> grpc.aio.Server:
    limit = message_limit(service)
    # Calls in progress are bounded as well, so many full-size messages at once are refused
    # (RESOURCE_EXHAUSTED) rather than held in memory.
    server = grpc.aio.server(maximum_concurrent_rpcs=MAX_CONCURRENT_CALLS,
                             options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", limit),
                                      ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((_handlers(Servicer(service)),))
    try:
        if tls:
            key, cert = tls
            port = server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:  # grpcio's way of saying the bind failed
        port = 0
    if not port:
        raise OSError(f"cannot listen for gRPC on {address} (address in use, or not an address of this machine)")
    return server
