#!/usr/bin/env bash
# Install.PutsEverythingUnderThePrefix: `cmake --install BUILD --prefix P` puts the three
# programs in P/bin, the presets, profiles and examples in P/share/tessel and the docs in
# P/share/doc/tessel (docs/INSTALL.md's table); no installed program's run path points
# into the source or build tree; and the installed tessel answers from a folder outside
# both. (Moving the trees away is scripts/check_install.sh's job in CI: ctest runs inside
# them.) Leaves nothing behind.
# Usage: install_prefix_test.sh SOURCE_DIR BUILD_DIR
set -u
source_dir=$(realpath "$1") build_dir=$(realpath "$2")
prefix=$(mktemp -d) work=$(mktemp -d)
# cmake --install rewrites BUILD/install_manifest.txt, the list a user uninstalls with
# (docs/INSTALL.md): keep the user's, or leave none.
manifest="$build_dir/install_manifest.txt"
saved_manifest=$(mktemp)
had_manifest=0
[ -f "$manifest" ] && cp "$manifest" "$saved_manifest" && had_manifest=1
restore() {
  if [ "$had_manifest" -eq 1 ]; then cp "$saved_manifest" "$manifest"; else rm -f "$manifest"; fi
  rm -rf "$prefix" "$work" "$saved_manifest"
}
trap restore EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" 2>&1 || fail "cmake --install: $(tail -1 "$work/install.log")"
for file in bin/tessel bin/tessel-rank bin/tessel-mpi-bench share/tessel/configs/models/gpt2-124m.json \
            share/tessel/configs/clusters/dgx-a100.json share/tessel/profiles/A100-SXM-80GB.json \
            share/tessel/examples/local-cpu-gpt-small.json share/doc/tessel/README.md \
            share/doc/tessel/docs/ARCHITECTURE.md share/doc/tessel/docs/INSTALL.md; do
  [ -f "$prefix/$file" ] || fail "missing $file under the prefix"
done
for program in tessel tessel-rank tessel-mpi-bench; do
  [ -x "$prefix/bin/$program" ] || fail "$program is not executable"
  runpath=$(readelf -d "$prefix/bin/$program" | sed -nE 's/.*R(UN)?PATH.*\[(.*)\]/\2/p')
  IFS=: read -ra entries <<<"$runpath"
  for entry in "${entries[@]}"; do
    [ -n "$entry" ] || fail "$program's run path has an empty entry (the working directory): $runpath"
    case "$entry/" in
      "$source_dir"/* | "$build_dir"/*) fail "$program's run path names the source or build tree: $entry" ;;
    esac
  done
done
echo "ok: files in place, run paths outside the trees"

mkdir "$work/cwd"
cd "$work/cwd"   # the installed tessel's working directory and HOME: nothing may appear there
version=$(env -i PATH="$prefix/bin:/usr/bin:/bin" HOME="$work/cwd" tessel --version 2>&1) || fail "installed tessel --version: $version"
[ "$version" = "tessel 0.1.0" ] || fail "installed tessel --version printed: $version"
env -i PATH="$prefix/bin:/usr/bin:/bin" HOME="$work/cwd" tessel presets >"$work/presets.out" 2>&1 || fail "installed tessel presets: $(tail -1 "$work/presets.out")"
grep -q "gpt2-124m" "$work/presets.out" || fail "installed tessel presets lists no gpt2-124m"
# The installed command with a wrong argument: one line and status 2, as from the build tree.
env -i PATH="$prefix/bin:/usr/bin:/bin" HOME="$work/cwd" tessel plan --model no-such-model --cluster dgx-a100 --nodes 1 \
  --global-batch 8 >"$work/bad.out" 2>&1
status=$?
[ "$status" -eq 2 ] || fail "installed tessel with an unknown model: status $status, not 2"
[ "$(wc -l <"$work/bad.out")" -eq 1 ] || fail "installed tessel with an unknown model printed more than one line: $(cat "$work/bad.out")"
[ -z "$(ls -A "$work/cwd")" ] || fail "the installed tessel wrote files: $(ls -A "$work/cwd")"
echo "ok: installed tessel answers from $work/cwd ($version)"
