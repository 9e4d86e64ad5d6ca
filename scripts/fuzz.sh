#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets (tests/fuzz, clang, ASan + UBSan) into their own
# folder and runs each for a bounded time on a seed corpus from examples/, configs/,
# profiles/data/, corpus/, tests/interop/fixtures/ and real/, and tests/fuzz/seeds/. The corpora
# grow in the build folder, never in the repository. A finding (crash, leak, sanitizer
# report, an exception other than tessel::Error) stops that target with the input saved
# under BUILD/findings/; this script then lists them and exits 1. Reproduce one:
# BUILD/bin/fuzz_plan BUILD/findings/crash-...; then make it a regression test in the
# normal suites (docs/RELIABILITY.md).
# Usage: scripts/fuzz.sh [--build-dir build-fuzz] [--seconds 20 | --runs N --seed S] [target ...]
# --runs N --seed S: N inputs per target from a fixed seed instead of a time budget, the
# same inputs on every machine (CI uses this, so that a red CI is a finding anyone can
# reproduce and not a roll of the dice).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build_dir=build-fuzz seconds=20 runs=0 seed=0 targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    -*) echo "fuzz: unknown option $1 (allowed: --build-dir DIR, --seconds N, --runs N, --seed S)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_plan fuzz_model fuzz_cluster fuzz_hf_config fuzz_checkpoint fuzz_profile_import
  fuzz_megatron fuzz_nemo fuzz_deepspeed fuzz_torchtitan fuzz_safetensors fuzz_tokens_llmc fuzz_tokens_nanogpt
  fuzz_tokens_megatron fuzz_corpus_rows)
command -v clang++ >/dev/null || { echo "fuzz: no clang++ (scripts/packages.txt lists clang; run scripts/install-deps.sh as root)" >&2; exit 2; }

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DTESSEL_FUZZ=ON "${launcher[@]}" | grep "tessel:" || true
fi
cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]}"

seeds_of() {  # the seed files of one target
  case "$1" in
    fuzz_plan) ls examples/*.json examples/simulator/*.json ;;
    fuzz_model) ls configs/models/*.json ;;
    fuzz_cluster) ls configs/clusters/*.json ;;
    fuzz_hf_config) ls tests/fuzz/seeds/hf_config/*.json ;;
    fuzz_checkpoint) ls tests/fuzz/seeds/checkpoint/*.json ;;
    fuzz_profile_import) ls profiles/data/*.json ;;
    fuzz_megatron) ls tests/interop/fixtures/megatron_*.sh tests/interop/real/megatron/*.sh ;;
    fuzz_nemo) ls tests/interop/fixtures/nemo_*.yaml tests/interop/real/nemo/*.yaml ;;
    fuzz_deepspeed) ls tests/interop/fixtures/deepspeed_*.json tests/interop/real/deepspeed/*.json ;;
    fuzz_torchtitan) ls tests/interop/real/torchtitan/* ;;
    fuzz_safetensors) ls tests/fuzz/seeds/safetensors/* ;;
    fuzz_tokens_*) ls "tests/fuzz/seeds/${1#fuzz_}"/* ;;
    fuzz_corpus_rows) ls corpus/published/*.json corpus/held_out/*.json ;;
  esac
}
findings="$build_dir/findings"
mkdir -p "$findings"
failed=()
for target in "${targets[@]}"; do
  corpus="$build_dir/corpus/$target"
  mkdir -p "$corpus"
  seeds_of "$target" | xargs -r cp -t "$corpus"
  budget=(-max_total_time="$seconds")
  [ "$runs" -gt 0 ] && budget=(-runs="$runs" -seed="$seed")
  echo "fuzz: $target, ${budget[*]} (corpus $corpus)"
  if ! "$build_dir/bin/$target" "$corpus" "${budget[@]}" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$findings/$target-" -print_final_stats=1 >"$build_dir/$target.log" 2>&1; then
    failed+=("$target")
    echo "fuzz: $target FOUND A PROBLEM: $(grep -m1 -E 'ERROR|SUMMARY|deadly|terminate' "$build_dir/$target.log" || tail -1 "$build_dir/$target.log")"
  else
    echo "fuzz: $target clean: $(grep -m1 'stat::number_of_executed_units' "$build_dir/$target.log" | awk '{print $2}') runs"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]}; inputs under $findings/, logs $build_dir/<target>.log"
  exit 1
fi
if [ "$runs" -gt 0 ]; then
  echo "fuzz: all ${#targets[@]} target(s) clean for $runs inputs each (seed $seed)"
else
  echo "fuzz: all ${#targets[@]} target(s) clean for ${seconds} s each"
fi
