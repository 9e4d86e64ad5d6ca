#!/usr/bin/env bash
# Scripts.DebCheckSaysWhyItCannotRun: scripts/check_deb.sh, when it cannot run (no
# package where it is told to look, an unknown argument, no debootstrap, not root),
# prints one line saying why, exits 2 and leaves no temporary folder behind. The check
# itself needs root, network and minutes: run by hand (docs/INSTALL.md).
# Usage: check_deb_test.sh SCRIPT
set -u
script=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$work/tmp"
touch "$work/tessel_0.0.0-1_amd64.deb"
check() {  # check LABEL EXPECTED-TEXT ARGS...
  local label=$1 expected=$2
  shift 2
  local output status
  output=$(TMPDIR="$work/tmp" DEBOOTSTRAP=/nonexistent/debootstrap bash "$script" "$@" 2>&1)
  status=$?
  [ "$status" -eq 2 ] || fail "$label: exit status $status, not 2"
  [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] || fail "$label: more than one line: $output"
  [[ $output == "check_deb: "*"$expected"* ]] || fail "$label: unexpected line: $output"
  [ -z "$(ls -A "$work/tmp")" ] || fail "$label: left files: $(ls -A "$work/tmp")"
  echo "ok: $label: $output (status $status)"
}
check "unknown argument" "unknown argument --fast" --fast
check "missing package" "cannot run: no package at $work/missing.deb" "$work/missing.deb"
if [ "$(id -u)" -eq 0 ]; then
  check "no debootstrap" "cannot run: no debootstrap at /nonexistent/debootstrap" "$work/tessel_0.0.0-1_amd64.deb"
else
  check "not root" "cannot run: needs root" "$work/tessel_0.0.0-1_amd64.deb"
fi
