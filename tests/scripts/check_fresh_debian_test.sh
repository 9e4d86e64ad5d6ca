#!/usr/bin/env bash
# Scripts.FreshDebianCheckSaysWhyItCannotRun: scripts/check_fresh_debian.sh, when it
# cannot run (here: no debootstrap where it is told to look, or an unknown argument),
# prints one line saying why, exits non-zero and leaves no temporary folder behind.
# (The check itself needs root and network: docs/RELIABILITY.md says when to run it.)
set -u
script=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/one_line_refusal.sh"
prefix=check_fresh_debian scratch="$work"
if [ "$(id -u)" -eq 0 ]; then
  refuse_check "no debootstrap" "cannot run: no debootstrap at /nonexistent/debootstrap"
else
  refuse_check "not root" "cannot run: needs root"
fi
refuse_check "unknown argument" "unknown argument --fast" --fast
