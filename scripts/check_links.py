#!/usr/bin/env python3
"""Holds README.md and docs/*.md to what a clone contains: every relative link and image
resolves to a file or folder inside the repository, every #anchor names a heading of its
target, and no link (nor a backticked `../path`) reaches outside the repository, since a
reader who cloned it has nothing there. Links with a scheme (https:, mailto:) are left
alone: checking them needs a network, which ctest must not. Prints every broken link, one
line each (file:line: target: why), and exits 1 when there is one (ctest runs it:
Docs.EveryLinkResolves).

Usage: check_links.py REPO_ROOT [FILE.md ...]   (default: README.md and docs/*.md)
"""
import pathlib
import re
import sys

INLINE_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*\"([^\"]+)\"", re.IGNORECASE)
BACKTICKED_OUTSIDE_PATH = re.compile(r"`(\.\./[^`\s]+)`")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
FENCE = re.compile(r"^\s*(```|~~~)")


def github_anchor(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`|\*|_(?=\W)|(?<=\W)_", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(markdown_path):
    anchors, seen, in_fence = set(), {}, False
    for line in markdown_path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            anchor = github_anchor(match.group(1))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            anchors.add(anchor if count == 0 else f"{anchor}-{count}")
    return anchors


def link_targets(markdown_path):
    """(line number, target) of every link, image and backticked ../path outside code blocks."""
    in_fence = False
    for number, line in enumerate(markdown_path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        prose = re.sub(r"`[^`]*`", lambda m: m.group(0) if m.group(0).startswith("`../") else "``", line)
        for pattern in (INLINE_LINK, REFERENCE_DEFINITION, HTML_LINK, BACKTICKED_OUTSIDE_PATH):
            for match in pattern.finditer(prose):
                yield number, match.group(1)


def problem_with(target, source, root):
    if SCHEME.match(target) or target.startswith("//"):
        return None
    path_part, _, anchor = target.partition("#")
    if path_part.startswith("/"):
        return "an absolute path: a clone has it elsewhere; link relative to this file"
    resolved = (source.parent / path_part).resolve() if path_part else source.resolve()
    if resolved != root and root not in resolved.parents:
        return "outside the repository: a clone does not have it"
    if not resolved.exists():
        return "no such file in the repository"
    if anchor and resolved.suffix == ".md" and anchor not in anchors_of(resolved):
        return f"no heading with anchor #{anchor} in {resolved.relative_to(root)}"
    return None


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else ".").resolve()
    files = [pathlib.Path(f).resolve() for f in argv[2:]]
    if not files:
        files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    problems = []
    for markdown in files:
        for number, target in link_targets(markdown):
            why = problem_with(target, markdown, root)
            if why:
                problems.append(f"{markdown.relative_to(root)}:{number}: {target}: {why}")
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
