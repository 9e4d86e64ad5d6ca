#!/usr/bin/env bash
# Docs.LinkCheckerRefusesBrokenLinks: the checker behind Docs.EveryLinkResolves finds what
# it is for (a missing file, a missing anchor, a link or a backticked path outside the
# repository, an absolute path) and passes good links (a file, a heading's anchor, a web
# address), so that the docs test passing means something. Works in a temporary folder.
set -u
checker=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/repo/docs"
printf '# Other page\n## Second `part`\n' >"$work/repo/docs/other.md"
printf '# Title\n[a](docs/other.md) [b](docs/other.md#second-part) [c](#title) [d](https://example.invalid/x)\n```\n[in a code block](nowhere.md)\n```\n' >"$work/repo/README.md"
output=$(python3 "$checker" "$work/repo" 2>&1) || fail "good links refused: $output"
printf '[gone](docs/missing.md)\n[anchor](docs/other.md#third)\n[out](../outside.md)\n`../shared/notes.md`\n[abs](/etc/hostname)\n' >>"$work/repo/README.md"
touch "$work/outside.md"
output=$(python3 "$checker" "$work/repo" 2>&1) && fail "broken links passed"
for expected in "docs/missing.md: no such file" "#third: no heading" "../outside.md: outside the repository" \
                "../shared/notes.md: outside the repository" "/etc/hostname: an absolute path"; do
  [[ $output == *"$expected"* ]] || fail "missing '$expected' in: $output"
done
[ "$(printf '%s\n' "$output" | wc -l)" -eq 5 ] || fail "expected 5 lines: $output"
echo "ok: $output"
