"""What the checks of the project's own text (README.md's tour, the demo scripts) share:
each problem found is printed on a line of its own, and the check fails when there is one."""
import sys


def exit_with(problems):
    """Prints `problems`, one a line, and exits 1 when there is any, 0 otherwise."""
    for problem in problems:
        print(problem)
    sys.exit(1 if problems else 0)
