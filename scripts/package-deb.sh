#!/usr/bin/env bash
# Builds the Debian package of tessel (`make package`): a CPU-only build in a folder of
# its own (default build-package), tests and benchmarks off, then `cpack -G DEB` there.
# CPU-only because the CUDA backend links NVIDIA's cudart, cuBLASLt and NCCL, which no
# Debian package provides, so apt could not resolve them (docs/INSTALL.md: GPU users
# build from source). The CPU kernels are built for a baseline ISA rather than for this
# machine (-march=native would die with SIGILL on an older CPU): x86-64-v2 on amd64, the
# compiler's default elsewhere. Prints the package's path and size last.
#
# Usage: scripts/package-deb.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${1:-build-package}
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
cd "$root"
scripts/install-deps.sh
command -v dpkg-shlibdeps >/dev/null || {
  echo "package-deb: dpkg-shlibdeps is missing (Debian's dpkg-dev); install it: apt-get install dpkg-dev" >&2
  exit 2
}
arch=""
[ "$(dpkg --print-architecture)" = amd64 ] && arch=x86-64-v2
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build_dir" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTESSEL_WITH_CUDA=OFF -DTESSEL_BUILD_TESTS=OFF -DTESSEL_BUILD_BENCH=OFF "-DTESSEL_CPU_ARCH=$arch" |
  grep "tessel:" || true
cmake --build "$build_dir" -j "$(nproc)" --target tessel tessel-rank tessel-mpi-bench
rm -f "$build_dir"/tessel_*.deb
(cd "$build_dir" && cpack -G DEB >cpack.log 2>&1) || {
  echo "package-deb: cpack failed: $(grep -m1 -i 'error' "$build_dir/cpack.log" || tail -1 "$build_dir/cpack.log") (see $build_dir/cpack.log)" >&2
  exit 1
}
deb=$(ls "$build_dir"/tessel_*.deb)
echo "package-deb: $deb ($(du -h "$deb" | cut -f1))"
echo "package-deb: depends: $(dpkg-deb -f "$deb" Depends)"
