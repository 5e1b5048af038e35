#!/bin/sh
# Runs every zoo conv model's test set through two engine builds on the cpu backend, one thread,
# and compares the dumped outputs byte for byte (the conv kernels must not change a bit).
#   dev/cpu/conv/compare_dumps.sh OLD_ENGINE NEW_ENGINE [BATCH] [ZOO=/work/zoo]
set -e
old=$1 new=$2 batch=${3:-256} zoo=${4:-/work/zoo}
mnist=/work/shared/data/mnist/t10k-images-idx3-ubyte.gz
tmp=$(mktemp -d)
for m in cifar-vgg resnet20 vgg-mnist keras-cnn conv-bn-relu concat-branches lenet5-relu-pad2 lenet5-tanh-avgpool; do
  if [ -f "$zoo/$m/model-float.json" ]; then model=$zoo/$m/model-float.json data=$zoo/$m/test-images-float.idx
  else model=$zoo/$m/model.json data=$mnist; fi
  for e in old new; do
    eval bin=\$$e
    "$bin" -q run "$model" "$data" --backend cpu --threads 1 --batch "$batch" --dump-outputs "$tmp/$m.$e.npy" >/dev/null
  done
  if cmp -s "$tmp/$m.old.npy" "$tmp/$m.new.npy"; then echo "$m batch $batch: identical ($(stat -c %s "$tmp/$m.new.npy") bytes)"
  else echo "$m batch $batch: DIFFERENT"; fi
done
rm -rf "$tmp"
