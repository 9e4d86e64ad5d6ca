#!/usr/bin/env python3
"""`make demo` says only what its output shows (issue 38's first hour): every command it
runs is shown before its output (none runs unseen, such as a profile whose progress
lines would precede any command), stderr joins stdout line by line so that a note never
lands inside a stdout line, the compare screenshot is of the run the text names, and the
summary's run count is read from the database rather than written in. Prints each
offending line of scripts/demo*.sh and exits 1."""
import glob
import re
import sys

from problems import exit_with


def main(root):
    problems = []
    for path in sorted(glob.glob(f"{root}/scripts/demo*.sh")):
        lines = open(path).read().splitlines()
        for number, line in enumerate(lines, 1):
            where = f"{path[len(root) + 1:]}:{number}"
            code = line.split(" #")[0]
            if code.startswith("run() {") and "2>&1" not in code:
                problems.append(f"{where}: run() leaves stderr apart from stdout: {line}")
            if re.search(r'"\$tessel" ', code) and not code.lstrip().startswith(("run()", "#")):
                shown = lines[max(0, number - 4):number - 1]  # a printf may span lines
                if not any(before.lstrip().startswith("printf '\\n$ tessel") for before in shown):
                    problems.append(f"{where}: runs tessel without showing the command first: {line}")
            if re.search(r"\brun gui .*--tab compare", code) and "--run" not in code:
                problems.append(f"{where}: the compare screenshot is of the newest run, not the one named: {line}")
            if re.search(r"\bthe (two|three|four|five|six|seven|eight) recorded runs\b", code):
                problems.append(f"{where}: a run count written in, not read from the database: {line}")
    return problems


if __name__ == "__main__":
    exit_with(main(sys.argv[1]))
