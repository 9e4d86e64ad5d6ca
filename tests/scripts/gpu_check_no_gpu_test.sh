#!/usr/bin/env bash
# Scripts.GpuCheckSaysNoGpuAndExitsNonZero: without a GPU (no nvidia-smi, or one that
# lists no device) gpu-check prints exactly one line "gpu-check: no GPU: <why>", exits
# non-zero and writes nothing. Run from a temporary folder, removed at the end.
set -u
script=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

check() {  # check LABEL [ENV=VALUE]
  local label=$1
  shift
  local output status
  output=$(env "$@" bash "$script" 2>&1)
  status=$?
  [ "$status" -ne 0 ] || fail "$label: exit status 0"
  [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] || fail "$label: more than one line: $output"
  [[ $output == "gpu-check: no GPU: "* ]] || fail "$label: unexpected line: $output"
  [ -z "$(ls -A "$work" | grep -v '^fake-smi$')" ] || fail "$label: wrote files: $(ls -A "$work")"
  echo "ok: $label: $output (status $status)"
}

check "no nvidia-smi" GPU_CHECK_NVIDIA_SMI=/nonexistent/nvidia-smi
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' >"$work/fake-smi"
chmod +x "$work/fake-smi"
check "nvidia-smi without devices" GPU_CHECK_NVIDIA_SMI="$work/fake-smi"
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then check "this machine" PATH="$PATH"; fi
