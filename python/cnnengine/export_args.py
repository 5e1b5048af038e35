"""The options every `tools/export` subcommand shares, and their parsing.

Kept apart from export_cli so that the importers, which add their own subcommands, do not import
the CLI that imports them.
"""
from __future__ import annotations

import argparse
import pathlib

import numpy as np

from . import export_core as export
from . import preprocessing


def float_list(text: str) -> list[float]:
    """'0.5,0.25' -> [0.5, 0.25]."""
    return [float(x) for x in text.split(",") if x.strip()]


def int_list(text: str) -> list[int]:
    """'1,28,28' -> [1, 28, 28]."""
    return [int(x) for x in text.split(",") if x.strip()]


def labels_from_arg(text: str | None) -> list[str] | None:
    """--labels: comma-separated, or @FILE with one per line."""
    if text is None:
        return None
    if text.startswith("@"):
        return [line.rstrip("\n") for line in pathlib.Path(text[1:]).read_text().splitlines() if line.strip()]
    return text.split(",")


class PreprocessingMissing(export.ExportError):
    """Nothing states how raw pixels become the model's input; `source` names the model."""

    def __init__(self, source: str, cli: bool = True):
        super().__init__(preprocessing.missing_message(source, cli=cli))
        self.source = source


class PreprocessingInvalid(export.ExportError):
    """Stated preprocessing that contradicts itself or does not fit the model's channels."""


CLI_NAMES = {"preset": "--preset", "scale": "--scale", "mean": "--mean", "std": "--std", "transforms": "--transforms"}


def preprocess_from(args, like, channels: int, default_scale: float | None = None) -> dict:
    """{scale, mean, std}: what the user states (--preset, or --scale with --mean/--std), else
    --like's, else what the source itself holds (`default_scale`: an importer passes 1.0 for a model
    that rescales raw pixels itself, with mean 0 and std 1). Nothing of these: PreprocessingMissing."""
    names = getattr(args, "option_names", CLI_NAMES)
    text = {k: getattr(args, k, None) for k in ("mean", "std")}
    try:
        user = preprocessing.stated(
            channels, preset_name=getattr(args, "preset", None), scale=getattr(args, "scale", None),
            mean=float_list(text["mean"]) if isinstance(text["mean"], str) else text["mean"],
            std=float_list(text["std"]) if isinstance(text["std"], str) else text["std"],
            transforms=getattr(args, "transforms", None), names=names)
    except preprocessing.PreprocessingError as e:
        raise PreprocessingInvalid(str(e)) from None
    if user is not None:
        return user
    base = like.graph["input"].get("preprocess") if like is not None else None
    if base and len(base["mean"]) == channels:
        return {"scale": float(base["scale"]), "mean": list(base["mean"]), "std": list(base["std"])}
    if default_scale is not None:
        return {"scale": float(np.float32(default_scale)), "mean": [0.0] * channels, "std": [1.0] * channels}
    what = getattr(args, "source_name", None) or getattr(args, "source", "the model")
    raise PreprocessingMissing(str(what), cli=names is CLI_NAMES)


def input_spec_from_args(args, like) -> dict:
    if like is not None and args.input_shape is None:
        return dict(like.graph["input"])
    if args.input_shape is None:
        raise export.ExportError("--input-shape C,H,W is required without --like")
    shape = int_list(args.input_shape)
    spec = {"name": args.input_name, "dtype": args.input_dtype, "shape": shape}
    if args.input_dtype == "uint8":
        spec["preprocess"] = preprocess_from(args, None, shape[0])
    return spec


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", required=True, help="graph file to write (NAME.json; weights go beside it)")
    p.add_argument("--like", help="graph file to take the input spec, labels and name from (and, for a "
                                  "state_dict, the whole structure)")
    p.add_argument("--name", help="model name (default: from --like, else the output's stem)")
    p.add_argument("--description", help="free text stored in the graph file")
    p.add_argument("--labels", help="class names, comma-separated, or @FILE with one per line")
    p.add_argument("--input-shape", help="C,H,W of one raw sample (required without --like)")
    p.add_argument("--input-dtype", choices=["uint8", "float32"], default="uint8")
    p.add_argument("--input-name", default="image")
    p.add_argument("--preset", choices=list(preprocessing.PRESETS),
                   help="how raw pixels x become the model's input: " +
                        "; ".join(f"{k}: {v.formula}" for k, v in preprocessing.PRESETS.items()))
    p.add_argument("--transforms", metavar="PIPELINE",
                   help="the torchvision transforms the model was trained with, as written in Python, e.g. "
                        "'ToTensor(), Normalize((0.1307,), (0.3081,))'")
    p.add_argument("--scale", type=float, help="preprocess scale: the input is (x * SCALE - MEAN) / STD")
    p.add_argument("--mean", help="preprocess mean per channel, comma-separated (default 0; needs --scale)")
    p.add_argument("--std", help="preprocess std per channel, comma-separated (default 1; needs --scale)")
    p.add_argument("--check-data", help="IDX file (raw or .gz) whose first samples feed the check "
                                        "(default: seeded random inputs)")
    p.add_argument("--check-labels", help="IDX labels of --check-data: without a stated preprocessing, the "
                                          "export scores the model under each preset and takes the best")
    p.add_argument("--check-count", type=int, default=256, help="samples in the check batch")
    p.add_argument("--tolerance", type=float, default=export.DEFAULT_TOLERANCE,
                   help="relative bound of the check: each element of the first output passes when its "
                        "|diff| from the float64 evaluation <= TOLERANCE * max(1, sum |w.x| its sums reach) "
                        "(default %(default)g)")
    p.add_argument("--no-engine", action="store_true", help="do not run the engine in the check")
