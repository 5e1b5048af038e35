#!/usr/bin/env bash
# A/B of the custom backend's fused kernels on one GPU, in one run: engine bench (custom, CUDA
# graph, compute scope) once per variant, each variant a build of the engine (a build of another
# commit, or a traced one: dev/fused_trace/README.md); one line per variant and batch appended to
# OUTFILE, the lines dev/profiling/plot_ab.py --variants reads. The kernels' run-time choices are
# CustomOptions (engine/custom/custom_options.hpp), which the tests drive; a variant of the kernels
# themselves is a build.
#   usage: dev/profiling/fused_variants.sh OUTFILE BATCHES name:BUILD_DIR [name:BUILD_DIR ...]
#   (BATCHES: engine bench's --batch list, e.g. 1,1024,4096; BENCH_DURATION: seconds per batch)
set -uo pipefail
cd "$(dirname "$0")/../.."
(($# >= 3)) || { sed -n 2,9p "$0" >&2; exit 2; }
out=$1; batches=$2; shift 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for v in "$@"; do
  name=${v%%:*}; build=${v#*:}
  "$build/engine" -q bench models/lenet5.json --backend custom --batch "$batches" --cuda-graph \
    --no-data-transfers --duration "${BENCH_DURATION:-0.5}" --repetitions 3 --json "$tmp/$name.json" >/dev/null 2>&1 \
    || { echo "bench $name failed" | tee -a "$out"; continue; }
  python3 - "$tmp/$name.json" "$name" <<'PY' | tee -a "$out"
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    if r["mode"] == "graph" and r["scope"] == "compute":
        print(f"{sys.argv[2]:14s} batch {r['batch']:6d}  {r['images_per_s'] / 1e6:8.3f} M images/s  "
              f"{1e6 * r['batch'] / r['images_per_s']:9.2f} us")
PY
done
