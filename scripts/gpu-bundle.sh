#!/usr/bin/env bash
# Builds tessel here and packs what a GPU machine needs to run it unchanged into one
# tarball: that machine has the CUDA toolkit, CMake and Python but none of Debian's -dev
# packages (fmt, TBB, Qt, SQLite, Eigen ...) and no MPI, so it cannot build tessel
# itself. The bundle holds the binaries, every shared library `ldd` names that is neither
# glibc nor the CUDA toolkit or driver (those must be the GPU machine's own), OpenMPI's
# runtime (mpirun, its plugins, help and configuration files, copied from the packages
# installed here: dpkg -L openmpi-bin libopenmpi3 openmpi-common), the GPU test list,
# gpu-check and the PyTorch reference, and a launcher `run` that sets LD_LIBRARY_PATH,
# PATH and OPAL_* so everything resolves inside the bundle.
#
#   scripts/gpu-bundle.sh [--build-dir DIR] [--out FILE.tar.gz|FILE.tar] [--no-build]
# On the GPU machine:  tar xf tessel-gpu-bundle.tar.gz && tessel-gpu-bundle/gpu-check
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$root/build
out=$root/tessel-gpu-bundle.tar.gz
build=1
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build_dir=$(realpath -m "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "gpu-bundle: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
say() { echo "gpu-bundle: $*" >&2; }

if [ "$build" = 1 ]; then
  [ -f "$build_dir/CMakeCache.txt" ] || "$root/scripts/build.sh" "$build_dir"
  say "building into $build_dir"
  cmake --build "$build_dir" -j "$(nproc)" >&2
fi
[ -x "$build_dir/bin/tessel" ] || { say "no $build_dir/bin/tessel: build first (or drop --no-build)"; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
bundle=$stage/tessel-gpu-bundle
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/scripts" "$bundle/bench" "$bundle/openmpi"

# ---- binaries: the command, its helpers, every test and benchmark executable ----
for file in "$build_dir"/bin/*; do
  [ -f "$file" ] && [ -x "$file" ] && cp "$file" "$bundle/bin/"
done
cp "$root/scripts/gpu-check.sh" "$bundle/scripts/"
cp "$root/bench/torch_reference.py" "$bundle/bench/"

# ---- GPU tests: ctest's label `gpu`, as "executable gtest-filter" lines ----
: >"$bundle/gpu-tests.txt"
if command -v ctest >/dev/null; then
  ctest --test-dir "$build_dir" -L gpu --show-only=json-v1 2>/dev/null | python3 -c '
import json, os, sys
tests = json.load(sys.stdin).get("tests", [])
by_executable = {}
for test in tests:
    command = test.get("command") or []
    if not command:
        continue
    names = [a.split("=", 1)[1] for a in command[1:] if a.startswith("--gtest_filter=")]
    by_executable.setdefault(os.path.basename(command[0]), []).extend(names)
for executable, names in sorted(by_executable.items()):
    print(executable, ":".join(names) if names else "*")
' >"$bundle/gpu-tests.txt" || true
fi
say "$(wc -l <"$bundle/gpu-tests.txt") executables with GPU tests"

# ---- OpenMPI's runtime, at its installed paths under openmpi/ ----
if dpkg -s openmpi-bin >/dev/null 2>&1; then
  dpkg -L openmpi-bin libopenmpi3 openmpi-common 2>/dev/null |
    grep -v -e '^/usr/share/doc' -e '^/usr/share/man' -e '^/usr/share/lintian' |
    while read -r path; do
      if [ -f "$path" ] || [ -L "$path" ]; then
        mkdir -p "$bundle/openmpi$(dirname "$path")"
        cp -P --preserve=mode "$path" "$bundle/openmpi$path"
      fi
    done
  # Debian reaches mpirun through the alternatives system; the bundle names it directly.
  for tool in mpirun mpiexec; do
    [ -e "$bundle/openmpi/usr/bin/$tool.openmpi" ] && ln -sf "$tool.openmpi" "$bundle/openmpi/usr/bin/$tool"
  done
else
  say "openmpi-bin is not installed here: the bundle has no mpirun (multi-rank runs will not start)"
fi

# ---- shared libraries: the closure of every ELF file, minus glibc, CUDA and the driver ----
is_system_or_cuda() {
  case $(basename "$1") in
    ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*|linux-vdso*) return 0 ;;
    libcuda.so*|libnvidia-*|libcudart.so*|libcublas*.so*|libnvrtc*|libnvJitLink*) return 0 ;;
  esac
  case $1 in /usr/local/cuda*|/opt/cuda*) return 0 ;; esac
  return 1
}
declare -A copied=()
elf_files() { find "$bundle/bin" "$bundle/openmpi" -type f \( -perm -u+x -o -name '*.so*' \) 2>/dev/null; }
pending=$(elf_files)
while [ -n "$pending" ]; do
  next=""
  for file in $pending; do
    while read -r library; do
      [ -n "$library" ] && [ -z "${copied[$library]:-}" ] || continue
      copied[$library]=1
      is_system_or_cuda "$library" && continue
      cp -L "$library" "$bundle/lib/$(basename "$library")"
      next="$next $bundle/lib/$(basename "$library")"
    done < <(ldd "$file" 2>/dev/null | awk '/=> \// {print $3}')
  done
  pending=$next
done
say "$(ls "$bundle/lib" | wc -l) shared libraries bundled"

# ---- what was built, and the launcher ----
{
  echo "tessel $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "built on $(hostname) $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "CUDA compiler: $(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null)"
  /usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1 || true
} >"$bundle/BUILD_INFO"
cat >"$bundle/run" <<'EOF'
#!/usr/bin/env bash
# tessel GPU bundle launcher: `run PROGRAM [ARGS]` runs bin/PROGRAM (or any command)
# with the bundle's libraries, OpenMPI and the CUDA toolkit's libraries on the paths.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cuda_lib=""
for dir in "${CUDA_HOME:-}/lib64" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$dir" ] && cuda_lib=$dir && break
done
mpi_lib=$here/openmpi/usr/lib/x86_64-linux-gnu/openmpi/lib
export LD_LIBRARY_PATH="$here/lib:$mpi_lib${cuda_lib:+:$cuda_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$here/bin:$here/openmpi/usr/bin${PATH:+:$PATH}"
export OPAL_PREFIX=$here/openmpi/usr
export OPAL_LIBDIR=$mpi_lib OPAL_PKGLIBDIR=$mpi_lib/openmpi3 OPAL_SYSCONFDIR=$here/openmpi/etc/openmpi
export OPAL_DATADIR=$here/openmpi/usr/share OPAL_PKGDATADIR=$here/openmpi/usr/share/openmpi
export TESSEL_BUNDLE=$here
[ $# -gt 0 ] || { echo "usage: run PROGRAM [ARGS]  (programs: $(ls "$here/bin" | tr '\n' ' '))" >&2; exit 2; }
program=$1
shift
[ -x "$here/bin/$program" ] && program=$here/bin/$program
exec "$program" "$@"
EOF
cat >"$bundle/gpu-check" <<'EOF'
#!/usr/bin/env bash
# The one command for the GPU machine: gpu-check on this bundle (see scripts/gpu-check.sh).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/run" bash "$here/scripts/gpu-check.sh" --bundle "$here" "$@"
EOF
chmod +x "$bundle/run" "$bundle/gpu-check"

mkdir -p "$(dirname "$out")"
case $out in
  *.tar.gz|*.tgz) tar -C "$stage" -czf "$out" tessel-gpu-bundle ;;
  *) tar -C "$stage" -cf "$out" tessel-gpu-bundle ;;
esac
say "wrote $out ($(du -h "$out" | cut -f1))"
