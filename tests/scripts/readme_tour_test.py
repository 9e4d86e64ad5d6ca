#!/usr/bin/env python3
"""README.md's commands as a newcomer types them on a fresh Debian 12, as root (issue 38):
the getting-started block puts build/bin on PATH (the tour calls it `tessel`) and makes
the tour's folder; every `mpirun` line says --allow-run-as-root (Open MPI refuses root
without it); every file a tour command writes goes under tour/ (git ignores it) or an
absolute path, never into the clone. Prints each offending line and exits 1."""
import re
import sys

from problems import exit_with

# Options whose value is a file or folder the command writes.
WRITES = ("--trace", "--csv", "--out", "--emit-out", "--checkpoint", "--db", "--screenshot", "--json-out")


def main(root):
    text = open(f"{root}/README.md").read()
    lines = text.splitlines()
    problems = []
    start = text.find("## Getting started")
    block = text[start:text.find("```", text.find("```", start) + 3)]
    if not re.search(r"export PATH=\$PWD/build/bin:\$PATH", block):
        problems.append("getting started: no `export PATH=$PWD/build/bin:$PATH` before the tour's `tessel`")
    if "mkdir -p tour" not in block:
        problems.append("getting started: the tour's folder (mkdir -p tour) is not made")
    if not re.search(r"^/tour/$", open(f"{root}/.gitignore").read(), re.M):
        problems.append(".gitignore: /tour/ is not ignored")
    for number, line in enumerate(lines, 1):
        if not line.startswith("$ "):
            continue
        command = line.split("#")[0]
        if re.search(r"\bmpirun\b", command) and "--allow-run-as-root" not in command:
            problems.append(f"README.md:{number}: mpirun without --allow-run-as-root: {line}")
        words = command.split()
        for i, word in enumerate(words[:-1]):
            option, value = word, words[i + 1]
            if option in WRITES and not value.startswith(("tour/", "/", "$", "~")):
                problems.append(f"README.md:{number}: {option} {value} writes into the clone: {line}")
        if re.match(r"\$ (mkdir|cat >|touch)\b", command) and " tour/" not in command:
            problems.append(f"README.md:{number}: writes into the clone: {line}")
    return problems


if __name__ == "__main__":
    exit_with(main(sys.argv[1]))
