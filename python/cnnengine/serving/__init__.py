"""The inference server behind cnnengine-serve: the Open Inference Protocol (KServe v2) over HTTP
(aiohttp) and gRPC (grpcio with the protocol's protobufs from tritonclient), a dynamic batcher per
model around the engine, Prometheus metrics, and the supervisor that runs the server as a child
process and restarts it.

Every request is checked against its model's input (name, datatype, shape, byte count, value range)
and the configured maximum batch before any tensor is built, so a bad request fails alone, with a
one-line reason, and never reaches the batch it would have joined. docs/design/serving.md has the
protocol, the limits and the measurements."""
