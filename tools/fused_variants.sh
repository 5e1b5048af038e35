#!/usr/bin/env bash
# A/B of the custom backend's fused kernels on one GPU, in one call (docs/perf-fused-gpu.md): engine
# bench (custom, CUDA graph, compute scope) once per variant, each variant a set of the plan's
# environment switches; one line per variant and batch appended to OUTFILE.
#   usage: tools/fused_variants.sh OUTFILE BATCHES ["name:VAR=v VAR=v" ...]
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build-gpu}; out=$1; batches=$2; shift 2
variants=("$@")
((${#variants[@]})) || variants=("default:" "dense-v1:ENGINE_FUSED_DENSE=1" "rows4:ENGINE_FUSED_ROWS=4"
                                  "tanh-called:ENGINE_FUSED_INLINE_TANH=0")
tmp=$(mktemp -d)
for v in "${variants[@]}"; do
  name=${v%%:*}; envs=${v#*:}
  env $envs $B/engine -q bench models/lenet5.json --backend custom --batch "$batches" --cuda-graph \
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
rm -rf "$tmp"
