"""Any torch.nn.Module to format v1, through torch.onnx.export and the ONNX importer.

torch.onnx traces the module's forward as it runs (subclassed modules, functional calls, residual
Adds, BatchNorm in eval mode), on every torch this package supports; torch.fx cannot trace
data-dependent Python and torch.export is missing from torch 1.x. The ONNX importer then folds
BatchNorm into the layer before it and reads a leading Div/Sub/Mul as the model's own
preprocessing, as it does for any ONNX file. The check runs the module itself.
"""
from __future__ import annotations

import io
import pathlib
import tempfile

import numpy as np

from . import import_common as ic
from . import onnx_import
from .import_common import ImportFailure


def onnx_bytes(module, example) -> bytes:
    """The module traced in eval mode on `example` (one float32 batch), the batch size left free."""
    import torch
    was_training = module.training
    buffer = io.BytesIO()
    try:
        with torch.no_grad():
            torch.onnx.export(module.eval(), (example,), buffer, input_names=["input"], output_names=["output"],
                              dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=13,
                              do_constant_folding=True)
    except Exception as e:  # torch.onnx raises many types for what it cannot trace
        first = str(e).splitlines()[0] if str(e) else ""
        raise ImportFailure(f"{type(module).__name__}: torch.onnx.export failed "
                            f"({type(e).__name__}: {first})") from None
    finally:
        module.train(was_training)
    return buffer.getvalue()


def module_runner(module, onnx_runner, per_sample: tuple):
    """Raw uint8 [N, C, H, W] -> the module's first output, fed what the user's code feeds it (the
    ONNX source runner's preprocessing and padding)."""
    import torch

    def run(batch: np.ndarray) -> np.ndarray:
        x = ic.user_preprocess(onnx_runner.user_spec, onnx_runner.user_pad, batch).reshape((len(batch),) + per_sample)
        training = module.training
        try:
            with torch.no_grad():
                out = module.eval()(torch.from_numpy(np.ascontiguousarray(x)))
        finally:
            module.train(training)
        out = out[0] if isinstance(out, (tuple, list)) else out
        return out.to(torch.float32).numpy()
    return ic.labeled(run, f"PyTorch {type(module).__name__}")


def graph_from_module(module, example, args):
    """(graph, tensors, source runner) for `module` given one example input batch; `args` are the
    exporter's options (preprocessing, names, labels; input_shape defaults to the example's)."""
    import torch
    example = torch.as_tensor(example, dtype=torch.float32)
    if example.dim() not in (2, 4):
        raise ImportFailure(f"the example input must be one batch [N, C, H, W] or [N, K], not shape "
                            f"{list(example.shape)}")
    per_sample = tuple(example.shape[1:])
    if getattr(args, "input_shape", None) is None and len(per_sample) == 3:
        args.input_shape = ",".join(str(d) for d in per_sample)
    what = f"PyTorch module {type(module).__name__}"
    data = onnx_bytes(module, example)
    source, description = args.source, args.description
    with tempfile.TemporaryDirectory() as tmp:
        args.source = str(pathlib.Path(tmp) / f"{type(module).__name__}.onnx")
        pathlib.Path(args.source).write_bytes(data)
        args.source_name = getattr(args, "source_name", None) or what
        args.description = description or f"exported from {what}"
        try:
            graph, tensors, onnx_runner = onnx_import.load(args, None)
        except ImportFailure as e:
            raise ImportFailure(str(e).replace(args.source, what)) from None
        finally:
            args.source, args.description = source, description
    return graph, tensors, module_runner(module, onnx_runner, per_sample)
