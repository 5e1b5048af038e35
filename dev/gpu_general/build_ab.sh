#!/usr/bin/env bash
# Builds dev/gpu_general/general_ab.cpp against the libraries of the Ninja build folder $1 (the
# gpu_tests target built first), with gpu_tests' link line minus its own objects and GoogleTest.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "$1" && pwd)
cd "$B"
c++ -O2 -std=c++20 -fopenmp -DFMT_SHARED -I"$SRC" -I"$B/generated" -isystem /usr/local/cuda/include \
  -c "$SRC/dev/gpu_general/general_ab.cpp" -o "$B/general_ab.o"
if [[ -f build.ninja ]]; then
  link=$(ninja -t commands tests/gpu/gpu_tests | tail -1)
  link=$(tr ' ' '\n' <<<"$link" | grep -v '^tests/gpu/CMakeFiles/.*\.o$' | grep -v 'gtest' | tr '\n' ' ')
  eval "${link/-o tests\/gpu\/gpu_tests/-o general_ab general_ab.o}"
else  # Makefiles: the link line runs from tests/gpu
  cd tests/gpu
  link=$(tr ' ' '\n' <CMakeFiles/gpu_tests.dir/link.txt | grep -v '\.o$' | grep -v 'gtest' | tr '\n' ' ')
  eval "${link/-o gpu_tests/-o ../../general_ab ../../general_ab.o}"
fi
