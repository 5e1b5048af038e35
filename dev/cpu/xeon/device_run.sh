#!/usr/bin/env bash
# The cpu backend against ONNX Runtime on the GPU machine's host cores (no GPU use): builds only the
# cpu libraries and dev/cpu/zoo_time.cpp, then times the engine and ONNX Runtime (1 and 16 threads).
# Run from the tree's root on the device machine, with .devrun/zoo4.tar.xz two levels up:
#   cd .devrun/c32 && bash dev/cpu/xeon/device_run.sh [TAG]
# MODE=schedules (default): tiles and images at one thread, Auto at 16 (where the schedules win).
# MODE=chunks: applies tap_chunks.patch (the single-image channel conv's taps in chunks that fit L1,
# CpuOptions::conv_chunk_bytes; slower on Zen 4, not yet measured on the Xeon) and times Auto with
# the chunk sizes in CHUNKS (-1: none, 0: half of L1d), 1 and 16 threads.
# Output: $OUT/results.tgz, key lines on stdout.
set -uo pipefail
T0=$(date +%s)
TAG=${1:-now}
B=../../build-c32-$TAG; R=/tmp/res-$TAG; mkdir -p $R
[ -d /tmp/zoo/cifar-vgg ] || tar xJf ../zoo4.tar.xz -C /tmp
[ "${MODE:-schedules}" = chunks ] && { git apply dev/cpu/xeon/tap_chunks.patch || exit 1; }
MODELS=${MODELS:-cifar-vgg,resnet20,vgg-mnist,conv-bn-relu,keras-cnn,concat-branches,mlp-128}
timeout 60 cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >$R/configure.log 2>&1 || { tail -20 $R/configure.log; exit 1; }
timeout 120 cmake --build $B -j 16 --target engine_backend_cpu engine_core formats >$R/build.log 2>&1 || { grep -E "error" -A3 $R/build.log | head -40; exit 1; }
ZOO_TIME_OUT=$R/zoo_time timeout 60 dev/cpu/build_zoo_time.sh $B >>$R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
echo "built after $(( $(date +%s) - T0 )) s"
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|L1d|L2|L3|MHz|Flags" | cut -c1-300 > $R/lscpu.txt; cat $R/lscpu.txt; uptime
if [ "${MODE:-schedules}" = schedules ]; then
  timeout ${T1:-60} $R/zoo_time /tmp/zoo $MODELS 1 1,64,1024 tiles,images 2 0.1 | tee $R/engine1.txt
  timeout ${T16:-40} $R/zoo_time /tmp/zoo $MODELS 16 1,64,1024 auto 3 0.1 | tee $R/engine16.txt
else
  CONV=${CONV:-cifar-vgg,resnet20,vgg-mnist,conv-bn-relu,concat-branches}
  timeout ${T1:-60} $R/zoo_time /tmp/zoo $CONV 1 1,64,1024 auto 2 0.1 best ${CHUNKS:--1,0} | tee $R/engine1.txt
  timeout 20 $R/zoo_time /tmp/zoo keras-cnn,mlp-128 1 1,64,1024 auto 2 0.1 best 0 | tee -a $R/engine1.txt
  timeout ${T16:-40} $R/zoo_time /tmp/zoo $MODELS 16 64,1024 auto 3 0.1 best -1,0 | tee $R/engine16.txt
fi
timeout ${TO:-60} python3 dev/cpu/ort_wall.py /tmp/zoo $MODELS 1,16 1,64,1024 2 0.1 | tee $R/ort.txt
timeout 15 $R/zoo_time /tmp/zoo resnet20,keras-cnn 1 1,64 tiles,images 2 0.1 | tee $R/engine_sched.txt
uptime
tar czf $OUT/results.tgz -C /tmp res-$TAG
echo "total $(( $(date +%s) - T0 )) s"
