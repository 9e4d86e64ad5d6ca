#!/usr/bin/env bash
# Proves that the Debian package (scripts/package-deb.sh) installs on a fresh Debian 12
# with apt resolving its dependencies, and that the installed tessel plans and trains
# there: debootstraps a minimal bookworm into a temporary folder, copies the .deb in,
# runs `apt-get install -y ./tessel_*.deb` inside it, then `tessel plan` and a 2-step
# `tessel run` of the shipped example (as root: tessel passes mpirun --allow-run-as-root).
# Prints the package's size, the install time, the plan's best row and the run's losses.
# A chroot rather than a container so that it needs nothing but Debian's own tools
# (like scripts/check_fresh_debian.sh). The archive is the one this machine's apt uses,
# read from /etc/apt/sources.list* when it runs ($DEBIAN_MIRROR overrides it).
#
# Needs root, debootstrap and network to Debian's archive; takes minutes, so it is not
# part of CI: run it after changing cmake/Package.cmake or what the binaries link.
# When it cannot run it says why in one line and exits 2; a failed check exits 1.
#
# Usage: scripts/check_deb.sh [DEB] [--keep]   (DEB default: build-package/tessel_*.deb)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
deb="" keep=0
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    -*) echo "check_deb: unknown argument $arg (allowed: DEB, --keep)" >&2; exit 2 ;;
    *) deb=$arg ;;
  esac
done
cannot_run() { echo "check_deb: cannot run: $*" >&2; exit 2; }

if [ -z "$deb" ]; then
  deb=$(ls "$repo"/build-package/tessel_*.deb 2>/dev/null | head -1) ||
    true
  [ -n "$deb" ] || cannot_run "no package in build-package/; build it first: make package"
fi
[ -f "$deb" ] || cannot_run "no package at $deb"
[[ $(basename "$deb") == tessel_*.deb ]] || cannot_run "$deb is not named tessel_*.deb"
[ "$(id -u)" -eq 0 ] || cannot_run "needs root (debootstrap and chroot); run it as root"
debootstrap=${DEBOOTSTRAP:-debootstrap}
command -v "$debootstrap" >/dev/null || cannot_run "no debootstrap at $debootstrap (apt-get install debootstrap)"
free_kib=$(df -Pk "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $4}')
[ "${free_kib:-0}" -ge $((3 * 1024 * 1024)) ] || cannot_run "needs 3 GiB free under ${TMPDIR:-/tmp}"

# This machine's Debian archive: the first URI of a "bookworm" suite, in either the
# one-line format (deb URI SUITE ...) or deb822 (URIs: / Suites:). Empty: debootstrap's own.
apt_mirror() {
  local file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$file" ] && awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' "$file"
  done
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] && awk 'tolower($1) == "uris:" && $2 !~ /security/ {print $2; exit}' "$file"
  done
}
mirror=${DEBIAN_MIRROR:-$(apt_mirror | head -1)}

root=$(mktemp -d "${TMPDIR:-/tmp}/tessel-deb-check.XXXXXX")
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  if [ "$keep" -eq 1 ]; then echo "check_deb: kept $root"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
log="$root.log"
fail() { echo "check_deb: FAILED: $* (see $log)" >&2; exit 1; }

echo "check_deb: package $(basename "$deb"): $(du -h "$deb" | cut -f1) ($(stat -c %s "$deb") bytes)"
echo "check_deb: debootstrap bookworm (minbase) from ${mirror:-the default archive of debootstrap} into $root (log: $log)"
start_s=$(date +%s)
"$debootstrap" --variant=minbase bookworm "$root" ${mirror:+"$mirror"} >"$log" 2>&1 ||
  cannot_run "debootstrap failed (no network to Debian's archive?): $(tail -1 "$log")"
echo "check_deb: debootstrap took $(($(date +%s) - start_s)) s"
for fs in proc sys dev dev/pts; do
  mount --bind "/$fs" "$root/$fs" && mounted+=("$root/$fs")
done
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# No service may start inside the chroot (openssh-client's and others' maintainer scripts).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
cp "$deb" "$root/tmp/"
in_chroot() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  DEBIAN_FRONTEND=noninteractive bash -c "$1"; }

in_chroot "command -v tessel" >/dev/null 2>&1 && fail "a fresh bookworm has a tessel already"
start_s=$(date +%s)
in_chroot "apt-get update -qq && apt-get install -y -q /tmp/$(basename "$deb")" >>"$log" 2>&1 ||
  fail "apt-get install ./$(basename "$deb") in a fresh Debian 12: $(tail -1 "$log")"
installed=$(grep -m1 -E '^[0-9]+ upgraded, [0-9]+ newly installed' "$log" || true)
echo "check_deb: apt-get install ./$(basename "$deb"): $(($(date +%s) - start_s)) s ($installed)"

in_chroot "cd /tmp && tessel plan --model gpt2-124m --cluster dgx-a100 --nodes 1 --global-batch 8" >"$root/plan.out" 2>&1 ||
  fail "tessel plan in the chroot: $(tail -1 "$root/plan.out")"
best=$(grep -m1 -E '^ +1 ' "$root/plan.out") || fail "tessel plan printed no plan 1: $(head -1 "$root/plan.out")"
echo "check_deb: $(head -1 "$root/plan.out")"
echo "check_deb: plan 1: $best"

in_chroot "cd /tmp && tessel run --plan /usr/share/tessel/examples/local-cpu-gpt-small.json --steps 2 --db /tmp/runs.db" \
  >"$root/run.out" 2>&1 || fail "tessel run in the chroot: $(tail -1 "$root/run.out")"
grep -q '^step 2 loss' "$root/run.out" || fail "tessel run printed no step 2: $(tail -1 "$root/run.out")"
sed -n -e 's/^/check_deb: /' -e '/^check_deb: \(run\|step\)/p' "$root/run.out"
echo "check_deb: OK: the package installs on a fresh Debian 12 with apt resolving its dependencies, and tessel plans and runs there"
[ "$keep" -eq 1 ] || rm -f "$log"
