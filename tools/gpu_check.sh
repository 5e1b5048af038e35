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
    $B/engine bench models/lenet5.json --backend all --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt" || status=1
    ;;
  *) echo "unknown step $s"; exit 2 ;;
  esac
done
exit $status
