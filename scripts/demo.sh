#!/usr/bin/env bash
# The demo: what tessel does today, on the embedded presets. Grows with each capability.
set -euo pipefail
build_dir=${1:-build}
tessel="$build_dir/bin/tessel"
run() { printf '\n$ tessel %s\n' "$*"; "$tessel" "$@"; }
run plan --model gpt2-1.5b --cluster dgx-h100 --nodes 4 --global-batch 512 --top 5
run plan --model gpt3-175b --cluster dgx-a100 --nodes 128 --global-batch 1536 --top 5
