#!/usr/bin/env bash
# Packs the engine and gpu_tests built here (build/) with the host libraries they link that a bare
# GPU machine may lack (spdlog, fmt, png, jpeg) into DEST/bin.tar.xz (DEST: the copy of this tree that
# travels to the device), for dev/cudnn/device_run.sh.  usage: dev/cudnn/pack.sh DEST
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); mkdir -p $tmp/lib
cp build/engine build/tests/gpu/gpu_tests $tmp/ && strip $tmp/engine $tmp/gpu_tests
[ -f build/options_ab ] && cp build/options_ab $tmp/ && strip $tmp/options_ab
for l in spdlog fmt png16 jpeg; do ldd build/engine | awk -v l="lib$l" '$1 ~ l {print $3}' | xargs -r -I{} cp -L {} $tmp/lib/; done
tar cJf "$1/bin.tar.xz" -C $tmp . && rm -rf $tmp && ls -la "$1/bin.tar.xz"
