#!/usr/bin/env python3
"""Holds tessel's sources to the size a reader can hold in their head: no source file over
600 lines and no function over 120 lines, outside tests; and no source file, tests included,
opening with more than 5 comment lines (what it is for; the details go to docs/), except the
files named in scripts/long_openings_allowed.txt. Prints every offender, one line each, and
exits 1 when there is one (ctest runs it: Source.FilesAndFunctionsStaySmall).

Functions are found by brace matching on code with comments and string literals blanked
out: a block whose opening brace follows a closing parenthesis (allowing const, noexcept,
override, a trailing return type or a constructor's initialiser list in between) at the
top level of a namespace or class body is a function; lambdas and control blocks inside it
count towards it. That is a heuristic, not a parser; it errs towards finding functions.
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120
SOURCE_SUFFIXES = {".cpp", ".hpp", ".h", ".cu", ".cuh"}
MAX_OPENING_COMMENT_LINES = 5
SKIP_PARTS = {"tests", "build", ".git"}
UPSTREAM_FILES = ("tests/interop/real/",)  # engines' files kept as shipped


def blank_comments_and_strings(text):
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


FUNCTION_TAIL = re.compile(
    r"\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?(->\s*[\w:<>,\s*&]+)?\s*$|"
    r"\)\s*:\s*[\w:]+[({][^;{}]*$")


def functions(text):
    """(name line, first line, last line) of every function body, 1-based."""
    code = blank_comments_and_strings(text)
    found, stack = [], []  # stack of (kind, start line)
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            inside_function = any(kind == "function" for kind, _ in stack)
            head = code[max(0, code.rfind(";", 0, i), code.rfind("}", 0, i), code.rfind("{", 0, i)) + 1:i]
            is_function = not inside_function and bool(FUNCTION_TAIL.search(head.strip() and head or ""))
            if is_function and re.search(r"\b(if|for|while|switch|catch)\s*\(", head):
                is_function = False
            stack.append(("function" if is_function else "block", line))
        elif c == "}" and stack:
            kind, start = stack.pop()
            if kind == "function":
                found.append((start, line))
    return found


def opening_comment_lines(text):
    """Comment lines a file opens with, after blank lines and `#pragma once`."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and (not lines[i].strip() or lines[i].strip().startswith("#pragma")):
        i += 1
    start = i
    while i < len(lines) and lines[i].strip().startswith(("//", "/*", "*")):
        i += 1
    return i - start


def allowed_long_openings(root):
    path = root / "scripts" / "long_openings_allowed.txt"
    if not path.is_file():
        return set()
    return {line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")}


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    offenders = []
    allowed = allowed_long_openings(root)
    for path in sorted(root.rglob("*")):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        relative = path.relative_to(root)
        if relative.parts[0].startswith("build") or ".git" in relative.parts:
            continue
        text = path.read_text(errors="replace")
        name = relative.as_posix()
        opening = opening_comment_lines(text)
        if (opening > MAX_OPENING_COMMENT_LINES and name not in allowed
                and not name.startswith(UPSTREAM_FILES)):
            offenders.append(f"{name}: opens with {opening} comment lines (at most "
                             f"{MAX_OPENING_COMMENT_LINES}: what the file is for; details go to docs/)")
        if SKIP_PARTS.intersection(relative.parts):
            continue
        lines = text.count("\n") + 1
        if lines > MAX_FILE_LINES:
            offenders.append(f"{relative}: {lines} lines (at most {MAX_FILE_LINES})")
        for start, end in functions(text):
            if end - start + 1 > MAX_FUNCTION_LINES:
                offenders.append(f"{relative}:{start}: a function of {end - start + 1} lines (at most {MAX_FUNCTION_LINES})")
    for line in offenders:
        print(line)
    if offenders:
        return 1
    print(f"every source file is at most {MAX_FILE_LINES} lines and every function at most {MAX_FUNCTION_LINES}; "
          f"every opening comment at most {MAX_OPENING_COMMENT_LINES} lines (except {len(allowed)} allowed files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
