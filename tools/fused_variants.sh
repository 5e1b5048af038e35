#!/usr/bin/env bash
# usage: variants.sh OUTFILE BATCHES  -- engine bench custom under env combos, one line per result
B=build-gpu; out=$1; batches=$2
for v in "v5:" "rows4:ENGINE_FUSED_ROWS=4" "noinline:ENGINE_FUSED_INLINE_TANH=0" "v4like:ENGINE_FUSED_ROWS=4 ENGINE_FUSED_INLINE_TANH=0"; do
  name=${v%%:*}; envs=${v#*:}
  env $envs $B/engine -q bench models/lenet5.json --backend custom --batch $batches --cuda-graph --no-data-transfers \
    --duration 0.5 --repetitions 3 --json /tmp/var-$name.json >/dev/null 2>&1 || echo "bench $name failed"
  python3 -c "
import json,sys
for r in json.load(open('/tmp/var-$name.json'))['results']:
  if r['mode']=='graph': print('$name', r['batch'], '%.4g'%r['images_per_s'], '%.2f us'%(1e6*r['batch']/r['images_per_s']))
" | tee -a $out
done
