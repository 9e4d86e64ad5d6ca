#!/usr/bin/env bash
# Scripts.FreshDebianCheckSaysWhyItCannotRun: scripts/check_fresh_debian.sh, when it
# cannot run (here: no debootstrap where it is told to look, or an unknown argument),
# prints one line saying why, exits non-zero and leaves no temporary folder behind.
# (The check itself needs root and network: docs/RELIABILITY.md says when to run it.)
set -u
script=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
check() {  # check LABEL EXPECTED-TEXT ARGS...
  local label=$1 expected=$2
  shift 2
  local output status
  output=$(TMPDIR="$work" DEBOOTSTRAP=/nonexistent/debootstrap bash "$script" "$@" 2>&1)
  status=$?
  [ "$status" -ne 0 ] || fail "$label: exit status 0"
  [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] || fail "$label: more than one line: $output"
  [[ $output == "check_fresh_debian: "*"$expected"* ]] || fail "$label: unexpected line: $output"
  [ -z "$(ls -A "$work")" ] || fail "$label: left files: $(ls -A "$work")"
  echo "ok: $label: $output (status $status)"
}
if [ "$(id -u)" -eq 0 ]; then
  check "no debootstrap" "cannot run: no debootstrap at /nonexistent/debootstrap"
else
  check "not root" "cannot run: needs root"
fi
check "unknown argument" "unknown argument --fast" --fast
