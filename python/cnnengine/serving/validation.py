"""Requests checked before anything is allocated for them: the declared shape, datatype and byte
count against the model's input and the maximum batch, the values of JSON data against the
datatype's range. Each check fails with a RequestError whose message is one line naming the problem;
nothing here builds a tensor larger than the bytes the request actually carried."""
from __future__ import annotations

import numpy as np

from .model import OUTPUT_DATATYPES, ServedModel

# HTTP status and gRPC status code name of each kind of refusal.
INVALID, NOT_FOUND, TOO_LARGE, UNAVAILABLE, UNAUTHENTICATED = (
    (400, "INVALID_ARGUMENT"), (404, "NOT_FOUND"), (413, "RESOURCE_EXHAUSTED"), (503, "UNAVAILABLE"),
    (401, "UNAUTHENTICATED"))


class RequestError(Exception):
    """A request refused; `str(e)` is the one-line reason sent back to the client."""

    def __init__(self, message: str, kind: tuple[int, str] = INVALID):
        super().__init__(" ".join(str(message).split())[:400])
        self.http_status, self.grpc_code = kind


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_shape(model: ServedModel, name, datatype, shape) -> int:
    """The batch size a request declares, after checking its input name, datatype and shape against
    the model; raises RequestError otherwise. Only integers are compared: nothing is allocated."""
    if name != model.input_name:
        raise RequestError(f"model '{model.name}' has no input {_short(name)} (its input is '{model.input_name}')")
    if datatype != model.datatype:
        raise RequestError(f"input '{name}' of model '{model.name}' is {model.datatype}, not {_short(datatype)}")
    if not isinstance(shape, (list, tuple)) or not all(type(d) is int for d in shape):
        raise RequestError(f"input '{name}': shape must be a list of integers, not {_short(shape)}")
    expected = ["N", *model.dims]
    if len(shape) != len(expected) or tuple(shape[1:]) != model.dims:
        raise RequestError(f"input '{name}' of model '{model.name}' has shape [{', '.join(map(str, expected))}], "
                           f"not {_short(list(shape))}")
    batch = shape[0]
    if not 1 <= batch <= model.max_batch:
        raise RequestError(f"input '{name}': batch {batch} is outside 1..{model.max_batch} (the server's --max-batch)",
                           INVALID if batch < 1 else TOO_LARGE)
    return batch


def from_bytes(model: ServedModel, batch: int, data) -> np.ndarray:
    """The input tensor of `batch` images from raw little-endian bytes of exactly the declared size."""
    expected = batch * model.image_bytes
    if len(data) != expected:
        raise RequestError(f"input '{model.input_name}': {len(data)} bytes of data for shape "
                           f"[{batch}, {', '.join(map(str, model.dims))}] {model.datatype}, which needs {expected}")
    array = np.frombuffer(data, dtype=model.dtype.newbyteorder("<")).astype(model.dtype, copy=False)
    return _checked_values(model, array.reshape(batch, *model.dims))


def _flatten(data, depth: int, out: list) -> None:
    """JSON data is flat or nested row-major up to the tensor's rank; deeper nesting is refused."""
    for item in data:
        if isinstance(item, list):
            if depth <= 1:
                raise RequestError("data is nested deeper than the input's rank")
            _flatten(item, depth - 1, out)
        else:
            out.append(item)


def from_json(model: ServedModel, batch: int, data) -> np.ndarray:
    """The input tensor from JSON `data` values; UINT8 takes integers 0..255, FP32 finite numbers."""
    if not isinstance(data, list):
        raise RequestError(f"input '{model.input_name}': data must be a JSON array, not {type(data).__name__}")
    values: list = []
    _flatten(data, 1 + len(model.dims), values)
    expected = batch * model.image_elements
    if len(values) != expected:
        raise RequestError(f"input '{model.input_name}': {len(values)} values of data for shape "
                           f"[{batch}, {', '.join(map(str, model.dims))}], which needs {expected}")
    if any(type(v) not in (int, float) for v in values):
        bad = next(v for v in values if type(v) not in (int, float))
        raise RequestError(f"input '{model.input_name}': data holds {_short(bad)}, not a number")
    if model.datatype == "UINT8":
        if any(type(v) is not int for v in values):
            raise RequestError(f"input '{model.input_name}': UINT8 data must be integers")
        low, high = min(values), max(values)
        if low < 0 or high > 255:
            raise RequestError(f"input '{model.input_name}': UINT8 value {low if low < 0 else high} is outside 0..255")
        array = np.array(values, dtype=np.uint8)
    else:
        try:
            array = np.array(values, dtype=np.float64)
        except OverflowError:  # an integer beyond any float
            array = np.array([np.inf])
        if not np.all(np.abs(array) <= np.finfo(np.float32).max):
            raise RequestError(f"input '{model.input_name}': FP32 data must be finite numbers within FP32's range")
        array = array.astype(np.float32)
    return array.reshape(batch, *model.dims)


def _checked_values(model: ServedModel, array: np.ndarray) -> np.ndarray:
    if model.datatype == "FP32" and not np.isfinite(array).all():
        raise RequestError(f"input '{model.input_name}': FP32 data must be finite")
    return array


def check_outputs(requested) -> list[str]:
    """The names of the outputs a request asks for (all of them when it names none)."""
    if not requested:
        return list(OUTPUT_DATATYPES)
    names = []
    for name in requested:
        if name not in OUTPUT_DATATYPES:
            raise RequestError(f"no output {_short(name)} (outputs: {', '.join(OUTPUT_DATATYPES)})")
        if name not in names:
            names.append(name)
    return names


def reject_json_constant(name: str):
    """json.loads' parse_constant: NaN and Infinity are not JSON."""
    raise RequestError(f"{name} is not a JSON number")
