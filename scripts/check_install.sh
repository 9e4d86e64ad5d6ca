#!/usr/bin/env bash
# CI's install check (.ci/run, after `make test`): installs a built tree into a temporary
# prefix, moves the source tree (and the build tree, when it lies outside) out of the way,
# and runs the installed `tessel plan` and a 2-step `tessel run` from a temporary working
# directory with a temporary HOME. That proves the installed command needs nothing from
# either tree: presets and profiles are embedded, the rank program is found next to the
# binary, shared libraries resolve. It moves the trees rather than hiding them because a
# compile-time path would still resolve otherwise; ctest cannot do this (it runs inside
# the tree), hence a script. The trees are put back by a trap on every exit path (also
# Ctrl-C); only SIGKILL can leave them moved, and then the path printed first says where.
# No rebuild: BUILD_DIR must be built already. About 5 s.
#
# Usage: scripts/check_install.sh BUILD_DIR
# Exit status: 0 passed, 1 a check failed, 2 cannot run (one line says why).
set -euo pipefail
cannot_run() { echo "check_install: cannot run: $*" >&2; exit 2; }
[ $# -eq 1 ] || cannot_run "usage: scripts/check_install.sh BUILD_DIR"
repo=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$1" ] || cannot_run "no build folder $1"
build=$(cd "$1" && pwd)
[ -f "$build/cmake_install.cmake" ] || cannot_run "$build is not a configured build folder (no cmake_install.cmake)"
for program in tessel tessel-rank tessel-mpi-bench; do
  [ -x "$build/bin/$program" ] || cannot_run "$build/bin/$program is not built (build first: make test)"
done

prefix=$(mktemp -d "${TMPDIR:-/tmp}/tessel-prefix.XXXXXX")
work=$(mktemp -d "${TMPDIR:-/tmp}/tessel-install-work.XXXXXX")
moved_from=() moved_to=()
# cmake --install rewrites BUILD_DIR/install_manifest.txt, the list a user uninstalls
# with (docs/INSTALL.md): keep the user's, or leave none.
manifest="$build/install_manifest.txt"
cp "$manifest" "$work/saved_manifest" 2>/dev/null || true
restore() {
  for ((i = ${#moved_from[@]} - 1; i >= 0; i--)); do
    mv "${moved_to[i]}" "${moved_from[i]}" && rmdir "$(dirname "${moved_to[i]}")" ||
      echo "check_install: COULD NOT RESTORE ${moved_from[i]} from ${moved_to[i]}" >&2
  done
  if [ -f "$work/saved_manifest" ]; then cp "$work/saved_manifest" "$manifest"; else rm -f "$manifest"; fi
  rm -rf "$prefix" "$work"
}
trap restore EXIT
trap 'exit 130' INT TERM HUP
fail() { echo "check_install: FAILED: $*" >&2; exit 1; }
# Renames a tree to a hidden sibling (same file system: a rename, no copy).
move_away() {
  local holder
  holder=$(mktemp -d "$(dirname "$1")/.tessel-moved.XXXXXX")
  echo "check_install: moving $1 to $holder/tree until the check ends"
  moved_from+=("$1") moved_to+=("$holder/tree")
  mv "$1" "$holder/tree"
}

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || fail "cmake --install $build (see the log above)"
echo "check_install: installed $(find "$prefix" -type f | wc -l) files into $prefix"
cd "$work"
move_away "$repo"
case "$build/" in "$repo"/*) ;; *) move_away "$build" ;; esac

in_prefix() { env -i PATH="$prefix/bin:/usr/bin:/bin" HOME="$work" LANG=C.UTF-8 "$@"; }
[ "$(in_prefix bash -c 'command -v tessel')" = "$prefix/bin/tessel" ] || fail "tessel on PATH is not the installed one"

in_prefix tessel plan --model gpt2-124m --cluster dgx-a100 --nodes 1 --global-batch 8 >plan.out 2>&1 ||
  fail "installed tessel plan: $(tail -1 plan.out)"
grep -q "^gpt2-124m on 1 x dgx-a100" plan.out || fail "installed tessel plan printed no header: $(head -1 plan.out)"
best=$(grep -m1 -E '^ +1 ' plan.out) || fail "installed tessel plan printed no plan 1"
echo "check_install: tessel plan: $best"

example="$prefix/share/tessel/examples/local-cpu-gpt-small.json"
in_prefix tessel run --plan "$example" --steps 2 --db "$work/runs.db" >run.out 2>&1 ||
  fail "installed tessel run: $(tail -1 run.out)"
grep -q "^step 2 loss" run.out || fail "installed tessel run printed no step 2: $(tail -1 run.out)"
echo "check_install: tessel run: $(grep '^step' run.out | awk '{print "step " $2 " loss " $4}' | paste -sd ';' | sed 's/;/; /')"
[ -z "$(ls -A "$work/.local" 2>/dev/null)" ] || fail "the installed tessel wrote under HOME despite --db"
echo "check_install: OK: the installed tessel plans and runs with the source tree moved away"
