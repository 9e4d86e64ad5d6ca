#!/usr/bin/env bash
# Builds what a lent GPU machine runs and packs it into one tarball of at most 24 MiB (the
# machine takes the working tree plus carried files up to 64 MiB, and has no network, no
# Debian -dev packages and no MPI). The build is a field build (TESSEL_WITH_SIMULATOR and
# TESSEL_WITH_GUI off: SimGrid, ns-3, Qt and ICU would triple it) for Hopper only (sm_90)
# and a portable CPU baseline (x86-64-v3: the lent machine's processor is not this one).
# The bundle holds tessel (tessel-field), tessel-rank and gpu_test (stripped), the shared libraries they
# need except glibc and the CUDA libraries (those are the GPU machine's: `run` finds them
# under the toolkit or in PyTorch's wheels), OpenMPI's runtime for ranks that share the
# GPU, gpu-check and its helpers, and the launcher `run`.
#
#   scripts/gpu-bundle.sh [--build-dir DIR] [--out FILE.tar.gz] [--no-build]
#   scripts/gpu-bundle.sh --from-build DIR ...   pack an existing build as it is (the CI
#                                                rehearsal: native CPU code, every CUDA arch)
# On the GPU machine:  tar xf tessel-gpu-bundle.tar.gz && tessel-gpu-bundle/gpu-check --out DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$root/build-gpu-bundle
out=$root/tessel-gpu-bundle.tar.gz
build=1
portable=1
limit_bytes=$((24 * 1024 * 1024))
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build_dir=$(realpath -m "$2"); shift 2 ;;
    --from-build) build_dir=$(realpath -m "$2"); portable=0; build=0; shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "gpu-bundle: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
say() { echo "gpu-bundle: $*" >&2; }
programs=(tessel-field tessel-rank gpu_test)

if [ "$build" = 1 ]; then
  "$root/scripts/install-deps.sh"
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    launcher=()
    command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    nvcc=nvcc
    command -v nvcc >/dev/null || nvcc=/usr/local/cuda/bin/nvcc
    say "configuring the field build in $build_dir"
    cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DTESSEL_CPU_ARCH=x86-64-v3 -DTESSEL_WITH_SIMULATOR=OFF -DTESSEL_WITH_GUI=OFF \
      -DCMAKE_SKIP_BUILD_RPATH=ON "${launcher[@]}" >&2
  fi
  say "building ${programs[*]} in $build_dir"
  cmake --build "$build_dir" -j "$(nproc)" --target "${programs[@]}" >&2
fi
for program in "${programs[@]}"; do
  [ -x "$build_dir/bin/$program" ] || { say "no $build_dir/bin/$program: build first (or drop --no-build)"; exit 1; }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
bundle=$stage/tessel-gpu-bundle
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/scripts" "$bundle/bench" "$bundle/openmpi"

# ---- programs (stripped: symbols are most of a test binary), scripts, the reference ----
for program in "${programs[@]}"; do
  carried=${program%-field}  # tessel-field is the bundle's tessel
  cp "$build_dir/bin/$program" "$bundle/bin/$carried"
  strip --strip-unneeded "$bundle/bin/$carried" 2>/dev/null || true
  # RUNPATHs name this machine's folders; the launcher's path is the one that must work.
  if command -v patchelf >/dev/null; then patchelf --remove-rpath "$bundle/bin/$carried"; fi
done
cp "$root"/scripts/{gpu-check.sh,gpu_check_steps.sh,gpu_check_tools.py,gpu_libraries.sh} "$bundle/scripts/"
cp "$root/bench/torch_reference.py" "$bundle/bench/"
mkdir -p "$bundle/plans"
cp "$root"/examples/cpu-suite/0[1-6]-*-small.json "$bundle/plans/"

# ---- OpenMPI's runtime, at its installed paths under openmpi/ ----
if dpkg -s openmpi-bin >/dev/null 2>&1; then
  dpkg -L openmpi-bin libopenmpi3 openmpi-common 2>/dev/null |
    grep -v -e '^/usr/share/doc' -e '^/usr/share/man' -e '^/usr/share/lintian' -e '/openmpi/include/' \
      -e '/pkgconfig/' -e '\.a$' -e '/mpi[fF]\|/mpic\|/ortecc\|/opalcc\|wrapper-data' |
    while read -r path; do
      if [ -f "$path" ] || [ -L "$path" ]; then
        mkdir -p "$bundle/openmpi$(dirname "$path")"
        cp -P --preserve=mode "$path" "$bundle/openmpi$path"
      fi
    done
  for tool in mpirun mpiexec; do
    [ -e "$bundle/openmpi/usr/bin/$tool.openmpi" ] && ln -sf "$tool.openmpi" "$bundle/openmpi/usr/bin/$tool"
  done
else
  say "openmpi-bin is not installed here: the bundle has no mpirun (multi-rank steps will not start)"
fi

# ---- shared libraries: the closure of every ELF file, minus glibc, CUDA and the driver ----
is_system_or_cuda() {
  case $(basename "$1") in
    ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*|linux-vdso*) return 0 ;;
    libcuda.so*|libnvidia-*|libcudart.so*|libcublas*.so*|libnvrtc*|libnvJitLink*|libnccl.so*|libcudnn*) return 0 ;;
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
      strip --strip-unneeded "$bundle/lib/$(basename "$library")" 2>/dev/null || true
      if command -v patchelf >/dev/null; then patchelf --remove-rpath "$bundle/lib/$(basename "$library")"; fi
      next="$next $bundle/lib/$(basename "$library")"
    done < <(LD_LIBRARY_PATH="$build_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$file" 2>/dev/null |
             awk '/=> \// {print $3}')
  done
  pending=$next
done
say "$(ls "$bundle/lib" | wc -l) shared libraries bundled"

# ---- what was built, and the launchers ----
{
  echo "tessel $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "built on $(hostname) $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "build: $build_dir ($([ "$portable" = 1 ] && echo "field build: sm_90, x86-64-v3" || echo "as configured there"))"
  echo "CUDA architectures: $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null)"
  echo "CPU baseline: $(sed -n 's/^TESSEL_CPU_ARCH:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null)"
  (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | tail -1 || true
} >"$bundle/BUILD_INFO"
cp "$root/scripts/gpu_bundle_run.sh" "$bundle/run"
cat >"$bundle/gpu-check" <<'EOF'
#!/usr/bin/env bash
# The one command for the GPU machine: gpu-check on this bundle (see scripts/gpu-check.sh).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/run" bash "$here/scripts/gpu-check.sh" --bundle "$here" "$@"
EOF
chmod +x "$bundle/run" "$bundle/gpu-check"

mkdir -p "$(dirname "$out")"
tar -C "$stage" -czf "$out.partial" tessel-gpu-bundle
mv "$out.partial" "$out"
size=$(stat -c %s "$out")
say "wrote $out ($((size / 1024)) KiB; limit $((limit_bytes / 1024)) KiB)"
if [ "$size" -gt "$limit_bytes" ]; then
  say "the bundle is over its limit: $size bytes > $limit_bytes (what is largest: $(tar -tvzf "$out" | sort -k3 -n | tail -3 | awk '{print $6 " " $3}' | tr '\n' ';'))"
  exit 1
fi
