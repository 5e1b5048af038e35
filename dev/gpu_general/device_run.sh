#!/usr/bin/env bash
# On the GPU machine, from a copy of the worktree: build the engine and the GPU tests, run the
# custom backend's tests (general path first), then engine bench of the general path against
# PyTorch (CUDA graphs, fp32, TF32 off) and the class agreement with the --no-fuse oracle on the
# MNIST test set. PARTS="build tests bench accuracy" picks parts; MODELS the model files.
set -u
ROOT=$(pwd)
B=${BUILD:-$ROOT/../../build-gpu}
OUT=${OUT:-/tmp/out}
PARTS=" ${PARTS:-build tests bench accuracy} "
MODELS=${MODELS:-zoo/keras-cnn/model.json zoo/vgg-mnist/model.json zoo/conv-bn-relu/model.json zoo/concat-branches/model.json}
MNIST=$ROOT/../../data/mnist/t10k-images-idx3-ubyte.gz
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [[ $PARTS == *" build "* ]]; then
  t0=$SECONDS
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DENGINE_TEST_DATA_DIR="$ROOT/../../data" >"$OUT/build.log" 2>&1 &&
    cmake --build "$B" -j16 --target engine gpu_tests >>"$OUT/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A5 "$OUT/build.log" | head -60; exit 1; }
  echo "build: $((SECONDS - t0)) s"
fi
if [[ $PARTS == *" tests "* ]]; then
  timeout 170 "$B/tests/gpu/gpu_tests" --gtest_filter="${FILTER:-CustomGeneral*:Custom*:GraphReplay*:-CustomTc*}" \
    >"$OUT/tests.log" 2>&1
  echo "tests rc $?"; grep -E "^\[  (FAILED|PASSED|  OK) |Failure|Expected|Which is|worst" "$OUT/tests.log" | head -60
fi
if [[ $PARTS == *" bench "* ]]; then
  for m in $MODELS; do
    n=$(basename "$(dirname "$m")")
    { echo "== $m"; "$B/engine" info "$m"; } >>"$OUT/info.txt" 2>&1
    timeout 120 "$B/engine" bench "$m" --backend custom --batch ${BATCHES:-1,1024,65536} --cuda-graph --duration ${DURATION:-0.3} \
      --repetitions ${REPS:-3} --json "/tmp/bench-$n.json" 2>&1 | tail -12
    timeout 150 python3 benchmarks/bench_torch.py "$m" --engine "/tmp/bench-$n.json" --modes graph \
      --json "$OUT/torch-$n.json" 2>&1 | tail -14
  done
fi
if [[ $PARTS == *" accuracy "* ]]; then
  for m in $MODELS; do
    timeout 60 "$B/engine" run "$m" "$MNIST" --backend custom --batch 10000 --dump-outputs /tmp/general.npy | tail -2
    timeout 60 "$B/engine" run "$m" "$MNIST" --backend custom --no-fuse --batch 10000 --dump-outputs /tmp/oracle.npy | tail -1
    python3 -c "
import numpy as np; a=np.load('/tmp/general.npy'); b=np.load('/tmp/oracle.npy')
print('$m: same class on', int((a.argmax(1)==b.argmax(1)).sum()), 'of', len(a), '; max |diff|', float(abs(a-b).max()))"
  done
fi
