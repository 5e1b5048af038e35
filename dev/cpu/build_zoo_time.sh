#!/bin/sh
# Builds dev/cpu/zoo_time.cpp against BUILD_DIR's static libraries (targets engine_backend_cpu,
# engine_core, formats) into ${ZOO_TIME_OUT:-/tmp/zoo_time}.
#   dev/cpu/build_zoo_time.sh [BUILD_DIR=build]
set -e
cd "$(dirname "$0")/../.."
B=${1:-build}
c++ -O2 -std=c++20 -I. -I$B/generated dev/cpu/zoo_time.cpp -o ${ZOO_TIME_OUT:-/tmp/zoo_time} \
  $B/engine-build/cpu/libengine_backend_cpu.a $B/engine-build/libengine_core.a $B/formats/libformats.a \
  -lfmt -lspdlog -lgomp -lpthread -lcrypto -lpng -ljpeg -lz
