"""`tools/export SOURCE-KIND SOURCE -o OUT.json ...`: one subcommand per source framework.

A new importer (keras, onnx) registers its own parser (options shared through export_args) and a
function returning (graph, tensors, source-runner-or-None); writing and checking are shared.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

from . import datasets, preprocessing
from . import export_core as export
from .export_args import (PreprocessingInvalid, PreprocessingMissing, add_common_args, input_spec_from_args,
                          int_list, labels_from_arg)
from .model_format import ModelFormatError, read_model


def _run_model_code(path: str) -> None:
    """Runs the user's FILE.py and makes its names visible where pickle looks for a class saved from
    a script (__main__), and its folder importable for a class saved from a module beside it."""
    import runpy
    import sys
    if not pathlib.Path(path).is_file():
        raise export.ExportError(f"--code {path}: no such file")
    sys.path.insert(0, str(pathlib.Path(path).resolve().parent))
    try:
        names = runpy.run_path(path, run_name="__cnnengine_model_code__")
    except Exception as e:  # the user's code may raise anything
        raise export.ExportError(f"--code {path}: running it failed ({type(e).__name__}: {e})") from None
    main = sys.modules["__main__"]
    for key, value in names.items():
        if not key.startswith("__") and not hasattr(main, key):
            setattr(main, key, value)


def _load_torch(path: str, allow_pickle: bool, code: str | None = None):
    import pickle

    import torch
    if not pathlib.Path(path).exists():
        raise export.ExportError(f"{path}: no such file")
    if pathlib.Path(path).is_dir():
        raise export.ExportError(f"{path}: is a directory, not a file written by torch.save")
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as refused:
            # weights_only refuses any Python class but tensors and containers: a whole nn.Module
            # (torch.save(model)) is a pickle, and unpickling it can run any code the file names.
            # That needs the user's word that the file is trusted; a state_dict never does.
            what = str(refused).split("WeightsUnpickler error: ")[-1].splitlines()[0]
            if "class" not in what.lower() and "global" not in what.lower():
                # Not a refused class (torch 1.13 says "Unsupported class", 2.x "global") but broken
                # bytes; torch's own text would wrongly suggest that weights_only=False helps.
                raise export.ExportError(f"{path}: not a file torch.load can read ({what})") from None
            if not allow_pickle:
                raise export.ExportError(
                    f"{path} holds pickled Python objects ({what}), as torch.save(model) writes for a whole "
                    "nn.Module: loading it runs code from the file. Pass --allow-pickle if you trust the file, "
                    "or save model.state_dict() and give the structure with --like GRAPH.json") from None
        if code:
            _run_model_code(code)
        return torch.load(path, map_location="cpu", weights_only=False)
    except export.ExportError:
        raise
    except AttributeError as e:
        if "Can't get attribute" not in str(e):
            raise export.ExportError(f"{path}: not a file torch.load can read (AttributeError: {e})") from None
        # torch.save(model) stores the class by name only: its code must be importable here.
        raise export.ExportError(f"{path}: {e}: the file names a class defined in the script that saved it; "
                                 "pass that script (or a file defining the class) with --code FILE.py") from None
    except export.ExportError:
        raise
    except Exception as e:  # torch.load's errors for a damaged or foreign file are of many types
        first = str(e).splitlines()[0] if str(e) else ""
        raise export.ExportError(f"{path}: not a file torch.load can read ({type(e).__name__}: {first})") from None


def _torch_source(args, like):
    import torch
    obj = _load_torch(args.source, args.allow_pickle, args.code)
    name = args.name or (like.graph["name"] if like else pathlib.Path(args.output).stem)
    labels = labels_from_arg(args.labels)
    if labels is None and like is not None:
        labels = like.graph.get("labels")
    description = args.description
    if isinstance(obj, torch.nn.Module):
        if isinstance(obj, torch.nn.Sequential):
            spec = input_spec_from_args(args, like)
            try:  # the walk keeps the layers' own names
                graph, tensors = export.graph_from_torch_module(obj, spec, name=name, labels=labels,
                                                                description=description)
                return graph, tensors, export.torch_source(obj, graph)
            except export.ExportError:
                pass  # e.g. BatchNorm2d: the traced route below folds it
        from .torch_import import graph_from_module
        shape = int_list(args.input_shape) if args.input_shape else (like.graph["input"]["shape"] if like else None)
        if shape is None:
            raise export.ExportError("--input-shape C,H,W is required without --like")
        args.name, args.labels = name, None if labels is None else ",".join(labels)
        args.input_shape = ",".join(str(d) for d in shape)
        return graph_from_module(obj, torch.zeros((1,) + tuple(shape)), args)
    if isinstance(obj, dict):
        # Training scripts often wrap the weights: {"state_dict": {...}} or {"model": {...}}.
        for key in ("state_dict", "model_state_dict", "model"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
        if like is None:
            raise export.ExportError(f"{args.source} holds a state_dict: give the structure with --like GRAPH.json")
        graph, tensors = export.graph_from_state_dict(obj, like, name=args.name, description=description)
        if args.labels is not None:
            graph["labels"] = labels
        # No independent PyTorch module exists for a bare state_dict: the reference interpreter
        # (float32 vs float64) and the engine are what the check can compare.
        return graph, tensors, None
    raise export.ExportError(f"{args.source}: holds a {type(obj).__name__}, neither an nn.Module nor a state_dict")


def _add_torch(sub) -> None:
    p = sub.add_parser("torch", help="a PyTorch nn.Module (torch.save of the module) or a state_dict (with --like)",
                       description="Export a PyTorch model. SOURCE is a file written by torch.save: a whole "
                                   "nn.Module of any structure (an nn.Sequential of Conv2d, AvgPool2d, MaxPool2d, "
                                   "ReLU, Tanh, Sigmoid, Flatten, Linear, Softmax is walked layer by layer, "
                                   "a leading ZeroPad2d becoming the input padding; any other module is traced "
                                   "through torch.onnx on an input of --input-shape, BatchNorm folded), or a "
                                   "state_dict whose tensors fill --like's graph in order.")
    p.add_argument("source", help="file written by torch.save")
    p.add_argument("--allow-pickle", action="store_true",
                   help="load a whole nn.Module saved by torch.save(model): a pickle, whose loading runs "
                        "code from the file (trusted files only)")
    p.add_argument("--code", metavar="FILE.py",
                   help="Python file defining the module's classes (the script that saved it): run before "
                        "loading a whole nn.Module whose class pickle cannot find (trusted files only)")
    add_common_args(p)
    p.set_defaults(load=_torch_source)


def pick_preset(args, like, log=print):
    """Loads the source under each preset that fits its channels and keeps the one whose outputs
    match --check-labels best on --check-data (the source framework's own outputs score it)."""
    images = datasets.read_idx(args.check_data)[:args.check_count]
    labels = datasets.read_idx(args.check_labels)[:len(images)].astype(np.int64)
    if len(labels) != len(images):
        raise export.ExportError(f"--check-labels {args.check_labels} holds {len(labels)} labels for "
                                 f"{len(images)} images")
    scores, best = {}, None
    for name in preprocessing.PRESETS:
        args.preset = name
        try:
            graph, tensors, source = args.load(args, like)
        except PreprocessingInvalid:
            continue  # e.g. imagenet's three channels for a one-channel model
        batch = images.reshape((len(images),) + tuple(graph["input"]["shape"]))
        run = source if source is not None else _graph_runner(graph, tensors)
        scores[name] = preprocessing.accuracy(run(batch), labels)
        if best is None or scores[name] > scores[best[0]]:
            best = (name, (graph, tensors, source))
    if best is None:
        raise export.ExportError("no preset fits the model's input channels; pass --scale/--mean/--std")
    args.preset = best[0]
    others = ", ".join(f"{k} {v:.1%}" for k, v in scores.items() if k != best[0])
    log(f"preprocessing: picked preset {best[0]} ({preprocessing.PRESETS[best[0]].formula}), "
        f"{scores[best[0]]:.1%} on {len(labels)} labelled images of {args.check_data} ({others})")
    return best[1]


def _graph_runner(graph, tensors):
    import torch

    from .model_format import Model, to_torch
    module = to_torch(Model(graph=graph, tensors=tensors, path=None)).eval()

    def run(batch):
        with torch.no_grad():
            out = module(torch.from_numpy(np.ascontiguousarray(batch)))
        return (out[0] if isinstance(out, tuple) else out).numpy()
    return run


def build_parser() -> argparse.ArgumentParser:
    """The command line; the Python API (cnnengine.export) parses through it too, so both take the
    same options with the same defaults."""
    parser = argparse.ArgumentParser(prog="cnnengine-export", description="Export a trained model to format v1 "
                                     "(formats/model-format-v1.md) and check it numerically.")
    sub = parser.add_subparsers(dest="kind", required=True, metavar="SOURCE-KIND")
    _add_torch(sub)
    from . import keras_import, onnx_import  # importers add their own subcommands
    keras_import.register(sub)
    onnx_import.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        import torch
        torch.set_num_threads(min(torch.get_num_threads(), 2))
        like = read_model(args.like) if args.like else None
        if args.check_labels and not args.check_data:
            raise export.ExportError("--check-labels needs --check-data: the images the labels belong to")
        try:
            graph, tensors, source = args.load(args, like)
        except PreprocessingMissing:
            if not args.check_labels:
                raise
            graph, tensors, source = pick_preset(args, like)
        if graph["input"]["dtype"] == "uint8":
            print(f"preprocessing: {preprocessing.describe(graph['input']['preprocess'])}")
        # A subcommand may bring its own checked write (it names the source framework in the report).
        model, report = getattr(args, "export_checked", export.export_checked)(
            args.output, graph, tensors, source,
            lambda g: export.check_batch(g, args.check_count, data=args.check_data),
            tolerance=args.tolerance, use_engine=not args.no_engine,
            producer=f"tools/export {args.kind}")
    except (export.ExportError, ModelFormatError, FileNotFoundError) as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {model.path} and {model.path.parent / model.graph['weights']['file']} "
          f"({model.parameter_count():,} parameters, {len(model.graph['nodes'])} nodes)")
    return 0
