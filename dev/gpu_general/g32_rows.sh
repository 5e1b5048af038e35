#!/usr/bin/env bash
# One device call for the dense 16-byte row copies: build, the general path's tests (the row copies
# against the 4-byte loader's bits on every tile), then general_ab of the two loaders on the MLPs
# and keras-cnn (dense1 K = 9,216) at batch 1, 1,024 and 65,536.
D=dev/gpu_general/device_run.sh
export BUILD=${BUILD:-$(pwd)/../../build-g32}
PARTS="build tests" FILTER="CustomGeneralChunks*:CustomGeneral.Dense*:CustomGeneral.EveryTile*" TEST_LIMIT=40 bash $D || exit 1
PARTS=ab AB_BATCHES=1,1024,65536 VARIANTS=general,general/r AB_MODELS=mlp-512-256,mlp-128,keras-cnn AB_LIMIT=40 bash $D
