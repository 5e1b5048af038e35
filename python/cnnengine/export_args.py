"""The options every `tools/export` subcommand shares, and their parsing.

Kept apart from export_cli so that the importers, which add their own subcommands, do not import
the CLI that imports them.
"""
from __future__ import annotations

import argparse
import pathlib

import numpy as np

from . import export


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


def input_spec_from_args(args, like) -> dict:
    if like is not None and args.input_shape is None:
        return dict(like.graph["input"])
    if args.input_shape is None:
        raise export.ExportError("--input-shape C,H,W is required without --like")
    shape = int_list(args.input_shape)
    spec = {"name": args.input_name, "dtype": args.input_dtype, "shape": shape}
    if args.input_dtype == "uint8":
        c = shape[0]
        mean = float_list(args.mean) if args.mean else [0.0] * c
        std = float_list(args.std) if args.std else [1.0] * c
        if len(mean) == 1:
            mean = mean * c
        if len(std) == 1:
            std = std * c
        # float32 rounding here makes the file state the exact float32 scale the engine will use.
        scale = float(np.float32(args.scale)) if args.scale else float(np.float32(1.0 / 255.0))
        spec["preprocess"] = {"scale": scale, "mean": mean, "std": std}
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
    p.add_argument("--scale", type=float, help="preprocess scale (default float32(1/255))")
    p.add_argument("--mean", help="preprocess mean per channel, comma-separated (default 0)")
    p.add_argument("--std", help="preprocess std per channel, comma-separated (default 1)")
    p.add_argument("--check-data", help="IDX file (raw or .gz) whose first samples feed the check "
                                        "(default: seeded random inputs)")
    p.add_argument("--check-count", type=int, default=256, help="samples in the check batch")
    p.add_argument("--tolerance", type=float, default=export.DEFAULT_TOLERANCE,
                   help="relative bound of the check: the first output passes when max |diff| <= "
                        "TOLERANCE * max(1, max |reference|) (default %(default)g)")
    p.add_argument("--no-engine", action="store_true", help="do not run the engine in the check")
