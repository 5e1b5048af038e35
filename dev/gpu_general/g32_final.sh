#!/usr/bin/env bash
# The closing device call: build, the general path's and the custom backend's tests, then
# bench_zoo (custom, cudnn and PyTorch in the same call) on the conv models below 1.0x before.
D=dev/gpu_general/device_run.sh
export BUILD=${BUILD:-$(pwd)/../../build-g32}
PARTS="build tests" FILTER="CustomGeneral*:CustomBackend*" TEST_LIMIT=30 bash $D || exit 1
PARTS=zoo ZOO_MODELS=keras-cnn,cifar-vgg,vgg-mnist,resnet20,conv-bn-relu,mlp-512-256 ZOO_LIMIT=${ZOO_LIMIT:-80} bash $D
