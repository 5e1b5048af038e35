#!/usr/bin/env bash
# Runs a fuzzer binary once over every file in the given folders (no fuzzing): the committed
# seeds and the regression inputs it once crashed on. Used by ctest (fuzz_NAME.replay).
#   tests/fuzz/replay.sh build-asan/tests/fuzz/fuzz_graph tests/fuzz/seeds/graph tests/regressions/graph
set -euo pipefail
fuzzer=$1
shift
files=()
for dir in "$@"; do
  [[ -d $dir ]] || continue
  while IFS= read -r -d '' f; do files+=("$f"); done < <(find "$dir" -type f ! -name '.*' ! -name '*.md' -print0 | sort -z)
done
if ((${#files[@]} == 0)); then
  echo "no inputs in $*"
  exit 0
fi
exec "$fuzzer" -timeout=60 -rss_limit_mb=4096 "${files[@]}"
