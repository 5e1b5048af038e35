#!/usr/bin/env bash
# One call on the GPU machine for the cudnn backend's work: the cudnn GPU tests, the options A/B
# (dev/cudnn/options_ab.cpp), the default-backend choice, engine bench against PyTorch (compute
# scope, CUDA graphs) on LeNet-5, seed002-cnn, seed003-mlp (and the zoo's models when zoo/ is there)
# at fp32 / fp16 / int8, and a per-layer profile of LeNet-5 in int8 and fp32. Binaries come prebuilt
# in bin.tar.xz (engine, gpu_tests, options_ab and the host libraries they link), made by
# dev/cudnn/pack.sh; results go to $OUT.
#   usage (repository root of this tree): bash dev/cudnn/device_run.sh [tests] [ab] [choice] [bench] [profile]
#   knobs: TESTS (gtest filter), MODELS, BACKENDS, PRECISIONS, BATCHES, DURATION, REPS, TORCH_MODELS, AB_MODELS
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
steps=("$@"); ((${#steps[@]})) || steps=(tests ab choice bench profile)
log=$OUT/log.txt
exec > >(tee -a "$log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
B=/tmp/cudnn-bin; mkdir -p $B && tar xJf bin.tar.xz -C $B
libdirs=$B/lib
for d in $(python3 -c "import nvidia,os;print(' '.join(nvidia.__path__))" 2>/dev/null); do
  libdirs+=":$(find "$d" -name 'libcudnn*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')"
done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}:$libdirs
ldd $B/engine | grep "not found"
# the paths compiled into the test binary
mkdir -p /work/wt /work/shared && ln -sfn "$PWD" /work/wt/cudnn && ln -sfn "$PWD/data" /work/shared/data
export PYTHONPATH=$PWD/python:$PWD/benchmarks
E=$B/engine; M=/tmp/models; R=/tmp/results; mkdir -p $M $R
# name -> graph file; each calibrated (int8 needs it) into $M/NAME.json
declare -A src=([lenet5]=models/lenet5.json [seed002-cnn]=models/seed002-cnn.json [seed003-mlp]=models/seed003-mlp.json)
if [ -d zoo ]; then for d in zoo/*/; do [ -f $d/model.json ] && src[zoo-$(basename $d)]=$d/model.json; done; fi
models=${MODELS:-${!src[*]}}
for m in $models; do $E -q calibrate ${src[$m]} data/mnist/train-images-idx3-ubyte.gz -o $M/$m.json --images 500 || echo "calibrate $m failed"; done
for s in "${steps[@]}"; do
  echo "== $s ($(date +%T))"
  case $s in
  tests) timeout 70 $B/gpu_tests --gtest_filter="${TESTS:-Cudnn*}" --gtest_brief=1 2>&1 | tail -60 ;;
  choice)
    TIMEFORMAT="%R s wall"
    export XDG_CACHE_HOME=/tmp/xdg
    for m in ${CHOICE_MODELS:-seed003-mlp lenet5}; do
      { time $E run models/$m.json data/mnist/t10k-images-idx3-ubyte.gz 2>&1 | grep -E "backend|accuracy|error|planned"; } 2>&1; done
    { time $E run models/seed003-mlp.json data/mnist/t10k-images-idx3-ubyte.gz 2>&1 | grep -E "backend|planned"; } 2>&1
    cat /tmp/xdg/cnn-engine/backend-choice.tsv ;;
  bench)
    for m in $models; do n=$m
      for p in ${PRECISIONS:-fp32 fp16 int8}; do
        timeout 60 $E bench $M/$m.json --backend ${BACKENDS:-cudnn,custom} --precision $p --batch ${BATCHES:-1024,65536} --cuda-graph \
          --no-data-transfers --duration ${DURATION:-0.1} --repetitions ${REPS:-2} --json $R/e-$n-$p.json 2>&1 | grep -vE "^\s*$|info:"; done
      [[ " ${TORCH_MODELS:-$models} " == *" $m "* ]] && timeout 60 python3 benchmarks/bench_torch.py ${src[$m]} --engine $R/e-$n-fp32.json --json $R/t-$n.json 2>&1 | tail -14
      tar czf $OUT/results.tar.gz -C $R .
    done ;;
  ab) for m in ${AB_MODELS:-seed003-mlp lenet5}; do timeout ${AB_TIMEOUT:-40} $B/options_ab $M/$m.json 65536 | cut -c1-400; done ;;
  profile)
    $E bench $M/lenet5.json --backend cudnn --precision int8 --batch 65536 --profile --profile-batch 65536 --duration 0.1 --repetitions 1 2>&1 | tail -30
    $E bench $M/lenet5.json --backend cudnn --precision fp32 --batch 65536 --profile --profile-batch 65536 --duration 0.1 --repetitions 1 2>&1 | tail -20 ;;
  esac
done
tar czf $OUT/results.tar.gz -C $R .
