#!/usr/bin/env bash
# One call on a GPU machine: build, run every test (GPU ones included), compute-sanitizer on the GPU
# test binary, and `engine run` on MNIST t10k with each backend. Logs go to $OUT (or ./gpu-check).
# Expects the MNIST test set in data/mnist/ (copied there from ../shared/data, carried to the device).
#   usage: .ci/gpu_check.sh [build|test|sanitize|run|bench|perf|precision|tc|multi|train|train-multi|train-accuracy|train-recipes]...
#   (default: build test sanitize run)
# train needs the MNIST training set too: data/mnist/train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz;
# train-accuracy also Fashion-MNIST's, in data/fashion/ (from Debian's dataset-fashion-mnist).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check}; mkdir -p "$OUT"
B=${BUILD_DIR:-build-gpu}
DATA=$PWD/data/mnist
steps=("$@"); ((${#steps[@]})) || steps=(build test sanitize run)
export PYTHONUNBUFFERED=1
# The GPU machine's PyTorch Python (/opt/torch/.venv) has no cnnengine installed: the benchmarks take
# the package's pure-Python modules (model format, datasets) from the source tree.
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
status=0

for s in "${steps[@]}"; do
  echo "== $s ($(date +%T))"
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
    ctest --test-dir $B --output-on-failure -j 4 ${CTEST_ARGS:-} >"$OUT/ctest.log" 2>&1 || status=1
    grep -E "tests passed|tests failed|Failed|\*\*\*|Skipped" "$OUT/ctest.log" | tail -40
    ;;
  sanitize)
    # The filtered-out tests provoke CUDA API errors on purpose (bad launch shape, out of memory),
    # which memcheck would count.
    # racecheck looks for shared-memory hazards in our own kernels: it runs the custom backend's tests
    # and the backend-neutral ones (cuDNN's kernels are not ours, and instrumenting them is slow),
    # without the huge-batch tests: a race lives inside one block, whatever the grid, and racecheck's
    # cost grows with the number of blocks. initcheck over the whole suite is slow too:
    # SANITIZER_FILTER (a gtest filter) runs a part per call, e.g. 'Cudnn*' then 'Custom*:Gpu/*'.
    for tool in ${SANITIZER_TOOLS:-memcheck racecheck initcheck}; do
      filter="${SANITIZER_FILTER:-}-*InvalidLaunch*:*OutOfMemory*"
      [[ $tool == racecheck ]] && filter="${SANITIZER_FILTER:-Custom*:Gpu/*}-*InvalidLaunch*:*OutOfMemory*:*HugeBatch*"
      t0=$SECONDS
      ENGINE_SANITIZER_RUN=1 timeout ${SANITIZER_TIMEOUT:-280} compute-sanitizer --tool $tool --error-exitcode 9 \
        $B/tests/gpu/gpu_tests --gtest_brief=1 --gtest_filter="$filter" >"$OUT/sanitizer-$tool.log" 2>&1; rc=$?
      echo "compute-sanitizer $tool: rc=$rc ($((SECONDS - t0)) s); $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-$tool.log" | tail -1)"
      ((rc == 0)) || status=1
    done
    # The engine itself on real data, each GPU backend, under memcheck.
    for be in ${SANITIZER_ENGINE_BACKENDS-custom cudnn}; do
      timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/engine -q run models/lenet5.json \
        "$DATA/t10k-images-idx3-ubyte.gz" --backend $be --batch 333 --limit 2000 >"$OUT/sanitizer-engine-$be.log" 2>&1; rc=$?
      echo "compute-sanitizer memcheck engine run --backend $be: rc=$rc; $(grep -E "ERROR SUMMARY" "$OUT/sanitizer-engine-$be.log" | tail -1)"
      ((rc == 0)) || status=1
    done
    ;;
  run)
    # Every committed model on its test set, on every backend: accuracy and images/s (JSON), the
    # plan (-v: cuDNN's algorithm per layer), probabilities dumped and compared with the CPU backend's
    # (same class on every image, max |dp|), and custom/cudnn run twice to show bitwise repeatability.
    py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
    for pair in lenet5:mnist lenet5-fashion:fashion seed002-cnn:mnist seed003-mlp:mnist; do
      m=${pair%%:*} d=$PWD/data/${pair#*:}
      for be in reference cpu custom cudnn; do
        $B/engine -v run models/$m.json "$d/t10k-images-idx3-ubyte.gz" --labels "$d/t10k-labels-idx1-ubyte.gz" \
          --backend $be --batch 1024 --json --dump-outputs "$OUT/$m-$be.npy" >"$OUT/run-$m-$be.json" \
          2>"$OUT/run-$m-$be.log" || { status=1; tail -3 "$OUT/run-$m-$be.log"; }
        [[ $be == reference ]] || $B/engine -q run models/$m.json "$d/t10k-images-idx3-ubyte.gz" --backend $be --batch 1024 \
          --json --dump-outputs "$OUT/$m-$be-again.npy" >/dev/null 2>&1 || status=1
      done
      "$py" - "$OUT" "$m" <<'PY' || status=1
import json, sys
import numpy as np
out, m = sys.argv[1], sys.argv[2]
ref = np.load(f"{out}/{m}-reference.npy")
ok = True
for be in ("reference", "cpu", "custom", "cudnn"):
    r = json.load(open(f"{out}/run-{m}-{be}.json"))
    line = (f"{m:15s} {be:7s} accuracy {100 * r['accuracy']:.2f}% ({r['correct']}/{r['images']}), "
            f"{r['images_per_second']:,.0f} images/s, {r['device']}")
    if be != "reference":
        p = np.load(f"{out}/{m}-{be}.npy")
        again = np.load(f"{out}/{m}-{be}-again.npy")
        same = int((p.argmax(1) == ref.argmax(1)).sum())
        dp = float(np.abs(p.astype(np.float64) - ref).max())
        bitwise = p.tobytes() == again.tobytes()
        line += f"; vs reference: same class {same}/{len(ref)}, max |dp| {dp:.2e}; two runs bitwise equal: {bitwise}"
        ok &= same == len(ref) and dp <= 1e-5 and bitwise
    print(line)
sys.exit(0 if ok else 1)
PY
    done
    grep -h "plan: \|^node\|cudnn:" "$OUT/run-lenet5-cudnn.log" | head -20
    rm -f "$OUT"/*.npy
    ;;
  bench)
    # engine bench (every backend and batch, plain and CUDA-graph, per-layer profile), engine bench
    # ops, PyTorch side by side on the same GPU, every panel in one PNG: 5 files in $OUT (bench.json,
    # ops.json, torch.json, bench.png, bench.log), at most about 6 minutes (each part has a timeout).
    # BENCH_MODEL picks another model, BENCH_DURATION the seconds per repetition (default 0.5); plots
    # are redrawn from the JSON files with benchmarks/plot_bench.py (docs/performance.md).
    bench_all() {
      local rc=0 model=${BENCH_MODEL:-models/lenet5.json}
      local py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
      timeout 180 $B/engine bench "$model" --backend all --batch 1,64,1024,65536 --cuda-graph --profile \
        --duration "${BENCH_DURATION:-0.5}" --repetitions 3 --max-cpu-batch 65536 --json "$OUT/bench.json" || rc=1
      timeout 70 $B/engine bench ops --min-time 50 --json "$OUT/ops.json" || rc=1
      timeout 80 "$py" benchmarks/bench_torch.py "$model" --engine "$OUT/bench.json" --json "$OUT/torch.json" || rc=1
      timeout 30 "$py" benchmarks/plot_bench.py --bench "$OUT/bench.json" --torch "$OUT/torch.json" --ops "$OUT/ops.json" \
        --combined "$OUT/bench.png" || echo "plots not drawn here: run benchmarks/plot_bench.py on the JSON files"
      return $rc
    }
    bench_all 2>&1 | tee "$OUT/bench.log" || status=1
    ;;
  precision)
    # Reduced precision on the cudnn backend: the storage tests (NHWC at fp32 parity, fp16/bf16 against the
    # reference's emulation, LeNet-5 on MNIST), then engine bench of cudnn fp32 / fp16 / bf16, PyTorch
    # fp32 and fp16 / bf16 channels_last, and every model's accuracy per precision
    # (benchmarks/precision_report.py; PREC_REPORT=0 skips it), JAX/XLA fp32 and bf16; PREC_NCU=1 adds Nsight
    # Compute per-kernel numbers. PREC_BATCHES (default 1024,65536). Files: precision-*.json,
    # precision-ncu.csv, precision.log (the tests' log: /tmp/precision-tests.log).
    prec_all() {
      local rc=0 model=${BENCH_MODEL:-models/lenet5.json} batches=${PREC_BATCHES:-1024,65536}
      local py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
      local common=(--batch "$batches" --cuda-graph --no-data-transfers --duration "${BENCH_DURATION:-0.5}" --repetitions 3)
      timeout 200 $B/tests/gpu/gpu_tests --gtest_filter='CudnnLayout*:CudnnReduced*' >/tmp/precision-tests.log 2>&1 || rc=1
      grep -E "^\[ measured|OK \]|FAILED|PASSED|SKIPPED|Failure" -A2 /tmp/precision-tests.log | grep -v "^--" | tail -60
      for p in fp32 fp16 bf16; do
        timeout 100 $B/engine bench "$model" --backend cudnn --precision $p "${common[@]}" \
          --json "$OUT/precision-cudnn-$p.json" 2>&1 | grep -E "images/s|skipped" || rc=1
      done
      timeout 150 "$py" benchmarks/bench_torch.py "$model" --engine "$OUT/precision-cudnn-fp16.json" --dtype fp32,fp16,bf16 \
        --no-data-transfers --json "$OUT/precision-torch.json" || rc=1
      timeout 150 "$py" benchmarks/bench_jax.py "$model" --device gpu --dtype fp32,bf16 --batch "$batches" --duration 0.5 \
        --no-data-transfers --json "$OUT/precision-jax.json" 2>&1 | grep -E "jit|images/s" | tail -8 || rc=1
      if [[ ${PREC_REPORT:-1} == 1 ]]; then
        CNN_SHARED_DATA=$PWD/data FASHION_MNIST_DIR=$PWD/data/fashion ENGINE_BIN=$B/engine timeout 200 "$py" \
          benchmarks/precision_report.py --backend cudnn --precisions fp16,bf16 --json "$OUT/precision-accuracy.json" || rc=1
      fi
      if command -v ncu >/dev/null && [[ ${PREC_NCU:-0} == 1 ]]; then
        # Every kernel of forward passes at the largest batch, fp32 and fp16: duration, DRAM and SM
        # throughput (% of peak). The compile-time forwards come first; the last complete pass is the
        # one to read (dev/profiling/ncu_pass.py).
        for p in fp32 fp16; do
          timeout 150 ncu --csv --page raw --metrics \
            gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum \
            -c ${PREC_NCU_KERNELS:-150} $B/engine -q bench "$model" --backend cudnn --precision $p --batch "${batches##*,}" \
            --no-data-transfers --duration 0.01 --repetitions 1 --warmup 0 2>/dev/null | sed "s/^/$p,/" >>"$OUT/precision-ncu.csv" || rc=1
        done
      fi
      return $rc
    }
    prec_all 2>&1 | tee "$OUT/precision.log" || status=1
    ;;
  tc)
    # Reduced precision on the custom backend (docs/design/custom-tensor-core.md): the tensor-core chain's and the
    # per-node tensor-core path's GPU tests, compute-sanitizer on them, engine bench of custom fp16 /
    # bf16 / int8 (int8 on LeNet-5 calibrated on 1,000 MNIST training images:
    # data/mnist/train-images-idx3-ubyte.gz) beside cudnn fp16 and PyTorch fp16 channels_last, the seed
    # models (per-node path) in fp16 and int8, and every model's accuracy per precision held to its bound
    # (precision_report.py --check). TC_BATCHES (default 1,1024,4096,65536); TC_PARTS (default "tests
    # bench accuracy") runs a part only (a call is at most 10 minutes). Files: tc-tests.log,
    # tc-sanitizer-*.log, tc-bench-*.json, tc-torch.json, tc-accuracy.json, tc.log.
    tc_all() {
      local rc=0 batches=${TC_BATCHES:-1,1024,4096,65536} cal=/tmp/tc-lenet5-calibrated.json
      local py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
      local common=(--batch "$batches" --cuda-graph --no-data-transfers --duration "${BENCH_DURATION:-0.4}" --repetitions 3)
      local parts=" ${TC_PARTS:-tests bench accuracy} "
      if [[ $parts == *" tests "* ]]; then
      timeout 300 $B/tests/gpu/gpu_tests --gtest_filter='CustomTcChain*:CustomTcPerNode*' >"$OUT/tc-tests.log" 2>&1 || rc=1
      grep -E "^\[ measured|OK \]|FAILED|PASSED|Failure" -A2 "$OUT/tc-tests.log" | grep -v "^--" | tail -80
      for tool in memcheck synccheck racecheck; do
        local filter='CustomTcChain*:CustomTcPerNode*'
        [[ $tool == racecheck ]] && filter='CustomTcChain.SameBitsForAnyBatchSplit:CustomTcChain.Int8SameBitsForAnyBatchSplit:CustomTcPerNode.SameBitsForAnyBatchSplit'
        ENGINE_SANITIZER_RUN=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/gpu/gpu_tests \
          --gtest_brief=1 --gtest_filter="$filter" >"$OUT/tc-sanitizer-$tool.log" 2>&1 || rc=1
        echo "compute-sanitizer $tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/tc-sanitizer-$tool.log" | tail -1)"
      done
      fi
      if [[ $parts != *" bench "* ]]; then
        if [[ $parts == *" accuracy "* ]]; then tc_accuracy || rc=1; fi
        return $rc
      fi
      $B/engine -q calibrate models/lenet5.json "$DATA/train-images-idx3-ubyte.gz" -o "$cal" --images 1000 || rc=1
      for p in fp16 bf16 int8; do
        timeout 100 $B/engine bench "$cal" --backend custom --precision $p "${common[@]}" \
          --json "$OUT/tc-bench-custom-$p.json" 2>&1 | grep -E "graph +compute|skipped" | sed "s/^/[custom $p] /" || rc=1
      done
      timeout 100 $B/engine bench "$cal" --backend cudnn --precision fp16 "${common[@]}" \
        --json "$OUT/tc-bench-cudnn-fp16.json" 2>&1 | grep -E "graph +compute|skipped" | sed "s/^/[cudnn fp16] /" || rc=1
      timeout 150 "$py" benchmarks/bench_torch.py models/lenet5.json --engine "$OUT/tc-bench-custom-fp16.json" --dtype fp16 \
        --no-data-transfers --json "$OUT/tc-torch.json" | tail -12 || rc=1
      # The seed models: outside the chain's family, the per-node tensor-core path.
      for m in seed002-cnn seed003-mlp; do
        $B/engine -q calibrate models/$m.json "$DATA/train-images-idx3-ubyte.gz" -o /tmp/tc-$m.json --images 1000 || rc=1
        for p in fp32 fp16 int8; do
          timeout 60 $B/engine bench /tmp/tc-$m.json --backend custom --precision $p --batch 1024,65536 --cuda-graph \
            --no-data-transfers --duration 0.3 --repetitions 3 --json "$OUT/tc-bench-$m-$p.json" 2>&1 \
            | grep -E "graph +compute|skipped" | sed "s/^/[custom $m $p] /" || rc=1
        done
      done
      [[ $parts == *" accuracy "* ]] && { tc_accuracy || rc=1; }
      return $rc
    }
    tc_accuracy() {
      local py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
      CNN_SHARED_DATA=$PWD/data FASHION_MNIST_DIR=$PWD/data/fashion timeout 300 "$py" benchmarks/precision_report.py \
        --backend custom --precisions fp16,bf16,int8 --engine $B/engine --json "$OUT/tc-accuracy.json" --check
    }
    tc_all 2>&1 | tee "$OUT/tc.log" || status=1
    ;;
  perf)
    # The fused path against everything else on this GPU, in one call (docs/design/custom-fused.md):
    # engine bench of custom (fused), custom --no-fuse and cudnn at PERF_BATCHES, plain and CUDA
    # graph; PyTorch and JAX/XLA on the same model and batches; Nsight Compute on the fused kernels
    # at the largest batch. Files: perf-*.json, perf-ncu.txt, perf.log.
    perf_all() {
      local rc=0 model=${BENCH_MODEL:-models/lenet5.json} batches=${PERF_BATCHES:-1,1024,4096,65536}
      local py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
      local common=(--batch "$batches" --cuda-graph --duration "${BENCH_DURATION:-0.5}" --repetitions 3)
      timeout 150 $B/engine bench "$model" --backend custom,cudnn "${common[@]}" --json "$OUT/perf-engine.json" || rc=1
      timeout 90 $B/engine bench "$model" --backend custom --no-fuse --no-data-transfers "${common[@]}" \
        --json "$OUT/perf-engine-nofuse.json" || rc=1
      timeout 120 "$py" benchmarks/bench_torch.py "$model" --engine "$OUT/perf-engine.json" --json "$OUT/perf-torch.json" || rc=1
      timeout 150 "$py" benchmarks/bench_jax.py "$model" --device gpu --dtype fp32,bf16 --duration 0.5 \
        --engine "$OUT/perf-engine.json" --json "$OUT/perf-jax.json" || rc=1
      if command -v ncu >/dev/null && [[ ${PERF_NCU:-1} == 1 ]]; then
        timeout 150 ncu -k regex:'chain_kernel' -c 2 --section SpeedOfLight --section Occupancy \
          --section LaunchStats --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis \
          $B/engine -q bench "$model" --backend custom --batch "${batches##*,}" --no-data-transfers --duration 0.05 \
          --repetitions 1 >"$OUT/perf-ncu.txt" 2>&1 || rc=1
        grep -E "chain_kernel|Duration|Compute \(SM\) Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per|Executed Ipc A|Stall" \
          "$OUT/perf-ncu.txt" | head -40
      fi
      return $rc
    }
    perf_all 2>&1 | tee "$OUT/perf.log" || status=1
    ;;
  multi)
    # --devices on every GPU of the host (docs/design/multi-gpu.md): the multi-device GPU tests (two
    # executables on GPU 0; GPUs 0 and 1 where there are two), engine run --devices all against GPU 0
    # alone at the same batch (bitwise), then engine bench of custom and cudnn at MULTI_BATCH (65,536)
    # with --devices 0, 0,1 and all (each batch split across the GPUs against the first alone, in the
    # same call). Files: multi.log, multi-0.json, multi-01.json, multi-all.json.
    multi_all() {
      local rc=0 model=${BENCH_MODEL:-models/lenet5.json} gpus
      gpus=$(nvidia-smi -L | wc -l)
      echo "GPUs: $gpus (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
      $B/engine backends
      timeout 300 $B/tests/gpu/gpu_tests --gtest_brief=1 --gtest_filter='*MultiDevice*:*DeviceBinding*' || rc=1
      for be in custom cudnn; do
        for d in all 0; do
          timeout 60 $B/engine -q run models/lenet5.json "$DATA/t10k-images-idx3-ubyte.gz" --backend $be --batch 1024 \
            --devices $d --json --dump-outputs "$OUT/multi-$d.npy" >/dev/null || rc=1
        done
        if cmp -s "$OUT/multi-all.npy" "$OUT/multi-0.npy"; then
          echo "engine run --backend $be --batch 1024 --devices all: bitwise equal to --devices 0"
        else
          echo "engine run --backend $be --batch 1024 --devices all: DIFFERENT from --devices 0"; rc=1
        fi
        rm -f "$OUT"/multi-*.npy
      done
      for d in 0 0,1 all; do
        if [[ $d == 0,1 ]] && ((gpus < 2)); then echo "--devices 0,1 skipped: $gpus GPU(s)"; continue; fi
        timeout 240 $B/engine bench "$model" --backend custom,cudnn --batch "${MULTI_BATCH:-65536}" --devices $d \
          --duration "${BENCH_DURATION:-0.5}" --repetitions 3 --json "$OUT/multi-${d//,/}.json" || rc=1
      done
      return $rc
    }
    multi_all 2>&1 | tee "$OUT/multi.log" || status=1
    ;;
  train|train-tests|train-mnist|train-bench)
    # Training on the GPU (docs/design/training.md, "GPU"). `train` runs the three parts below; each also
    # runs alone (train-tests, train-mnist, train-bench) when one call must stay under 10 minutes.
    # Files in $OUT (5): train-tests.log, train-sanitizer.log, train-mnist.log, train-bench.json,
    # train-bench.log.
    py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
    if [[ $s == train || $s == train-tests ]]; then
      # The custom and cudnn trainers' GPU tests: gradients vs the float64 reference, 50-step runs vs
      # the cpu trainer, bitwise repeats; the "[ measured ]" lines are the numbers for docs/design/training.md.
      # TRAIN_FILTER narrows them (e.g. 'CudnnTrain*').
      timeout 300 $B/tests/gpu/gpu_tests --gtest_filter="${TRAIN_FILTER:-CustomTrain*:CudnnTrain*}" \
        >"$OUT/train-tests.log" 2>&1 || status=1
      grep -E "^\[ measured|OK \]|FAILED|PASSED|SKIPPED" "$OUT/train-tests.log" | grep -v "measured \] plan" | tail -80
      timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/gpu/gpu_tests --gtest_brief=1 \
        --gtest_filter="${TRAIN_SANITIZER_FILTER:-CustomTrain/GpuTrainGradients.*:CustomTrain/GpuTrainInterface.*:CudnnTrain/GpuTrainGradients.*:CudnnTrain/GpuTrainInterface.*:-*LenetLike*}" \
        >"$OUT/train-sanitizer.log" 2>&1 || status=1
      echo "compute-sanitizer memcheck (train): $(grep -E "ERROR SUMMARY" "$OUT/train-sanitizer.log" | tail -1)"
    fi
    if [[ $s == train || $s == train-mnist ]]; then
      # engine train on MNIST, LeNet-5 from the same initialisation on cpu, custom and cudnn: loss,
      # train and test accuracy, images/s per epoch. TRAIN_EPOCHS (default 3), TRAIN_BATCH (default 32).
      {
        tmp=$(mktemp -d)
        for be in cpu custom cudnn; do
          timeout 240 $B/engine train models/architectures/lenet5.json \
            --data "$DATA/train-images-idx3-ubyte.gz" --val "$DATA/t10k-images-idx3-ubyte.gz" \
            --epochs "${TRAIN_EPOCHS:-3}" --batch "${TRAIN_BATCH:-32}" --optimizer adam --seed 1 --backend $be \
            --no-plot --no-checkpoints -o "$tmp/lenet5-$be.json" || status=1
        done
        "$py" - "$tmp" <<'PY' || status=1
import json, sys
d = sys.argv[1]
bes = ("cpu", "custom", "cudnn")
curves = {be: json.load(open(f"{d}/lenet5-{be}.curve.json"))["epochs"] for be in bes}
print("epoch | " + " | ".join(f"{be}: loss, train acc, test acc, images/s" for be in bes))
for rows in zip(*(curves[be] for be in bes)):
    print(f"{rows[0]['epoch']:5d} | " + " | ".join(
        f"{r['loss']:.5f} {r['accuracy']:.4f} {r['val_accuracy']:.4f} {r['images_per_second']:10,.0f}" for r in rows))
sys.exit(0 if all(curves[be][-1]["val_accuracy"] > 0.97 for be in ("custom", "cudnn")) else 1)
PY
        rm -rf "$tmp"
      } >"$OUT/train-mnist.log" 2>&1 || status=1
      tail -8 "$OUT/train-mnist.log"
    fi
    if [[ $s == train || $s == train-bench ]]; then
      # Time per epoch, LeNet-5, batch 256 and 32, data on the GPU: custom and cudnn vs PyTorch eager,
      # CUDA graph, torch.compile (benchmarks/bench_train_gpu.py says what is timed).
      timeout 420 "$py" benchmarks/bench_train_gpu.py --engine-bin $B/train_bench_gpu --json "$OUT/train-bench.json" \
        >"$OUT/train-bench.log" 2>&1 || status=1
      tail -20 "$OUT/train-bench.log"
    fi
    ;;
  train-multi)
    # Data-parallel training (docs/design/multi-gpu.md, "Training"): the data-parallel tests, then engine
    # train of LeNet-5 on MNIST with 256 images per GPU (--batch 256 x N, --devices 0..N-1) for N = 1,
    # 2, 4 (as many as there are), custom and cudnn: images/s per epoch (median of epochs 2..), the
    # scaling over one GPU, and the validation accuracy. TRAIN_EPOCHS (default 3). Files:
    # train-multi.json, train-multi.log.
    py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
    {
      timeout 200 $B/tests/gpu/gpu_tests --gtest_filter='Gpu/DataParallelTrain*' >/tmp/dp-tests.log 2>&1 || status=1
      grep -E "^\[ measured|OK \]|FAILED|PASSED|SKIPPED|Failure" -A2 /tmp/dp-tests.log | grep -v "^--" | tail -30
      ngpu=$(nvidia-smi -L | wc -l); tmp=$(mktemp -d)
      for n in 1 2 4; do
        ((n <= ngpu)) || continue
        devs=$(seq -s, 0 $((n - 1)))
        for be in ${TRAIN_MULTI_BACKENDS:-custom cudnn}; do
          timeout 240 $B/engine -q train models/architectures/lenet5.json --data "$DATA/train-images-idx3-ubyte.gz" \
            --val "$DATA/t10k-images-idx3-ubyte.gz" --epochs "${TRAIN_EPOCHS:-3}" --batch $((256 * n)) --devices "$devs" \
            --optimizer adam --lr 0.003 --seed 1 --backend $be --no-plot --no-checkpoints -o "$tmp/$be-$n.json" || status=1
        done
      done
      "$py" - "$tmp" "$OUT/train-multi.json" <<'PY' || status=1
import glob, json, os, statistics, sys
d, out = sys.argv[1], sys.argv[2]
rows = []
for path in sorted(glob.glob(f"{d}/*.curve.json")):
    be, n = os.path.basename(path)[:-len(".curve.json")].rsplit("-", 1)
    ep = json.load(open(path))["epochs"]
    rate = statistics.median(e["images_per_second"] for e in ep[1:]) if len(ep) > 1 else ep[0]["images_per_second"]
    rows.append({"backend": be, "gpus": int(n), "batch": 256 * int(n), "images_per_second": rate,
                 "epoch_seconds": 60000 / rate, "val_accuracy": ep[-1]["val_accuracy"], "epochs": len(ep)})
for r in rows:
    one = next((x for x in rows if x["backend"] == r["backend"] and x["gpus"] == 1), None)
    r["scaling"] = r["images_per_second"] / one["images_per_second"] if one else None
    print(f"{r['backend']:6s} {r['gpus']} GPU(s), batch {r['batch']:5d}: {r['images_per_second']:12,.0f} images/s "
          f"({r['epoch_seconds'] * 1e3:7.1f} ms/epoch), scaling {r['scaling']:.2f} = {r['scaling'] / r['gpus']:.2f} x N, "
          f"val accuracy {100 * r['val_accuracy']:.2f}%")
json.dump(rows, open(out, "w"), indent=1)
PY
    } 2>&1 | tee "$OUT/train-multi.log"
    ;;
  train-accuracy)
    # Training accuracy targets on the GPU backends (docs/design/training.md, "Results"): each recipe on
    # custom and cudnn, test accuracy after the last epoch. The LeNet-5 recipes were chosen on a
    # 5,000-image validation split held out of train (--val-split 5000; docs/design/training.md), not on t10k. ACC_BACKENDS (default "custom cudnn"),
    # ACC_RUNS (default all: mlp-exact mlp-momentum cnn lenet-mnist lenet-fashion). Files in $OUT:
    # train-accuracy.log and train-accuracy.tar.gz (every curve JSON/CSV).
    {
      tmp=$(mktemp -d)
      M=$DATA F=$PWD/data/fashion
      acc_run() {  # name backend args...
        local name=$1 be=$2; shift 2
        local t0=$SECONDS
        timeout 300 $B/engine -q train "$@" --backend $be --no-plot --no-checkpoints -o "$tmp/$name-$be.json" \
          >"$tmp/$name-$be.log" 2>&1 || { status=1; tail -3 "$tmp/$name-$be.log"; }
        echo "$name $be: $((SECONDS - t0)) s"
      }
      for be in ${ACC_BACKENDS:-custom cudnn}; do
        for r in ${ACC_RUNS:-mlp-exact mlp-momentum cnn lenet-mnist lenet-fashion}; do
          case $r in
          mlp-exact) acc_run $r $be models/architectures/seed003-mlp.json --data $M/train-images-idx3-ubyte.gz \
              --val $M/t10k-images-idx3-ubyte.gz --optimizer sgd --lr 0.02 --lr-decay 5e-5 --batch 256 --epochs 7 --steps 1600 ;;
          mlp-momentum) acc_run $r $be models/architectures/seed003-mlp-norm.json --data $M/train-images-idx3-ubyte.gz \
              --val $M/t10k-images-idx3-ubyte.gz --optimizer sgd --lr 0.02 --lr-decay 5e-5 --batch 256 --epochs 7 --steps 1600 \
              --momentum 0.9 ;;
          cnn) for seed in 0 1 2 3 4; do
              acc_run $r-seed$seed $be models/architectures/seed002-cnn.json --data $M/train-images-idx3-ubyte.gz --limit 50000 \
                --val $M/t10k-images-idx3-ubyte.gz --optimizer adam --batch 32 --init-scheme keras --seed $seed
            done ;;
          lenet-mnist) acc_run $r $be models/architectures/lenet5.json --data $M/train-images-idx3-ubyte.gz \
              --val $M/t10k-images-idx3-ubyte.gz --optimizer adam --lr 0.003 --lr-schedule cosine --warmup-epochs 1 \
              --augment shift=2 --batch 64 --epochs 20 ;;
          lenet-fashion) acc_run $r $be models/architectures/lenet5.json --data $F/train-images-idx3-ubyte.gz \
              --labels $F/train-labels-idx1-ubyte.gz --val $F/t10k-images-idx3-ubyte.gz --val-labels $F/t10k-labels-idx1-ubyte.gz \
              --optimizer adam --lr 0.002 --lr-schedule cosine --warmup-epochs 1 --batch 128 --epochs 20 ;;
          esac
        done
      done
      py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
      "$py" - "$tmp" <<'PY'
import glob, json, os, sys
for path in sorted(glob.glob(f"{sys.argv[1]}/*.curve.json")):
    c = json.load(open(path))
    e = c["epochs"][-1]
    secs = sum(x["seconds"] for x in c["epochs"])
    print(f"{os.path.basename(path)[:-11]:28s} epochs {len(c['epochs']):3d}  train {100 * e['accuracy']:6.2f}%  "
          f"test {100 * e['val_accuracy']:6.2f}%  loss {e['loss']:.4f}  {secs:6.1f} s training")
PY
      tar -czf "$OUT/train-accuracy.tar.gz" -C "$tmp" $(cd "$tmp" && ls *.curve.* *.log)
      rm -rf "$tmp"
    } 2>&1 | tee "$OUT/train-accuracy.log"
    ;;
  train-recipes)
    # How docs/design/training.md chose the LeNet-5 recipes of train-accuracy: 20-epoch runs on custom with
    # the last 5,000 training images held out (--val-split 5000), never the test set. One line per
    # recipe in $OUT/train-recipes.log.
    {
      T=$(mktemp -d) F=$PWD/data/fashion
      recipe() {  # name data-dir args...
        local name=$1 d=$2; shift 2
        local lab=(); [[ $d == "$F" ]] && lab=(--labels $d/train-labels-idx1-ubyte.gz)
        timeout 120 $B/engine -q train models/architectures/lenet5.json --data $d/train-images-idx3-ubyte.gz "${lab[@]}" \
          --val-split 5000 --backend custom --optimizer adam --lr-schedule cosine --warmup-epochs 1 --epochs 20 \
          --no-plot --no-checkpoints -o $T/$name.json "$@" >$T/$name.log 2>&1 || { status=1; tail -2 $T/$name.log; }
        python3 -c "import json; c = json.load(open('$T/$name.curve.json'))['epochs']; print(f'$name: validation '
          f'{100 * c[-1][\"val_accuracy\"]:.2f}%, training {100 * c[-1][\"accuracy\"]:.2f}%')"
      }
      recipe fashion-shift1-flip-lr2-b128 $F --augment shift=1,flip --lr 0.002 --batch 128
      recipe fashion-flip-lr2-b128 $F --augment flip --lr 0.002 --batch 128
      recipe fashion-none-lr2-b128 $F --lr 0.002 --batch 128
      recipe fashion-flip-lr2-b64 $F --augment flip --lr 0.002 --batch 64
      recipe fashion-flip-lr4-b128 $F --augment flip --lr 0.004 --batch 128
      recipe fashion-flip-lr1-b32 $F --augment flip --lr 0.001 --batch 32
      recipe fashion-flip-lr3-b64 $F --augment flip --lr 0.003 --batch 64
      recipe fashion-shift1-flip-lr3-b64 $F --augment shift=1,flip --lr 0.003 --batch 64
      recipe mnist-shift2-lr2-b128 $DATA --augment shift=2 --lr 0.002 --batch 128
      recipe mnist-shift2-lr2-b64 $DATA --augment shift=2 --lr 0.002 --batch 64
      recipe mnist-shift1-lr2-b128 $DATA --augment shift=1 --lr 0.002 --batch 128
      recipe mnist-shift2-lr3-b64 $DATA --augment shift=2 --lr 0.003 --batch 64
      rm -rf "$T"
    } 2>&1 | tee "$OUT/train-recipes.log"
    ;;
  *) echo "unknown step $s"; exit 2 ;;
  esac
done
echo "== done ($(date +%T)), status $status"
exit $status
