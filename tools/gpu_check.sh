#!/usr/bin/env bash
# One call on a GPU machine: build, run every test (GPU ones included), compute-sanitizer on the GPU
# test binary, and `engine run` on MNIST t10k with each backend. Logs go to $OUT (or ./gpu-check).
# Expects the MNIST test set in data/mnist/ (copied there from ../shared/data, carried to the device).
#   usage: tools/gpu_check.sh [build|test|sanitize|run|bench]...   (default: build test sanitize run)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check}; mkdir -p "$OUT"
B=build-gpu
DATA=$PWD/data/mnist
steps=("$@"); ((${#steps[@]})) || steps=(build test sanitize run)
export PYTHONUNBUFFERED=1
status=0

for s in "${steps[@]}"; do
  case $s in
  build)
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
    gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    cmake -S . -B $B "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DENGINE_TEST_DATA_DIR="$PWD/data" >"$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
    cmake --build $B -j "$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error|Error" -A3 "$OUT/build.log" | head -80; exit 1; }
    echo "build ok"
    ;;
  test)
    ctest --test-dir $B --output-on-failure -j 4 >"$OUT/ctest.log" 2>&1 || status=1
    grep -E "tests passed|tests failed|Failed|\*\*\*|Skipped" "$OUT/ctest.log" | tail -40
    ;;
  sanitize)
    # The filtered-out tests provoke CUDA API errors on purpose (bad launch shape, out of memory),
    # which memcheck would count.
    for tool in memcheck racecheck initcheck; do
      ENGINE_SANITIZER_RUN=1 timeout ${SANITIZER_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 9 \
        $B/tests/gpu/gpu_tests --gtest_brief=1 --gtest_filter="-*InvalidLaunch*:*OutOfMemory*" >"$OUT/sanitizer-$tool.log" 2>&1; rc=$?
      echo "compute-sanitizer $tool: rc=$rc; $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-$tool.log" | tail -1)"
      ((rc == 0)) || status=1
    done
    ;;
  run)
    for be in cpu custom cudnn; do
      $B/engine run models/lenet5.json "$DATA/t10k-images-idx3-ubyte.gz" --labels "$DATA/t10k-labels-idx1-ubyte.gz" \
        --backend $be --batch 1024 --json >"$OUT/run-$be.json" 2>"$OUT/run-$be.log" || status=1
      echo "engine run --backend $be: $(cat "$OUT/run-$be.json" | tr -d '\n' | head -c 600)"
    done
    ;;
  bench)
    # engine bench (every backend and batch, plain and CUDA-graph, per-layer profile), engine bench
    # ops, PyTorch side by side on the same GPU, every panel in one PNG: 5 files in $OUT (bench.json,
    # ops.json, torch.json, bench.png, bench.log), at most about 6 minutes (each part has a timeout).
    # BENCH_MODEL picks another model, BENCH_DURATION the seconds per repetition (default 0.5); plots
    # are redrawn from the JSON files with tools/plot_bench.py (docs/benchmarks.md).
    bench_all() {
      local rc=0 model=${BENCH_MODEL:-models/lenet5.json}
      local py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
      timeout 180 $B/engine bench "$model" --backend all --batch 1,64,1024,65536 --cuda-graph --profile \
        --duration "${BENCH_DURATION:-0.5}" --repetitions 3 --max-cpu-batch 65536 --json "$OUT/bench.json" || rc=1
      timeout 70 $B/engine bench ops --min-time 50 --json "$OUT/ops.json" || rc=1
      timeout 80 "$py" tools/bench_torch.py "$model" --engine "$OUT/bench.json" --json "$OUT/torch.json" || rc=1
      timeout 30 "$py" tools/plot_bench.py --bench "$OUT/bench.json" --torch "$OUT/torch.json" --ops "$OUT/ops.json" \
        --combined "$OUT/bench.png" || echo "plots not drawn here: run tools/plot_bench.py on the JSON files"
      return $rc
    }
    bench_all 2>&1 | tee "$OUT/bench.log" || status=1
    ;;
  *) echo "unknown step $s"; exit 2 ;;
  esac
done
exit $status
