#!/usr/bin/env bash
# Registers, stack and spills of the custom backend's fused kernels as ptxas compiles them for one
# architecture, and (with a disassembler) the source lines of every spill store and load in each
# kernel. The image chain's cluster kernel sits at its 128-register cap: a change can move ptxas's
# spills onto the critical path (a spill store that waits for a global load at the entry;
# docs/design/custom-fused.md). Run it before a GPU run; no GPU needed.
#   usage: dev/profiling/kernel_resources.sh [ARCH] [FILE.cu ...]   (default: 90, the fused kernels)
# NVDISASM names nvdisasm (the CUDA toolkit's, or the one in Triton's wheel); without one, the
# spills' lines are left out. With cuobjdump (CUOBJDUMP, or beside NVDISASM), each kernel's code size.
set -euo pipefail
cd "$(dirname "$0")/../.."
arch=${1:-90}; shift || true
files=("$@"); ((${#files[@]})) || files=(engine/custom/fused/image_chain.cu engine/custom/fused/conv_chain.cu
                                         engine/custom/fused/dense_chain.cu)
nvcc=${NVCC:-nvcc}; command -v "$nvcc" >/dev/null || nvcc=/usr/local/cuda/bin/nvcc
dis=${NVDISASM:-$(command -v nvdisasm || true)}
# CUOBJDUMP names cuobjdump (the toolkit's, or the one beside NVDISASM in Triton's wheel); without
# one, the code sizes are left out.
objdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
[[ -z $objdump && -n $dis && -x $(dirname "$dis")/cuobjdump ]] && objdump=$(dirname "$dis")/cuobjdump
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for f in "${files[@]}"; do
  cubin=$tmp/$(basename "$f" .cu).cubin
  "$nvcc" -std=c++17 -O3 -arch=sm_$arch --expt-relaxed-constexpr -lineinfo -I. -cubin -Xptxas -v -o "$cubin" "$f" \
    2>"$tmp/ptxas.txt" || { cat "$tmp/ptxas.txt"; exit 1; }
  echo "== $f (sm_$arch)"
  # ptxas prints, per kernel: the entry's name, then its stack and spills, then its registers.
  awk '/Compiling entry function/ { n = $0; sub(/.*function .\047?/, "", n); sub(/\047.*/, "", n) }
       /bytes stack frame/ { s = $0; sub(/^[ \t]+/, "", s) }
       /Used [0-9]+ registers/ { r = $0; sub(/.*Used /, "", r); sub(/,.*/, "", r);
                                 if (n != "") printf "  %-16s %s  %s\n", r, s, n; n = "" }' "$tmp/ptxas.txt" |
    c++filt | sed -E 's/engine::custom::fused::\(anonymous namespace\):://g'
  # Each kernel's code size: at batch 1 the image chain waits at jumps into code not yet fetched
  # (the reason for the specialised cluster kernels, docs/design/custom-fused.md).
  if [[ -n $objdump && -x $objdump ]]; then
    "$objdump" -elf "$cubin" 2>/dev/null |
      awk '$0 ~ /PROGBITS/ && $NF ~ /^\.text\./ { n = $NF; sub(/^\.text\./, "", n); print $3, n }' |
      while read -r hex name; do echo "$(( 16#$hex )) $name"; done |
      awk '{ printf "  %7.1f KiB code  %s\n", $1 / 1024, $2 }' |
      c++filt | sed -E 's/engine::custom::fused::\(anonymous namespace\):://g; s/\(engine::custom::fused::.*//'
  fi
  if [[ -n $dis && -x $dis ]]; then
    "$dis" -g -c "$cubin" >"$tmp/sass.txt" 2>/dev/null || continue
    # For each STL/LDL, the source line that the disassembler names last before it.
    awk '/^\.text\..*:$/ { k = $0; sub(/^\.text\./, "", k); sub(/:$/, "", k) }
         /\/\/## File/ { l = $0; sub(/.*\/\/## File "/, "", l); sub(/", line /, ":", l); sub(/ .*/, "", l);
                         sub(/.*\/engine\//, "engine/", l) }
         / (STL|LDL)(\.[A-Z0-9]+)* / { op = ($0 ~ / STL/) ? "store" : "load"; c[k " " op " " l]++ }
         END { for (x in c) print c[x], x }' "$tmp/sass.txt" | sort -k2,2 -k4,4V |
      awk '{ printf "  spill %-5s x%d at %s in %s\n", $3, $1, $4, $2 }' | c++filt | sed -E 's/\(engine::custom::fused::.*//' | head -40
  fi
done
