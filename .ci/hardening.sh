#!/usr/bin/env bash
# Hardening checks, called by .ci/run (CPU only, no GPU needed):
#   1. an AddressSanitizer + UndefinedBehaviorSanitizer build (clang, CUDA off) of the engine, the
#      test suite and the libFuzzer targets, in build-asan/;
#   2. ctest on it: every GoogleTest suite, the regression replays (tests/regressions) and each
#      fuzzer run once over its committed seeds and regression inputs;
#   3. the malformed corpus (tests/python/corpus/make_malformed_corpus.py, over a thousand broken
#      models and data
#      files) against the sanitized `engine`: every case must exit 1 with one error line;
#   4. each fuzzer for FUZZ_SECONDS (default 30), seeded from the project's real files.
# Any failure, sanitizer report or fuzzer finding fails the script. A fuzzer's finding is saved in
# build-asan/fuzz-findings/; reproduce it with `build-asan/tests/fuzz/fuzz_NAME FILE`, fix the bug,
# and commit the file to tests/regressions/NAME/ so it stays fixed.
#
# Needs clang 14 with its libFuzzer/sanitizer runtimes and LLVM's OpenMP (Debian: clang-14,
# libclang-rt-14-dev, libomp-14-dev), plus what scripts/setup.sh installs.
# Environment: FUZZ_SECONDS (0 skips fuzzing), ASAN_BUILD_DIR (default build-asan), JOBS (nproc),
# SKIP_CORPUS=1, SKIP_CTEST=1.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${ASAN_BUILD_DIR:-build-asan}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
JOBS=${JOBS:-$(nproc)}
PYTHON=${PYTHON:-.venv/bin/python}
[[ -x $PYTHON ]] || PYTHON=python3
start=$SECONDS
declare -a timings=()
step() { printf '\n== %s\n' "$*"; step_start=$SECONDS; }
done_step() { timings+=("$(printf '%-34s %4d s' "$1" $((SECONDS - step_start)))"); }

CC_BIN=$(command -v clang-14 || command -v clang || true)
CXX_BIN=$(command -v clang++-14 || command -v clang++ || true)
if [[ -z $CXX_BIN || -z $CC_BIN ]]; then
  echo "hardening: clang is not installed (Debian: apt-get install clang-14 libclang-rt-14-dev libomp-14-dev)" >&2
  exit 1
fi

# Sanitizer reports fail the process; leaks count; an allocation the code did not bound is a report.
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

step "configure ${BUILD}/ (clang, ASan + UBSan, CUDA off, fuzzers on)"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# A cache made with another compiler cannot be reconfigured (CMake would drop it and the -D options
# with it): start over.
if [[ -f $BUILD/CMakeCache.txt ]] && ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$CXX_BIN" "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD"
fi
cmake -S . -B "$BUILD" "${generator[@]}" \
  -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DENGINE_WITH_CUDA=OFF -DENGINE_BUILD_TESTS=ON -DENGINE_BUILD_FUZZERS=ON >/dev/null
grep -qx "ENGINE_WITH_CUDA:BOOL=OFF" "$BUILD/CMakeCache.txt" || { echo "hardening: $BUILD has CUDA on" >&2; exit 1; }
done_step configure

step "build ${BUILD}/"
cmake --build "$BUILD" -j "$JOBS"
done_step build

ENGINE_BIN=""
for candidate in "$BUILD/engine" "$BUILD/bin/engine"; do
  [[ -f $candidate && -x $candidate ]] && ENGINE_BIN=$PWD/$candidate && break
done
[[ -n $ENGINE_BIN ]] || { echo "hardening: no engine binary in $BUILD" >&2; exit 1; }

if [[ "${SKIP_CTEST:-0}" != 1 ]]; then
  step "ctest under ASan + UBSan (GoogleTest suites, regression replays, fuzzers over their seeds)"
  ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 600
  done_step ctest
fi

if [[ "${SKIP_CORPUS:-0}" != 1 ]]; then
  step "malformed corpus against the sanitized engine"
  "$PYTHON" tests/python/corpus/make_malformed_corpus.py "$BUILD/malformed-corpus"
  ENGINE_BIN=$ENGINE_BIN MALFORMED_CORPUS=$PWD/$BUILD/malformed-corpus MALFORMED_ALL=1 MALFORMED_TIMEOUT=${MALFORMED_TIMEOUT:-120} \
    MALFORMED_JOBS=$JOBS "$PYTHON" -m pytest -q -p no:cacheprovider tests/python/test_malformed_corpus.py
  done_step "malformed corpus"
fi

if ((FUZZ_SECONDS > 0)); then
  step "fuzzing: each target for ${FUZZ_SECONDS} s, ${JOBS} at a time"
  seeds=$BUILD/fuzz-seeds
  rm -rf "$seeds"
  "$PYTHON" tests/fuzz/make_seeds.py "$seeds"
  mkdir -p "$BUILD/fuzz-findings" "$BUILD/fuzz-logs"
  export FUZZ_WEIGHTS_DIRS=$PWD/$seeds
  declare -A dict=([graph]=json [safetensors]=json [model]=json [idx]=idx [image]=image)
  targets=(model graph safetensors image idx)
  pids=()
  names=()
  run_fuzzer() {
    local name=$1 corpus=$BUILD/fuzz-corpus/$1
    mkdir -p "$corpus"
    # -timeout: one input may take at most 25 s (a hang); -rss_limit_mb/-malloc_limit_mb: the
    # largest allocation the readers allow is the 1 GiB IDX limit. The regression inputs are not
    # seeds (ctest replays them): some are slow on purpose, e.g. the 2000-scan JPEG.
    timeout $((FUZZ_SECONDS + 300)) "$BUILD/tests/fuzz/fuzz_$name" \
      -max_total_time="$FUZZ_SECONDS" -timeout=25 -rss_limit_mb=3072 -malloc_limit_mb=1200 \
      -dict="tests/fuzz/dicts/${dict[$name]}.dict" -print_final_stats=1 -close_fd_mask=1 \
      -artifact_prefix="$BUILD/fuzz-findings/$name-" \
      "$corpus" "$seeds/$name" "tests/fuzz/seeds/$name" \
      >"$BUILD/fuzz-logs/$name.log" 2>&1
  }
  failed=()
  wait_one() {
    local pid=${pids[0]} name=${names[0]}
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
    local executions
    if wait "$pid"; then
      executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$BUILD/fuzz-logs/$name.log" | grep -o '[0-9]*$' || echo "?")
      printf '  fuzz_%-12s ok, %s executions\n' "$name" "$executions"
    else
      printf '  fuzz_%-12s FAILED: see %s\n' "$name" "$BUILD/fuzz-logs/$name.log"
      grep -E "ERROR|SUMMARY|FUZZ CHECK|Test unit written" "$BUILD/fuzz-logs/$name.log" | head -8 | sed 's/^/    /'
      failed+=("$name")
    fi
  }
  for name in "${targets[@]}"; do
    ((${#pids[@]} >= JOBS)) && wait_one
    run_fuzzer "$name" &
    pids+=($!)
    names+=("$name")
  done
  while ((${#pids[@]} > 0)); do wait_one; done
  done_step fuzzing
  if ((${#failed[@]})); then
    echo "hardening: fuzzers found problems in: ${failed[*]} (inputs in $BUILD/fuzz-findings/)" >&2
    exit 1
  fi
fi

printf '\n== hardening passed in %d s\n' $((SECONDS - start))
printf '  %s\n' "${timings[@]}"
