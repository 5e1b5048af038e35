"""What the Keras and ONNX importers share: the user's input preprocessing, node names, and the
checked write that labels the source framework in the check's report.

Keras and ONNX files record how raw pixels become the model's input only where the model scales its
own input; otherwise the user states it (export_args.preprocess_from: never guessed), with --pad and
--input-shape for the raw image's size; `input_spec` turns those and the model's own input size into
the graph's `input` object.
"""
from __future__ import annotations

import math
import pathlib
import re

import numpy as np

from . import datasets
from . import export_core as export
from .export_args import int_list, labels_from_arg, preprocess_from


class ImportFailure(export.ExportError):
    """An importer's error; the CLI prints it as `cnnengine-export: error: ...` and exits 1."""


# --------------------------------------------------------------------------------------------------
# Names

def node_name(raw: str | None, fallback: str, taken: set[str]) -> str:
    """A readable, unique node name: non-identifier characters become '_', leading/trailing '_' go."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", raw or "").strip("_")
    if not name:
        name = fallback
    if name[0].isdigit():
        name = f"{fallback}_{name}"
    return export.unique_name(name, taken)


# --------------------------------------------------------------------------------------------------
# Input preprocessing

def parse_pad(text: str | None) -> list[int] | None:
    """--pad P (each side) or --pad T,B,L,R."""
    if text is None:
        return None
    try:
        vals = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ImportFailure(f"--pad {text!r}: expected P or T,B,L,R (integers)") from None
    if len(vals) == 1:
        vals = vals * 4
    if len(vals) != 4 or min(vals) < 0:
        raise ImportFailure(f"--pad {text!r}: expected P or T,B,L,R, each >= 0")
    return vals


def _data_image_shape(path: str) -> tuple[int, ...]:
    arr = datasets.read_idx(path)
    return (1,) + tuple(arr.shape[1:]) if arr.ndim == 3 else tuple(arr.shape[1:])


def _raw_shape(args, like, model_shape: tuple[int, ...]) -> tuple[tuple[int, ...], str]:
    """(C, H, W) of one raw sample and where it came from."""
    if getattr(args, "input_shape", None):
        shape = tuple(int_list(args.input_shape))
        if len(shape) != 3 or min(shape) < 1:
            raise ImportFailure(f"--input-shape {args.input_shape!r}: expected C,H,W")
        return shape, "--input-shape"
    if like is not None:
        return tuple(like.graph["input"]["shape"]), "--like"
    if getattr(args, "check_data", None):
        shape = _data_image_shape(args.check_data)
        if len(shape) == 3:
            return shape, "--check-data"
    if len(model_shape) == 1:
        k = model_shape[0]
        return ((1, 28, 28) if k == 784 else (1, 1, k)), "default for a flat input"
    c, h, w = model_shape
    if c == 1 and h >= 28 and w >= 28 and (h - 28) % 2 == 0 and (w - 28) % 2 == 0:
        return (1, 28, 28), "default (MNIST images)"
    return tuple(model_shape), "default (the model's input size)"


def input_spec(args, like, model_shape: tuple[int, ...], what: str,
               default_scale: float | None = None) -> tuple[dict, list[int]]:
    """The graph's `input` object for a model whose first layer sees `model_shape` (C, H, W, or
    (K,) for a flat input that a leading flatten node produces from the raw [C, H, W] sample).

    The padding is --pad when given, else the difference between the model's input size and the
    raw image size (--input-shape, --like, --check-data's images, else 28x28 for a one-channel
    model of at least 28x28, else the model's own size), split evenly between the sides.
    The scale, mean and std: see `preprocess_from`.
    Returns (spec, pad) where pad = [top, bottom, left, right] is the part the user's own
    preprocessing applies before the model (the source framework's input has that padding)."""
    if getattr(args, "input_dtype", "uint8") != "uint8":
        raise ImportFailure("the engine reads uint8 images: only --input-dtype uint8 is supported by this importer")
    pad_arg = parse_pad(getattr(args, "pad", None))
    raw, origin = _raw_shape(args, like, model_shape)
    if len(model_shape) == 1:
        if pad_arg is not None and any(pad_arg):
            raise ImportFailure(f"{what} takes a flat vector of {model_shape[0]}: --pad cannot apply")
        if math.prod(raw) != model_shape[0]:
            raise ImportFailure(f"{what} takes a flat vector of {model_shape[0]} values but the raw sample is "
                                f"{list(raw)} ({origin}); give --input-shape C,H,W with C*H*W = {model_shape[0]}")
        pad = [0, 0, 0, 0]
    else:
        c, h, w = model_shape
        if pad_arg is not None:
            pad = pad_arg
            derived = (c, h - pad[0] - pad[1], w - pad[2] - pad[3])
            if origin == "--input-shape" and tuple(raw) != derived:
                raise ImportFailure(f"--input-shape {list(raw)} padded by --pad {pad} is not the input "
                                    f"{[c, h, w]} that {what} takes")
            if min(derived) < 1:
                raise ImportFailure(f"--pad {pad} leaves no image of {what}'s input {[c, h, w]}")
            raw = derived
        else:
            if raw[0] != c:
                raise ImportFailure(f"the raw sample {list(raw)} ({origin}) has {raw[0]} channel(s), {what} "
                                    f"takes {c}; give --input-shape")
            dh, dw = h - raw[1], w - raw[2]
            like_pad = list(like.graph["input"].get("preprocess", {}).get("pad", [0, 0, 0, 0])) \
                if like is not None and origin == "--like" else None
            if like_pad is not None and (raw[1] + like_pad[0] + like_pad[1],
                                         raw[2] + like_pad[2] + like_pad[3]) == (h, w):
                pad = like_pad
            elif dh < 0 or dw < 0 or dh % 2 or dw % 2:
                raise ImportFailure(f"{what} takes {h}x{w} images but the raw images are {raw[1]}x{raw[2]} "
                                    f"({origin}): give --pad T,B,L,R or --input-shape")
            else:
                pad = [dh // 2, dh // 2, dw // 2, dw // 2]
    if getattr(args, "check_data", None) and origin != "--check-data":
        data_shape = _data_image_shape(args.check_data)
        if tuple(data_shape) != tuple(raw):
            raise ImportFailure(f"--check-data {args.check_data} holds {list(data_shape)} images but the model's "
                                f"raw input is {list(raw)} ({origin}); give --pad or --input-shape to match")
    pre = preprocess_from(args, like, raw[0], default_scale)
    if any(pad):
        pre["pad"] = list(pad)
        pre["pad_value"] = 0.0
    name = like.graph["input"]["name"] if like is not None and getattr(args, "input_name", "image") == "image" \
        else getattr(args, "input_name", "image")
    return {"name": name, "dtype": "uint8", "shape": list(raw), "preprocess": pre}, list(pad)


def user_preprocess(spec: dict, pad: list[int], batch: np.ndarray) -> np.ndarray:
    """What the user's own code does before the source model: the spec's float32 arithmetic and
    the user's padding `pad` (not padding that a layer of the model itself applies)."""
    pre = spec["preprocess"]
    f32 = np.float32
    c = spec["shape"][0]
    y = (batch.astype(f32) * f32(pre["scale"]) - np.asarray(pre["mean"], f32).reshape(1, c, 1, 1)) \
        / np.asarray(pre["std"], f32).reshape(1, c, 1, 1)
    t, b, l, r = pad
    return np.pad(y, ((0, 0), (0, 0), (t, b), (l, r))).astype(f32)


# --------------------------------------------------------------------------------------------------
# The checked write, with the source framework named in the report

def export_checked(out_path, graph, tensors, source, batch_for, *, tolerance=export.DEFAULT_TOLERANCE,
                   use_engine=True, producer="tools/export", log=print):
    """export.export_checked (the report names the source by `source.label`), raising ImportFailure.
    Writes nothing unless the check passes."""
    try:
        return export.export_checked(out_path, graph, tensors, source, batch_for, tolerance=tolerance,
                                     use_engine=use_engine, producer=producer, log=log)
    except ImportFailure:
        raise
    except export.ExportError as e:
        raise ImportFailure(str(e).replace("exported graph", "imported graph")) from None


def append_node(nodes: list, tensors: dict, name: str, op: str, inputs: list[str], attrs=None, params=None) -> dict:
    """Appends a format v1 node; its parameters (role -> array, None skipped) become float32 tensors
    named NODE.ROLE."""
    node = {"name": name, "op": op, "inputs": list(inputs)}
    if attrs:
        node["attrs"] = attrs
    if params:
        node["tensors"] = {}
        for role, arr in params.items():
            if arr is not None:
                node["tensors"][role] = f"{name}.{role}"
                tensors[f"{name}.{role}"] = np.ascontiguousarray(arr, np.float32)
    nodes.append(node)
    return node


def labeled(fn, label: str):
    """Attaches the name the check's report uses for a source runner."""
    fn.label = label
    return fn


def labels_arg(args, like) -> list[str] | None:
    text = getattr(args, "labels", None)
    if text is not None:
        return labels_from_arg(text)
    if like is not None:
        return like.graph.get("labels")
    return None


def model_name(args, like) -> str:
    if getattr(args, "name", None):
        return args.name
    if like is not None:
        return like.graph["name"]
    return pathlib.Path(args.output).stem
