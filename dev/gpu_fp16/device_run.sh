#!/usr/bin/env bash
# On the GPU machine, from a copy of the worktree two levels below the checkout root (.devrun/NAME):
# build the engine and the GPU tests into ../../build-gfp16, run the tensor-core chain's and the
# precision choice's tests, then measure fp32 / fp16 / int8 at batch 65,536 (engine bench, CUDA graph,
# compute only) on the zoo's LeNet-5s, the MLPs and models/lenet5.json, the plan lines of the
# precision choice (engine -v run), and custom fp16 against PyTorch fp16 (bench_zoo). Logs go to
# $OUT/results.tgz; the key lines to stdout. Every step has its own time limit.
set -u
ROOT=$(pwd)
B=${BUILD:-$ROOT/../../build-gfp16}
OUT=${OUT:-/tmp/out}
L=$OUT/logs
mkdir -p "$L" /tmp/cal
MNIST=$ROOT/../../data/mnist
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
finish() { tar czf "$OUT/results.tgz" -C "$OUT" logs; }
trap finish EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[[ -d /tmp/zoo ]] || tar xJf ../zoo.tar.xz -C /tmp
t0=$SECONDS
timeout 120 bash -c "cmake -S . -B '$B' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DENGINE_TEST_DATA_DIR='$ROOT/../../data' && cmake --build '$B' -j16 --target engine gpu_tests" >"$L/build.log" 2>&1 ||
  { grep -E "error|FAILED" -A5 "$L/build.log" | head -60; exit 1; }
echo "build: $((SECONDS - t0)) s"
E=$B/engine
run_tests() {  # $1: limit in s, $2: filter, $3: log name
  local t=$SECONDS
  timeout "$1" "$B/tests/gpu/gpu_tests" --gtest_filter="$2" >"$L/$3.log" 2>&1
  echo "tests $3 rc $? in $((SECONDS - t)) s"
  grep -E "^\[  (FAILED|PASSED) |^\[       OK|Failure|Expected|Which is|worst|\[ measured \]" "$L/$3.log" | cut -c1-400 | head -40
}
run_tests 40 'CustomTcChain.PaddedInput*:CustomPrecisionChoice.*:CudnnPrecisionChoice.*:CustomTcChain.Refusals' new
run_tests 35 'CustomTcChain.MatchesReferenceEmulation:CustomTcChain.SameBits*:CustomTcChain.Int8*:CustomTcChain.Lenet5*:CustomTcPerNode*:CudnnInt8.Lenet5OnMnist' old
for m in lenet5-tanh-avgpool lenet5-relu-pad2 mlp-128; do
  timeout 20 "$E" -q calibrate /tmp/zoo/$m/model.json "$MNIST/train-images-idx3-ubyte.gz" -o /tmp/cal/$m.json \
    --images 1000 >>"$L/calibrate.log" 2>&1 || echo "calibrate $m failed"
done
bench() {  # $1 model file, $2 precision, $3 name
  timeout 25 "$E" bench "$1" --backend custom --precision "$2" --batch 65536 --cuda-graph --no-data-transfers \
    --warmup 20 --duration 0.3 --repetitions 1 >"$L/bench-$3-$2.txt" 2>&1
  echo "$3 $2: $(grep -E '^  custom +65536' "$L/bench-$3-$2.txt" | awk '{print $5, $6}') | $(grep 'batch 65536: ' "$L/bench-$3-$2.txt" | grep -v 'compiling$\|compute only$' | head -1 | cut -c1-160)"
}
t=$SECONDS
for m in lenet5-tanh-avgpool lenet5-relu-pad2 mlp-128 mlp-512-256; do
  f=/tmp/zoo/$m/model.json
  bench "$f" fp32 "$m"; bench "$f" fp16 "$m"
  [[ -f /tmp/cal/$m.json ]] && bench /tmp/cal/$m.json int8 "$m"
done
bench models/lenet5.json fp16 lenet5-json
echo "benches: $((SECONDS - t)) s"
for m in lenet5-tanh-avgpool lenet5-relu-pad2; do
  for p in int8 fp16; do
    timeout 15 "$E" -v run /tmp/cal/$m.json "$MNIST/t10k-images-idx3-ubyte.gz" --backend custom --precision $p \
      --batch 65536 >"$L/run-$m-$p.txt" 2>&1
    echo "$m $p: $(grep -m1 -o 'precision: .*' "$L/run-$m-$p.txt" | cut -c1-300)"
    grep -m1 -iE "accuracy|correct" "$L/run-$m-$p.txt"
  done
done
t=$SECONDS
timeout 60 python3 benchmarks/bench_zoo.py --zoo /tmp/zoo --engine "$E" --out "$L/zoo" --mnist "$MNIST" \
  --models lenet5-tanh-avgpool,lenet5-relu-pad2 --batch 65536 --precisions fp16 >"$L/zoo.log" 2>&1
echo "zoo rc $? in $((SECONDS - t)) s"
cat "$L/zoo/zoo-gpu.md" 2>/dev/null | head -30 || tail -20 "$L/zoo.log"
# Where the per-node tensor-core path spends its time on an MLP (per layer, fp16 as asked unless fp32
# is faster: the plan line in the log says which).
timeout 25 "$E" bench /tmp/zoo/mlp-512-256/model.json --backend custom --precision fp16 --batch 65536 --cuda-graph \
  --no-data-transfers --warmup 20 --duration 0.2 --repetitions 1 --profile >"$L/profile-mlp-512-256-fp16.txt" 2>&1
grep -A12 "per-layer profile" "$L/profile-mlp-512-256-fp16.txt" | head -14
