#!/usr/bin/env bash
# Follows README.md's "Getting started" literally on a fresh Debian 12, to prove that its
# prerequisites are the whole list: debootstraps a minimal bookworm into a temporary
# folder, installs only what the README names (make, git) there, clones this repository
# into it, and runs scripts/install-deps.sh and CMake's configure step inside the chroot
# (--full: `make test` instead, which builds everything: an hour or more on 2 cores).
# A chroot rather than a container so that it needs nothing but Debian's own tools.
#
# Needs root, debootstrap (installed here when missing) and network to Debian's archive
# (debootstrap's default mirror, or $DEBIAN_MIRROR). It is not part of `make test`: run it
# by hand, or periodically in CI, after changing scripts/packages.txt, scripts/build.sh,
# the top-level CMakeLists.txt's find_package calls or README.md's "Getting started".
# When it cannot run it says why in one line and exits 2; a failed check exits 1.
#
# Usage: scripts/check_fresh_debian.sh [--full] [--keep]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
full=0 keep=0
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    --keep) keep=1 ;;
    *) echo "check_fresh_debian: unknown argument $arg (allowed: --full, --keep)" >&2; exit 2 ;;
  esac
done
cannot_run() { echo "check_fresh_debian: cannot run: $*" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || cannot_run "needs root (debootstrap and chroot); run it as root"
debootstrap=${DEBOOTSTRAP:-debootstrap}
if ! command -v "$debootstrap" >/dev/null && [ -z "${DEBOOTSTRAP:-}" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
    cannot_run "debootstrap is missing and apt-get could not install it"
fi
command -v "$debootstrap" >/dev/null || cannot_run "no debootstrap at $debootstrap"
free_kib=$(df -Pk "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $4}')
[ "${free_kib:-0}" -ge $((6 * 1024 * 1024)) ] || cannot_run "needs 6 GiB free under ${TMPDIR:-/tmp}"

root=$(mktemp -d "${TMPDIR:-/tmp}/tessel-fresh-debian.XXXXXX")
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  if [ "$keep" -eq 1 ]; then echo "check_fresh_debian: kept $root"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
log="$root.log"

echo "check_fresh_debian: debootstrap bookworm (minbase) into $root (log: $log)"
mirror=()
[ -n "${DEBIAN_MIRROR:-}" ] && mirror=("$DEBIAN_MIRROR")
"$debootstrap" --variant=minbase bookworm "$root" "${mirror[@]}" >"$log" 2>&1 ||
  cannot_run "debootstrap failed (no network to Debian's archive?): $(tail -1 "$log")"
for fs in proc sys dev dev/pts; do
  mount --bind "/$fs" "$root/$fs" && mounted+=("$root/$fs")
done
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
in_chroot() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  DEBIAN_FRONTEND=noninteractive bash -c "$1"; }

# What a fresh Debian lacks, the README must name: make and git are absent before.
for tool in make git; do
  if in_chroot "command -v $tool" >/dev/null; then
    echo "check_fresh_debian: note: a fresh bookworm already has $tool"
  fi
done
echo "check_fresh_debian: README step 1: apt-get install make git"
in_chroot "apt-get update -qq && apt-get install -y -qq make git" >>"$log" 2>&1 ||
  { echo "check_fresh_debian: FAILED: apt-get install make git (see $log)" >&2; exit 1; }

echo "check_fresh_debian: README step 2: clone this repository"
git clone -q "$repo" "$root/root/tessel" ||
  { echo "check_fresh_debian: FAILED: git clone of $repo" >&2; exit 1; }

if [ "$full" -eq 1 ]; then
  step="make test"
else
  step="scripts/install-deps.sh && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release"
fi
echo "check_fresh_debian: README step 3: $step"
if ! in_chroot "cd /root/tessel && $step" >>"$log" 2>&1; then
  echo "check_fresh_debian: FAILED: $step in a fresh Debian 12: $(tail -1 "$log") (see $log)" >&2
  exit 1
fi
echo "check_fresh_debian: OK: the README's prerequisites suffice on a fresh Debian 12 ($step)"
[ "$keep" -eq 1 ] || rm -f "$log"  # kept only when something failed, or with --keep
