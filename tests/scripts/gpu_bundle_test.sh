#!/usr/bin/env bash
# Scripts.GpuBundleRunsFromATemporaryFolder: the bundle of this build (uncompressed, no
# rebuild) unpacks elsewhere and its launcher runs `tessel --help` and a one-rank mpirun
# from there, with every library resolved. Temporary folders are removed at the end.
set -u
script=$(realpath "$1")
build_dir=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
bash "$script" --no-build --build-dir "$build_dir" --out "$work/bundle.tar" || fail "gpu-bundle.sh failed"
mkdir "$work/unpacked"
tar -C "$work/unpacked" -xf "$work/bundle.tar" || fail "cannot unpack"
rm "$work/bundle.tar"
bundle=$work/unpacked/tessel-gpu-bundle
cd "$work/unpacked" || exit 1
help=$("$bundle/run" tessel --help 2>&1) || fail "run tessel --help: $help"
[[ $help == *"Usage: tessel"* ]] || fail "no usage line: $help"
missing=$("$bundle/run" bash -c 'ldd "$TESSEL_BUNDLE/bin/tessel"' | grep "not found")
[ -z "$missing" ] || fail "unresolved libraries: $missing"
if [ -x "$bundle/openmpi/usr/bin/mpirun" ]; then
  ranks=$("$bundle/run" mpirun --allow-run-as-root -np 1 echo one-rank 2>&1) || fail "bundled mpirun: $ranks"
  [[ $ranks == *one-rank* ]] || fail "bundled mpirun printed: $ranks"
fi
[ -x "$bundle/gpu-check" ] || fail "no gpu-check launcher"
echo "ok: bundle unpacks and runs tessel --help from $work/unpacked"
