#!/usr/bin/env bash
# On the GPU machine, from a copy of the worktree two levels below the checkout root (.devrun/NAME):
# build the engine, the GPU tests and general_ab into ../../build-cgpu, run the general path's tests,
# the fused-vs-general A/B (general_ab.cpp), the zoo benchmark against PyTorch and the class agreement
# with the --no-fuse oracle on the MNIST test set. PARTS picks parts ("build tests ab zoo accuracy"),
# MODELS the zoo models, BATCHES the batches; results go to $OUT.
set -u
ROOT=$(pwd)
B=${BUILD:-$ROOT/../../build-cgpu}
OUT=${OUT:-/tmp/out}
PARTS=" ${PARTS:-build tests ab} "
MODELS=${MODELS:-keras-cnn,vgg-mnist,conv-bn-relu,concat-branches,cifar-vgg,resnet20,mlp-512-256,mlp-128}
BATCHES=${BATCHES:-1,1024,65536}
MNIST=$ROOT/../../data/mnist/t10k-images-idx3-ubyte.gz
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[[ -d /tmp/zoo ]] || tar xJf ../zoo.tar.xz -C /tmp
if [[ $PARTS == *" build "* ]]; then
  t0=$SECONDS
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DENGINE_TEST_DATA_DIR="$ROOT/../../data" >"$OUT/build.log" 2>&1 &&
    cmake --build "$B" -j16 --target engine gpu_tests >>"$OUT/build.log" 2>&1 &&
    bash dev/gpu_general/build_ab.sh "$B" >>"$OUT/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A5 "$OUT/build.log" | head -60; exit 1; }
  echo "build: $((SECONDS - t0)) s"
fi
if [[ $PARTS == *" tests "* ]]; then
  t0=$SECONDS
  timeout "${TEST_LIMIT:-60}" "$B/tests/gpu/gpu_tests" \
    --gtest_filter="${FILTER:-CustomGeneral*:CustomFused.OtherGraphs*:CustomScaleShiftConcat*}" >"$OUT/tests.log" 2>&1
  echo "tests rc $? in $((SECONDS - t0)) s"
  grep -E "^\[  (FAILED|PASSED|  OK) |Failure|Expected|Which is|worst" "$OUT/tests.log" | head -60
fi
if [[ $PARTS == *" ab "* ]]; then
  files=$(tr ',' '\n' <<<"$MODELS" | sed 's|.*|/tmp/zoo/&/model.json|' | tr '\n' ' ')
  timeout "${AB_LIMIT:-90}" "$B/general_ab" "$BATCHES" $files >"$OUT/ab.txt" 2>&1
  echo "ab rc $?"; grep "images/s" "$OUT/ab.txt"
fi
if [[ $PARTS == *" zoo "* ]]; then  # one bench_zoo call per model: a timeout keeps the models done
  end=$((SECONDS + ${ZOO_LIMIT:-120}))
  for m in $(tr ',' ' ' <<<"$MODELS"); do
    left=$((end - SECONDS)); ((left > 5)) || break
    timeout "$left" python3 benchmarks/bench_zoo.py --zoo /tmp/zoo --engine "$B/engine" --out "$OUT/zoo-$m" \
      --mnist ../../data/mnist --models "$m" --batch "$BATCHES" --precisions fp32 >"$OUT/zoo-$m.log" 2>&1
    echo "zoo $m rc $?"; grep -E "^\| $m " "$OUT/zoo-$m/zoo-gpu.md" 2>/dev/null | cut -d'|' -f1-8
  done
fi
if [[ $PARTS == *" accuracy "* ]]; then  # same class as the --no-fuse oracle on the MNIST test set
  for m in ${ACC_MODELS:-keras-cnn vgg-mnist conv-bn-relu concat-branches mlp-512-256}; do
    f=/tmp/zoo/$m/model.json
    timeout 30 "$B/engine" run "$f" "$MNIST" --backend custom --batch 10000 --dump-outputs /tmp/general.npy >/dev/null 2>&1
    timeout 30 "$B/engine" run "$f" "$MNIST" --backend custom --no-fuse --batch 10000 --dump-outputs /tmp/oracle.npy \
      >/dev/null 2>&1
    python3 -c "
import numpy as np; a=np.load('/tmp/general.npy'); b=np.load('/tmp/oracle.npy')
print('$m: same class on', int((a.argmax(1)==b.argmax(1)).sum()), 'of', len(a), '; max |diff|', float(abs(a-b).max()))"
  done
fi
