"""Export to model format v1 from Python, checked numerically as `cnnengine-export` checks:

    from cnnengine import export
    m = export.from_torch(net, torch.zeros(1, 1, 28, 28), preset="mnist")   # any nn.Module
    m = export.from_onnx("model.onnx", preset="unit")
    m = export.from_keras("model.keras")          # a leading Rescaling layer states the preprocessing
    m.save("out/net.json")                        # writes out/net.json and out/net.safetensors

Preprocessing (how raw uint8 pixels become the model's input) is never guessed: the source states
it (a Keras Rescaling layer, a leading Div/Sub/Mul in ONNX or in the module's forward), or the
caller does with preset= (cnnengine.preprocessing.PRESETS) or scale=, mean=, std=; otherwise the
export raises ExportError saying what to pass.

A PyTorch module goes through torch.onnx.export and the ONNX importer (torch_import says why), so
any nn.Module exports: subclassed, with BatchNorm, residual Adds, functional calls in forward.

The building blocks (the PyTorch Sequential walk, the check) live in export_core and stay
importable from here.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any, Optional, Sequence, Union

import numpy as np

from .export_core import (DEFAULT_TOLERANCE, ENGINE_CANDIDATES, CheckReport, Comparison, ExportError, check,
                          check_batch, check_export, compare, element_bounds, engine_binary, export_checked,
                          graph_from_state_dict, graph_from_torch_module, graph_object, model_to_torch,
                          run_engine, torch_source)
from .model_format import Model, write_model

__all__ = ["Exported", "ExportError", "from_torch", "from_onnx", "from_keras",
           # building blocks, as cnnengine-export uses them
           "DEFAULT_TOLERANCE", "ENGINE_CANDIDATES", "CheckReport", "Comparison", "check", "check_batch",
           "check_export", "compare",
           "element_bounds", "engine_binary", "export_checked", "graph_from_state_dict",
           "graph_from_torch_module", "graph_object", "model_to_torch", "run_engine", "torch_source"]

# How errors about the preprocessing keywords name them (the CLI says --preset, --scale, ...).
PYTHON_NAMES = {"preset": "preset=", "scale": "scale=", "mean": "mean=", "std": "std=", "transforms": "transforms="}


@dataclasses.dataclass
class Exported:
    """A checked export: the format v1 graph (a dict), its float32 tensors and the check's report."""
    graph: dict
    tensors: dict
    report: CheckReport

    @property
    def name(self) -> str:
        return self.graph["name"]

    def save(self, path: Union[str, os.PathLike]) -> Model:
        """Writes PATH (NAME.json) and the weights beside it (NAME.safetensors)."""
        path = pathlib.Path(path)
        graph = dict(self.graph, weights={"file": path.with_suffix(".safetensors").name, "sha256": "0" * 64})
        return write_model(path, graph, self.tensors, producer="cnnengine.export")


def _args(kind: str, source: str, name: Optional[str], options: dict):
    """The CLI's parsed options for `kind SOURCE`, with the keywords the caller gave."""
    from .export_cli import build_parser
    args = build_parser().parse_args([kind, source, "-o", f"{name or 'model'}.json"])
    for key, value in options.items():
        if value is not None:
            setattr(args, key, value)
    args.option_names = PYTHON_NAMES
    return args


def _run(args, load=None, *, check_count: int, use_engine: bool, log) -> Exported:
    graph, tensors, source = (load or (lambda a: a.load(a, None)))(args)
    report = check_export(graph, tensors, source,
                          lambda g: check_batch(g, check_count, data=args.check_data),
                          tolerance=args.tolerance, use_engine=use_engine, producer="cnnengine.export", log=log)
    if not report.ok:
        what = getattr(args, "source_name", None) or args.source
        raise ExportError(f"numerical check failed for {what}:\n{report.text()}")
    return Exported(graph, tensors, report)


def _common(preset, scale, mean, std, name, labels, tolerance, check_data, transforms=None) -> dict:
    return {"preset": preset, "scale": scale, "transforms": transforms,
            "mean": None if mean is None else list(np.atleast_1d(mean)),
            "std": None if std is None else list(np.atleast_1d(std)), "name": name,
            "labels": None if labels is None else ",".join(labels), "tolerance": tolerance,
            "check_data": None if check_data is None else os.fspath(check_data)}


def from_onnx(path: Union[str, os.PathLike], *, preset: Optional[str] = None, scale: Optional[float] = None,
              mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None,
              transforms: Optional[str] = None, name: Optional[str] = None, labels: Optional[Sequence[str]] = None,
              tolerance: float = DEFAULT_TOLERANCE, check_data: Union[str, os.PathLike, None] = None,
              check_count: int = 256, use_engine: bool = True, log=print) -> Exported:
    """An ONNX file as format v1, checked against the ONNX model itself. preset, scale/mean/std or
    transforms (a torchvision pipeline as written in Python: "ToTensor(), Normalize(m, s)"): how raw
    pixels become the model's input (required unless the model scales its own input)."""
    name = name or pathlib.Path(path).stem
    options = _common(preset, scale, mean, std, name, labels, tolerance, check_data, transforms)
    args = _args("onnx", os.fspath(path), name, options)
    return _run(args, check_count=check_count, use_engine=use_engine, log=log)


def from_keras(path: Union[str, os.PathLike], *, arch: Union[str, os.PathLike, None] = None,
               preset: Optional[str] = None, scale: Optional[float] = None,
               mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None,
               transforms: Optional[str] = None, name: Optional[str] = None, labels: Optional[Sequence[str]] = None,
               tolerance: float = DEFAULT_TOLERANCE, check_data: Union[str, os.PathLike, None] = None,
               check_count: int = 256, use_engine: bool = True, log=print) -> Exported:
    """A Keras file (.keras, .h5; weights-only .h5 with arch= the model.to_json() file) as format v1.
    A leading Rescaling layer states the preprocessing; otherwise give preset= or scale/mean/std."""
    name = name or pathlib.Path(path).stem
    options = _common(preset, scale, mean, std, name, labels, tolerance, check_data, transforms)
    options["arch"] = None if arch is None else os.fspath(arch)
    args = _args("keras", os.fspath(path), name, options)
    return _run(args, check_count=check_count, use_engine=use_engine, log=log)


def from_torch(module: Any, example: Any, *, preset: Optional[str] = None, scale: Optional[float] = None,
               mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None,
               transforms: Optional[str] = None, name: Optional[str] = None, labels: Optional[Sequence[str]] = None,
               input_shape: Optional[Sequence[int]] = None, tolerance: float = DEFAULT_TOLERANCE,
               check_data: Union[str, os.PathLike, None] = None, check_count: int = 256,
               use_engine: bool = True, log=print) -> Exported:
    """Any torch.nn.Module as format v1. `example`: one input batch as the module takes it (float32
    [N, C, H, W] or [N, K]); its per-sample shape is the model's input. input_shape: C,H,W of the raw
    images where the module's input is larger (padded) or flat. The module is exported through
    torch.onnx (eval mode: BatchNorm folds into the layer before it) and checked against itself."""
    import torch

    from .torch_import import graph_from_module
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, not {type(module).__name__}")
    name = name or type(module).__name__.lower()
    options = _common(preset, scale, mean, std, name, labels, tolerance, check_data, transforms)
    if input_shape is not None:
        options["input_shape"] = ",".join(str(int(d)) for d in input_shape)
    args = _args("onnx", f"{type(module).__name__}.onnx", name, options)
    return _run(args, lambda a: graph_from_module(module, example, a), check_count=check_count,
                use_engine=use_engine, log=log)
