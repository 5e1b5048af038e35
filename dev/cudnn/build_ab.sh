#!/usr/bin/env bash
# Builds dev/cudnn/options_ab.cpp against the libraries of build/ (configure and build the
# gpu_tests target first), with gpu_tests' link line minus its objects and GoogleTest.
set -euo pipefail
cd "$(dirname "$0")/../../build/tests/gpu"
c++ -O2 -std=c++20 -fopenmp -DFMT_SHARED -I../../.. -I../../generated -isystem /usr/local/cuda/include \
  -c ../../../dev/cudnn/options_ab.cpp -o /tmp/options_ab.o
link=$(tr ' ' '\n' < CMakeFiles/gpu_tests.dir/link.txt | grep -v '\.o$' | grep -v 'gtest' | tr '\n' ' ')
${link/-o gpu_tests/-o ../../options_ab /tmp/options_ab.o}
