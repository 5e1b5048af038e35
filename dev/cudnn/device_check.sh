#!/usr/bin/env bash
# One call on the GPU machine: build the engine and gpu_tests from this tree (Ninja, sm_90) into
# ../../build-ccudnn (outside the carried tree, kept while the machine stays warm), run the cudnn GPU
# tests (the changed paths first), run cifar-vgg at 65,536 images (past cuDNN's tensor limit), time
# mlp-512-256 at 1,024 with and without --nondeterministic (split-K allowed or not), and bench the
# cudnn backend at every precision on two zoo models. Results under $OUT.
#   usage (from this tree's root, as carried under .devrun/): bash dev/cudnn/device_check.sh
#   knobs: FIRST, REST (gtest filters), MODELS, BATCHES
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
B=../../build-ccudnn
E=$B/engine
bench() { timeout 15 $E -q bench "$@" --backend cudnn --cuda-graph --no-data-transfers --duration 0.1 --repetitions 2 \
            > /tmp/bench.txt 2>&1; echo "rc $?"; grep -iE "error|precision: " /tmp/bench.txt | head -3
          sed -n '/== summary/,/^notes/p' /tmp/bench.txt | grep -E "^  cudnn"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== configure + build ($(date +%T))"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DENGINE_TEST_DATA_DIR=$PWD/../../data > $OUT/configure.txt 2>&1 || { tail -30 $OUT/configure.txt; exit 1; }
cmake --build $B -j16 --target engine gpu_tests > $OUT/build.txt 2>&1 || { grep -B2 -A8 "error" $OUT/build.txt | head -60; exit 1; }
echo "== tests, changed paths ($(date +%T))"
FIRST=${FIRST:-CudnnChunks.*:CudnnPrecisionChoice.*:CudnnConv2d.*:CudnnDense.SameBits*:CudnnInt8.SameBits*:CudnnInt8.Refusals:CudnnInt8.Tactics*:CudnnLayout.*:CudnnPlan.*}
timeout 40 $B/tests/gpu/gpu_tests --gtest_filter="$FIRST" --gtest_brief=1 > $OUT/tests1.txt 2>&1
echo "gpu_tests rc $?"; grep -vE "^\[ measured|^$" $OUT/tests1.txt | tail -25
grep -E "precision: |measured\] cudnn int8 \(fastest" $OUT/tests1.txt | head -4
[ -d /tmp/zoo ] || tar xJf ../zoo.tar.xz -C /tmp
echo "== cifar-vgg at 65,536 images ($(date +%T))"
for p in fp32 fp16; do bench /tmp/zoo/cifar-vgg/model.json --precision $p --batch 65536; done
echo "== cudnn by precision ($(date +%T))"
for m in ${MODELS:-mlp-512-256 keras-cnn}; do
  timeout 15 $E -q calibrate /tmp/zoo/$m/model.json ../../data/mnist/train-images-idx3-ubyte.gz -o /tmp/$m-cal.json \
    --images 1000 2>&1 | tail -2
  for p in fp32 fp16 int8; do echo "-- $m $p"; bench /tmp/$m-cal.json --precision $p --batch ${BATCHES:-1024,65536}; done
done
echo "== mlp-512-256 fp32 at 1,024, then --nondeterministic ($(date +%T))"
bench /tmp/zoo/mlp-512-256/model.json --batch 1024
bench /tmp/zoo/mlp-512-256/model.json --batch 1024 --nondeterministic
echo "== tests, the rest ($(date +%T))"
timeout 40 $B/tests/gpu/gpu_tests --gtest_filter="${REST:-Cudnn*}:-$FIRST:CudnnTrain*" --gtest_brief=1 > $OUT/tests2.txt 2>&1
echo "gpu_tests rc $?"; grep -vE "^\[ measured|^$" $OUT/tests2.txt | tail -25
echo "== done ($(date +%T))"
