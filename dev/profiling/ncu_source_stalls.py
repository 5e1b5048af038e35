#!/usr/bin/env python3
"""Warp-stall samples per CUDA source line, summed over one or more Nsight Compute reports.

Nsight Compute's source page gives stall samples per SASS instruction; a batch-1 kernel runs a few
microseconds, so one launch holds few samples and several launches are added here. Each report's
instructions are matched by their offset from the kernel's first instruction (the module loads at a
different address in each process), and the CUDA line of each offset comes from one export made
with `--print-source cuda,sass` (the same binary). On the device (docs/design/custom-fused.md):

    for k in 200 201 202 203; do
      ncu --cache-control none --clock-control none -k regex:image_chain --launch-skip $k -c 1 \\
          --section SourceCounters --section WarpStateStats --warp-sampling-interval 0 -o rep$k \\
          build-gpu/engine -q bench models/lenet5.json --backend custom --batch 1 --no-data-transfers
      ncu -i rep$k.ncu-rep --page source --csv --print-source sass > sass$k.csv
    done
    ncu -i rep200.ncu-rep --page source --csv --print-source cuda,sass > mixed.csv
    dev/profiling/ncu_source_stalls.py --mixed mixed.csv sass200.csv sass201.csv sass202.csv sass203.csv

Prints the lines with the most samples (their three main stall reasons and executed warp
instructions), then the stall reasons over the whole kernel. Exit 2, with a message, for a file
that is not such an export.
"""
import argparse
import collections
import csv
import sys


class NotAnExport(Exception):
    pass


def _rows(path):
    with open(path, newline="") as f:
        yield from csv.reader(f)


def line_of_offset(mixed_path):
    """{offset from the first instruction: (file, line, source text)} from a cuda,sass export."""
    by_address = {}
    file = line = None
    for row in _rows(mixed_path):
        if not row:
            continue
        if row[0] == "File Path":
            file = row[1].split("/")[-1]
        elif row[0].isdigit() and len(row) > 1:
            line = (file, int(row[0]), row[1].strip()[:70])
        elif row[0] == "" and len(row) > 2 and row[2].startswith("0x") and line is not None:
            by_address[int(row[2], 16)] = line
    if not by_address:
        raise NotAnExport(f"{mixed_path}: no SASS rows under CUDA lines (export it with --print-source cuda,sass)")
    base = min(by_address)
    return {a - base: v for a, v in by_address.items()}


def sass_samples(path):
    """[(offset, samples, executed, {reason: samples})] of one --print-source sass export."""
    header, rows = None, []
    for row in _rows(path):
        if row and row[0] == "Address":
            header = row
        elif header and row and row[0].startswith("0x"):
            rows.append(row)
    if not header or not rows:
        raise NotAnExport(f"{path}: no 'Address' table with instructions (an ncu --page source --csv export?)")
    try:
        total = header.index("Warp Stall Sampling (All Samples)")
        executed = header.index("Instructions Executed")
    except ValueError as e:
        raise NotAnExport(f"{path}: {e} (the report needs the SourceCounters and WarpStateStats sections)") from None
    reasons = [(i, h[len("stall_"):]) for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    base = min(int(r[0], 16) for r in rows)
    out = []
    try:
        for r in rows:
            stalls = {name: int(r[i]) for i, name in reasons if r[i] not in ("", "0")}
            out.append((int(r[0], 16) - base, int(r[total] or 0), int(r[executed] or 0), stalls))
    except (ValueError, IndexError) as e:
        raise NotAnExport(f"{path}: a row that is not numbers where counts belong ({e})") from None
    return out


def summarize(mixed_path, sass_paths):
    lines = line_of_offset(mixed_path)
    samples, executed = collections.Counter(), collections.Counter()
    reasons = collections.defaultdict(collections.Counter)
    for path in sass_paths:
        for offset, n, ex, stalls in sass_samples(path):
            where = lines.get(offset, ("?", 0, "(no CUDA line)"))
            samples[where] += n
            executed[where] += ex
            reasons[where].update(stalls)
    return samples, executed, reasons


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mixed", required=True, help="ncu --page source --csv --print-source cuda,sass export")
    ap.add_argument("sass", nargs="+", help="ncu --page source --csv --print-source sass exports, one per report")
    ap.add_argument("--top", type=int, default=40, help="lines to print (default 40)")
    a = ap.parse_args(argv)
    try:
        samples, executed, reasons = summarize(a.mixed, a.sass)
    except (NotAnExport, OSError) as e:
        print(f"ncu_source_stalls: {e}", file=sys.stderr)
        return 2
    print(f"{sum(samples.values())} samples in {len(a.sass)} report(s)")
    for where, n in samples.most_common(a.top):
        top = ", ".join(f"{k} {v}" for k, v in reasons[where].most_common(3))
        print(f"{n:6d} {where[0]}:{where[1]} executed {executed[where]:7d} | {top} | {where[2]}")
    overall = collections.Counter()
    for c in reasons.values():
        overall.update(c)
    print("by reason: " + ", ".join(f"{k} {v}" for k, v in overall.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
