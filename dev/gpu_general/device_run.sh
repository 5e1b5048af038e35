#!/usr/bin/env bash
# On the GPU machine, from a copy of the worktree two levels below the checkout root (.devrun/NAME):
# build the engine, the GPU tests and general_ab into $BUILD, then the parts named in PARTS:
#   tests     the general path's and the custom backend's GPU tests (FILTER)
#   bench     engine bench per model (MODELS) and batch (BATCHES), CUDA graph, no transfers; with
#             PROFILE=1 a per-layer table at the largest batch
#   ab        general_ab over VARIANTS (general_ab.cpp) at AB_BATCHES (log ab$AB_TAG.txt)
#   ncu       Nsight Compute per NCU_SPECS entry MODEL:BATCH:SKIP:COUNT (launches skipped, profiled)
#   zoo       bench_zoo against PyTorch, one call per model
#   accuracy  same class as the --no-fuse oracle on the MNIST test set (ACC_MODELS)
# Logs go to $OUT/log/, packed into $OUT/results.tgz at the end; key lines go to stdout.
set -u
ROOT=$(pwd)
B=${BUILD:-$ROOT/../../build-ggen}
OUT=${OUT:-/tmp/out}
L=$OUT/log
mkdir -p "$L"
PARTS=" ${PARTS:-build tests bench} "
MODELS=${MODELS:-keras-cnn,mlp-512-256}
BATCHES=${BATCHES:-1,1024,65536}
MNIST=$ROOT/../../data/mnist/t10k-images-idx3-ubyte.gz
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
pack() { tar czf "$OUT/results.tgz" -C "$OUT" log; }
trap pack EXIT
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[[ -d /tmp/zoo ]] || tar xJf ../zoo.tar.xz -C /tmp
if [[ $PARTS == *" build "* ]]; then
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DENGINE_TEST_DATA_DIR="$ROOT/../../data" >"$L/build.log" 2>&1 &&
    timeout 150 cmake --build "$B" -j16 --target engine gpu_tests >>"$L/build.log" 2>&1 &&
    bash dev/gpu_general/build_ab.sh "$B" >>"$L/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A5 "$L/build.log" | head -60; exit 1; }
  echo "build: done at $((SECONDS - T0)) s"
fi
if [[ $PARTS == *" tests "* ]]; then
  timeout "${TEST_LIMIT:-60}" "$B/tests/gpu/gpu_tests" --gtest_brief=1 \
    --gtest_filter="${FILTER:-CustomGeneral*:CustomFused*:CustomBackend*:CustomScaleShiftConcat*}" >"$L/tests.log" 2>&1
  echo "tests rc $? at $((SECONDS - T0)) s"
  grep -E "^\[  (FAILED|PASSED) |Failure|Expected|Which is|worst|tests ran" "$L/tests.log" | head -40
fi
E="$B/engine"
if [[ $PARTS == *" bench "* ]]; then
  for m in $(tr ',' ' ' <<<"$MODELS"); do
    timeout 40 "$E" bench /tmp/zoo/$m/model.json --backend custom --batch "$BATCHES" --cuda-graph --no-data-transfers \
      --warmup 100 --duration 0.3 --repetitions 1 >"$L/bench-$m.txt" 2>&1
    echo "bench $m rc $? at $((SECONDS - T0)) s"; grep -E "^  custom " "$L/bench-$m.txt"
    if [[ ${PROFILE:-0} == 1 ]]; then
      big=${BATCHES##*,}
      timeout 40 "$E" bench /tmp/zoo/$m/model.json --backend custom --batch "$big" --no-data-transfers --warmup 100 \
        --duration 0.3 --repetitions 1 --profile >"$L/prof-$m-$big.txt" 2>&1
      grep -E "conv2d|dense " "$L/prof-$m-$big.txt" | head -12
    fi
  done
fi
if [[ $PARTS == *" ab "* ]]; then
  files=$(tr ',' '\n' <<<"${AB_MODELS:-$MODELS}" | sed 's|.*|/tmp/zoo/&/model.json|' | tr '\n' ' ')
  timeout "${AB_LIMIT:-60}" "$B/general_ab" "${AB_BATCHES:-1,1024}" "${VARIANTS:-general,general/s16}" $files \
    >"$L/ab${AB_TAG:-}.txt" 2>&1
  echo "ab rc $? at $((SECONDS - T0)) s"; grep "images/s" "$L/ab${AB_TAG:-}.txt"
fi
if [[ $PARTS == *" ncu "* ]]; then  # NCU_SPECS: MODEL:BATCH:SKIP:COUNT, comma-separated
  for spec in $(tr ',' ' ' <<<"${NCU_SPECS:-mlp-512-256:65536:20:3}"); do
    IFS=: read -r m b skip count <<<"$spec"
    timeout "${NCU_LIMIT:-60}" ncu --launch-skip "$skip" --launch-count "$count" --section SpeedOfLight \
      --section Occupancy --section LaunchStats "$E" bench /tmp/zoo/$m/model.json --backend custom --batch "$b" \
      --no-data-transfers --warmup 0 --iterations 2 --duration 0 --repetitions 1 >"$L/ncu-$m-$b.txt" 2>&1
    echo "ncu $m $b rc $? at $((SECONDS - T0)) s"
    grep -E "^  [a-z_:]+.*\(|Duration|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Block Limit (Reg|Shared)" \
      "$L/ncu-$m-$b.txt" | sed -E 's/^  (void )?([^(]*)\(.*\) (\([0-9, ]+\)x\([0-9, ]+\)).*/  \2 \3/' | head -48
  done
fi
if [[ $PARTS == *" zoo "* ]]; then  # one bench_zoo call per model: a timeout keeps the models done
  end=$((SECONDS + ${ZOO_LIMIT:-120}))
  for m in $(tr ',' ' ' <<<"${ZOO_MODELS:-$MODELS}"); do
    left=$((end - SECONDS)); ((left > 5)) || break
    timeout "$left" python3 benchmarks/bench_zoo.py --zoo /tmp/zoo --engine "$E" --out "$L/zoo-$m" \
      --mnist ../../data/mnist --models "$m" --batch "$BATCHES" --precisions fp32 >"$L/zoo-$m.log" 2>&1
    echo "zoo $m rc $? at $((SECONDS - T0)) s"; grep -E "^\| $m " "$L/zoo-$m/zoo-gpu.md" 2>/dev/null | cut -d'|' -f1-8
  done
fi
if [[ $PARTS == *" accuracy "* ]]; then  # same class as the --no-fuse oracle on the MNIST test set
  for m in ${ACC_MODELS:-keras-cnn mlp-512-256}; do
    f=/tmp/zoo/$m/model.json
    timeout 30 "$E" run "$f" "$MNIST" --backend custom --batch 10000 --dump-outputs /tmp/general.npy >/dev/null 2>&1
    timeout 30 "$E" run "$f" "$MNIST" --backend custom --no-fuse --batch 10000 --dump-outputs /tmp/oracle.npy \
      >/dev/null 2>&1
    python3 -c "
import numpy as np; a=np.load('/tmp/general.npy'); b=np.load('/tmp/oracle.npy')
print('$m: same class on', int((a.argmax(1)==b.argmax(1)).sum()), 'of', len(a), '; max |diff|', float(abs(a-b).max()))"
  done
fi
echo "total $((SECONDS - T0)) s"
