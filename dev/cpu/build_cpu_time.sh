#!/bin/sh
# Builds dev/cpu/cpu_time.cpp against build/'s static libraries into /tmp/cpu_time.
set -e
cd "$(dirname "$0")/../.."
B=build
c++ -O2 -std=c++20 -I. -I$B/generated dev/cpu/cpu_time.cpp -o ${CPU_TIME_OUT:-/tmp/cpu_time} \
  $B/engine-build/cpu/libengine_backend_cpu.a $B/engine-build/libengine_core.a $B/formats/libformats.a \
  -lfmt -lspdlog -lgomp -lpthread -lcrypto -lpng -ljpeg -lz
