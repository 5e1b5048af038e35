#!/usr/bin/env bash
# On the GPU machine, from a copy of the worktree two levels below the checkout root (.devrun/NAME):
# build the engine and the GPU tests into ../../build-g16, run the tensor-core general path's tests
# (and the per-node path's, the precision choice's), measure fp32 / fp16 at batch 65,536 (engine
# bench, CUDA graph, compute only; a per-layer profile of mlp-512-256), check the zoo's MLPs on the
# MNIST test set (fp16 against fp32: same class), and bench_zoo against PyTorch for MODELS.
# PARTS picks the steps (default: all of "tests others bench accuracy zoo"; the build always runs).
# "convs": the conv zoo models (CONV_MODELS) at fp16, 1,024 and 65,536 images, and fp16 against fp32
# on MNIST. CONVS_ON=1 flips TcGeneralOptions::convolutions' default in this copy of the tree before
# the build (an A/B measurement: the product keeps its default; "others" then expects the old one).
# Logs go to $OUT/results.tgz; the key lines to stdout. Every step has its own time limit.
set -u
ROOT=$(pwd)
B=${BUILD:-$ROOT/../../build-g16}
OUT=${OUT:-/tmp/out}
L=$OUT/logs
mkdir -p "$L"
MNIST=$ROOT/../../data/mnist
MODELS=${MODELS:-mlp-128,mlp-512-256}
CONV_MODELS=${CONV_MODELS:-keras-cnn,vgg-mnist,conv-bn-relu,cifar-vgg,concat-branches,resnet20}
PARTS=" ${PARTS:-tests others bench accuracy zoo} "
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
finish() { tar czf "$OUT/results.tgz" -C "$OUT" logs; }
trap finish EXIT
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[[ -d /tmp/zoo ]] || tar xJf ../zoo.tar.xz -C /tmp
if [[ ${CONVS_ON:-0} == 1 ]]; then
  sed -i 's/bool convolutions = false;/bool convolutions = true;/' engine/custom/custom_options.hpp
  grep -q 'bool convolutions = true;' engine/custom/custom_options.hpp || { echo "CONVS_ON: the default not found"; exit 1; }
fi
timeout 110 bash -c "cmake -S . -B '$B' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DENGINE_TEST_DATA_DIR='$ROOT/../../data' && cmake --build '$B' -j16 --target engine gpu_tests" >"$L/build.log" 2>&1 ||
  { grep -E "error|FAILED" -A5 "$L/build.log" | head -60; tail -5 "$L/build.log"; exit 1; }
echo "build: done at $((SECONDS - T0)) s"
E=$B/engine
run_tests() {  # $1: limit in s, $2: filter, $3: log name
  local t=$SECONDS
  timeout "$1" "$B/tests/gpu/gpu_tests" --gtest_filter="$2" >"$L/$3.log" 2>&1
  echo "tests $3 rc $? in $((SECONDS - t)) s"
  grep -E "^\[  (FAILED|PASSED) |Failure|Expected|Which is|worst|\[ measured \]" "$L/$3.log" | cut -c1-300 | head -40
}
[[ $PARTS == *" tests "* ]] && run_tests 90 'CustomTcGeneral.*' general
[[ $PARTS == *" others "* ]] && run_tests 30 'CustomTcPerNode.PlanAndRefusals:CustomTcPerNode.SameBits*:CustomTcPerNode.SeedModelsOnMnist:CustomPrecisionChoice.*:CustomTcChain.Refusals' others
bench() {  # $1 model, $2 precision
  timeout 40 "$E" bench "/tmp/zoo/$1/model.json" --backend custom --precision "$2" --batch 1024,65536 --cuda-graph \
    --no-data-transfers --warmup 20 --duration 0.2 --repetitions 1 >"$L/bench-$1-$2.txt" 2>&1
  echo "$1 $2: $(grep -E '^  custom +(1024|65536)' "$L/bench-$1-$2.txt" | awk '{printf "%s %s %s; ", $2, $5, $6}') | $(grep -m1 -E 'tensor-core|per-node|general|fused' "$L/bench-$1-$2.txt" | cut -c1-220)"
}
if [[ $PARTS == *" bench "* ]]; then
t=$SECONDS
for m in mlp-128 mlp-512-256; do for p in ${BENCH_PRECISIONS:-fp32 fp16}; do bench $m $p; done; done
[[ -z ${BENCH_PRECISIONS:-} ]] && bench lenet5-relu-pad2 fp16
echo "benches: $((SECONDS - t)) s"
timeout 15 "$E" bench /tmp/zoo/mlp-512-256/model.json --backend custom --precision fp16 --batch 65536 --cuda-graph \
  --no-data-transfers --warmup 20 --duration 0.2 --repetitions 1 --profile >"$L/profile-mlp-512-256-fp16.txt" 2>&1
grep -A8 "per-layer profile" "$L/profile-mlp-512-256-fp16.txt" | head -10
fi
if [[ $PARTS == *" convs "* ]]; then
  t=$SECONDS
  for m in ${CONV_MODELS//,/ }; do bench "$m" fp16; done
  echo "conv benches: $((SECONDS - t)) s"
fi
# Accuracy on the MNIST test set: fp16 (as asked) against fp32, same class.
ACC_MODELS="mlp-128 mlp-512-256"
[[ $PARTS == *" convs "* ]] && ACC_MODELS="${CONV_MODELS//,/ }"
ACC_MODELS=${ACC_MODELS//cifar-vgg/}; ACC_MODELS=${ACC_MODELS//resnet20/}
[[ $PARTS == *" accuracy "* || $PARTS == *" convs "* ]] && for m in $ACC_MODELS; do
  timeout 15 "$E" -v run /tmp/zoo/$m/model.json "$MNIST/t10k-images-idx3-ubyte.gz" --backend custom --precision fp16 \
    --batch 10000 --dump-outputs /tmp/fp16.npy >"$L/run-$m-fp16.txt" 2>&1
  grep -m1 -o 'precision: .*' "$L/run-$m-fp16.txt" | cut -c1-260
  grep -A12 'path: tensor-core general' "$L/run-$m-fp16.txt" | cut -c1-300
  timeout 15 "$E" run /tmp/zoo/$m/model.json "$MNIST/t10k-images-idx3-ubyte.gz" --backend custom --batch 10000 \
    --dump-outputs /tmp/fp32.npy >"$L/run-$m-fp32.txt" 2>&1
  python3 -c "
import numpy as np; a=np.load('/tmp/fp16.npy'); b=np.load('/tmp/fp32.npy')
print('$m fp16 vs fp32: same class on', int((a.argmax(1)==b.argmax(1)).sum()), 'of', len(a), '; max |dp|', float(abs(a-b).max()))"
done
[[ $PARTS == *" zoo "* ]] || { echo "total $((SECONDS - T0)) s"; exit 0; }
t=$SECONDS
timeout 70 python3 benchmarks/bench_zoo.py --zoo /tmp/zoo --engine "$E" --out "$L/zoo" --mnist "$MNIST" \
  --models "$MODELS" --batch 65536 --precisions fp32,fp16 >"$L/zoo.log" 2>&1
echo "zoo rc $? in $((SECONDS - t)) s"
cat "$L/zoo/zoo-gpu.md" 2>/dev/null | head -30 || tail -20 "$L/zoo.log"
echo "total $((SECONDS - T0)) s"
