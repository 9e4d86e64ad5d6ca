#!/usr/bin/env bash
# CI's build without the CUDA backend (TESSEL_WITH_CUDA=OFF: what a machine without the
# toolkit builds), in a folder of its own, tested where it differs from the build with
# it: the memory a CPU rank holds (the memory-fidelity tests, the runtime `tessel profile`
# measures, which counts the CUDA libraries only where they are linked) and the CUDA
# backend's absence (profile --backend cuda refuses). Every other source compiles to the
# same objects (the tests find tessel beside them at run time), so with ccache
# (scripts/packages.txt) after `make test` the few sources that differ, the links and
# these tests cost the time.
# Usage: scripts/test_without_cuda.sh [--build-dir build-nocuda]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build_dir=build-nocuda
[ "${1:-}" = "--build-dir" ] && build_dir=$2
scripts/install-deps.sh
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DTESSEL_WITH_CUDA=OFF \
    -DTESSEL_BUILD_BENCH=OFF "${launcher[@]}" | grep "tessel:" || true
fi
cmake --build "$build_dir" -j "$(nproc)" --target tessel tessel-rank tessel-mpi-bench cli_test
cd "$build_dir"
ctest --output-on-failure -j "$(nproc)" \
  -R '^(MemoryFidelity\.|CpuSuite/MemoryFidelity\.|Cli\.Profile(MeasuresShowsExportsAndImports|CudaWithoutADeviceSaysSoAndWritesNothing)$)'
