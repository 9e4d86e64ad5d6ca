#!/usr/bin/env bash
# Scripts.InstallCheckSaysWhyItCannotRun: scripts/check_install.sh, given no build folder,
# one that does not exist or one that is not configured, prints one line saying why,
# exits 2, and neither moves the source tree nor leaves a temporary folder behind. (The
# check itself moves the tree, which ctest cannot allow: .ci/run runs it after make test.)
# Usage: check_install_test.sh SCRIPT
set -u
script=$(realpath "$1")
repo=$(cd "$(dirname "$script")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$work/tmp" "$work/not-a-build"
check() {  # check LABEL EXPECTED-TEXT ARGS...
  local label=$1 expected=$2
  shift 2
  local output status
  output=$(TMPDIR="$work/tmp" bash "$script" "$@" 2>&1)
  status=$?
  [ "$status" -eq 2 ] || fail "$label: exit status $status, not 2"
  [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] || fail "$label: more than one line: $output"
  [[ $output == "check_install: cannot run: "*"$expected"* ]] || fail "$label: unexpected line: $output"
  [ -z "$(ls -A "$work/tmp")" ] || fail "$label: left files: $(ls -A "$work/tmp")"
  [ -f "$repo/CMakeLists.txt" ] || fail "$label: the source tree is not where it was"
  echo "ok: $label: $output"
}
check "no argument" "usage: scripts/check_install.sh BUILD_DIR"
check "missing folder" "no build folder $work/missing" "$work/missing"
check "not configured" "is not a configured build folder" "$work/not-a-build"
