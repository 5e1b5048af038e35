"""What the server knows of one served model: its input as the protocol sees it, the limits derived
from --max-batch, and the metadata and configuration documents it answers with."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

# The input keeps the name the graph file gives it (models/*.json: "image"); the outputs are these.
OUTPUT_PROBABILITIES = "probabilities"
OUTPUT_CLASSES = "classes"
OUTPUT_DATATYPES = {OUTPUT_PROBABILITIES: "FP32", OUTPUT_CLASSES: "INT64"}

DATATYPES = {np.dtype(np.uint8): "UINT8", np.dtype(np.float32): "FP32"}


def input_dims(input_shape: tuple[int, int, int]) -> tuple[int, ...]:
    """Per-image dims a request declares after its batch dimension: [H, W] for one-channel models
    (requests are [N, H, W]), [C, H, W] otherwise; one model takes one rank."""
    c, h, w = input_shape
    return (h, w) if c == 1 else (c, h, w)


@dataclass
class ServedModel:
    name: str
    instances: list            # cnnengine.Model, one per batcher worker
    max_batch: int
    max_queue_delay_us: int
    precision: str
    input_name: str = field(init=False)
    dtype: np.dtype = field(init=False)
    datatype: str = field(init=False)
    dims: tuple[int, ...] = field(init=False)
    image_elements: int = field(init=False)
    image_bytes: int = field(init=False)
    classes: int = field(init=False)

    def __post_init__(self):
        m = self.instances[0]
        self.input_name = m.input_name
        self.dtype = np.dtype(m.input_dtype)
        self.datatype = DATATYPES[self.dtype]
        self.dims = input_dims(m.input_shape)
        self.image_elements = int(np.prod(self.dims))
        self.image_bytes = self.image_elements * self.dtype.itemsize
        self.classes = m.classes

    @property
    def max_request_bytes(self) -> int:
        """The largest tensor one request may carry: a full batch of images."""
        return self.max_batch * self.image_bytes

    def output_shape(self, name: str, batch: int) -> list[int]:
        return [batch, self.classes] if name == OUTPUT_PROBABILITIES else [batch, 1]

    def metadata(self) -> dict:
        """GET /v2/models/NAME (gRPC ModelMetadata): the batch dimension is -1."""
        return {"name": self.name, "versions": ["1"], "platform": "cnnengine",
                "inputs": [{"name": self.input_name, "datatype": self.datatype, "shape": [-1, *self.dims]}],
                "outputs": [{"name": n, "datatype": d, "shape": [-1, self.classes if n == OUTPUT_PROBABILITIES else 1]}
                            for n, d in OUTPUT_DATATYPES.items()]}

    def parameters(self) -> dict[str, str]:
        """The engine's view of the model, as string parameters of the model configuration. No file
        paths: a client learns what the model is, not where the server keeps it."""
        m = self.instances[0]
        return {"labels": json.dumps(m.labels), "engine_backend": m.backend, "engine_precision": self.precision,
                "engine_input": json.dumps({"name": self.input_name, "dtype": str(self.dtype),
                                            "shape": list(m.input_shape)})}

    def config(self) -> dict:
        """GET /v2/models/NAME/config, in the layout of Triton's model configuration (its JSON form),
        so Triton clients read it unchanged."""
        return {"name": self.name, "platform": "cnnengine", "max_batch_size": self.max_batch,
                "input": [{"name": self.input_name, "data_type": "TYPE_" + self.datatype, "dims": list(self.dims)}],
                "output": [{"name": n, "data_type": "TYPE_" + d,
                            "dims": [self.classes if n == OUTPUT_PROBABILITIES else 1]}
                           for n, d in OUTPUT_DATATYPES.items()],
                "dynamic_batching": {"max_queue_delay_microseconds": self.max_queue_delay_us},
                "parameters": {k: {"string_value": v} for k, v in self.parameters().items()}}
