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
mkdir "$work/tmp"
touch "$work/tessel_0.0.0-1_amd64.deb"
source "$(dirname "$0")/one_line_refusal.sh"
prefix=check_deb scratch="$work/tmp" want_status=2
refuse_check "unknown argument" "unknown argument --fast" --fast
refuse_check "missing package" "cannot run: no package at $work/missing.deb" "$work/missing.deb"
if [ "$(id -u)" -eq 0 ]; then
  refuse_check "no debootstrap" "cannot run: no debootstrap at /nonexistent/debootstrap" "$work/tessel_0.0.0-1_amd64.deb"
else
  refuse_check "not root" "cannot run: needs root" "$work/tessel_0.0.0-1_amd64.deb"
fi
