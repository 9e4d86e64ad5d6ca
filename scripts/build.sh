#!/usr/bin/env bash
# Installs what is missing, configures (once) and builds tessel into the given folder.
# TESSEL_CMAKE_ARGS adds configure arguments (CI: one CUDA architecture, since no GPU runs
# its kernels and the device code has no per-architecture branches).
set -euo pipefail
build_dir=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# The CUDA toolkit lives outside PATH on many machines; name its compiler when it is there.
cuda=()
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" "${cuda[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
    ${TESSEL_CMAKE_ARGS:-} | grep "tessel:" || true
fi
cmake --build "$build_dir" -j "$(nproc)"
