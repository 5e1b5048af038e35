#!/usr/bin/env bash
# One device call for the SGEMM-class loader work: build, the general path's tests, A/B of the 8x8
# 128x64 tile and of 8-step chunks at large batches, the fused chain against the general path on
# the MLPs, batch-1 benches, and the class check against the --no-fuse oracle. Parts are ordered by
# what matters most, each under its own timeout, so a cut-off call still reports the first ones.
D=dev/gpu_general/device_run.sh
export BUILD=${BUILD:-$(pwd)/../../build-g32}
PARTS="build tests" FILTER="CustomGeneral*:CustomBackend*" TEST_LIMIT=40 bash $D || exit 1
PARTS=ab AB_TAG=-conv AB_MODELS=keras-cnn,cifar-vgg,vgg-mnist,resnet20,conv-bn-relu AB_BATCHES=1024,65536 \
  VARIANTS=general AB_LIMIT=40 bash $D
PARTS=ab AB_TAG=-mlp AB_MODELS=mlp-128,mlp-512-256 AB_BATCHES=1,1024,65536 VARIANTS=fused,general AB_LIMIT=15 bash $D
PARTS=bench MODELS=keras-cnn,concat-branches,mlp-512-256,mlp-128 BATCHES=1 bash $D
PARTS=accuracy ACC_MODELS="keras-cnn vgg-mnist concat-branches" bash $D
PARTS=ab AB_TAG=-s8 AB_MODELS=resnet20,conv-bn-relu AB_BATCHES=1024,65536 VARIANTS=general/s8 AB_LIMIT=15 bash $D
