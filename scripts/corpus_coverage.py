#!/usr/bin/env python3
"""Prints how many independent sources (corpus files) cover each device and parallel family.

A row counts for a family when its layout uses that dimension > 1 (data: dp, tensor: tp,
pipeline: pp, sequence/context: sp, expert: ep); held-out files and refused rows do not count,
as in tests/core/corpus_test.cpp. Usage: scripts/corpus_coverage.py [corpus/published] [--sources]
"""
import json
import pathlib
import sys

FAMILIES = [("data / FSDP", "dp"), ("tensor", "tp"), ("pipeline", "pp"), ("sequence / context", "sp"),
            ("expert", "ep")]
PRESET_DEVICES = {"dgx-a100": "A100 80GB", "dgx-a100-40gb": "A100 40GB", "dgx-h100": "H100"}
OBJECT_DEVICES = {"A100-SXM-80GB": "A100 80GB", "A100-SXM-40GB": "A100 40GB", "H100-SXM": "H100"}
SOURCES_WANTED_PER_CELL = 4


def device_of(run):
    cluster = run["cluster"]
    if isinstance(cluster, dict):
        return OBJECT_DEVICES.get(cluster.get("device", ""), cluster.get("device", "?"))
    return PRESET_DEVICES.get(cluster, cluster)


class CorpusError(Exception):
    pass


def add_file(cells, path):
    try:
        corpus_file = json.loads(path.read_text())
        if corpus_file["source"].get("held_out", False):
            return
        for run in corpus_file["runs"]:
            if "tessel_rejects" in run:
                continue
            for family, degree in FAMILIES:
                if run["parallel"].get(degree, 1) > 1:
                    cells.setdefault((device_of(run), family), set()).add(path.stem)
    except json.JSONDecodeError as e:
        raise CorpusError(f"{path}: not JSON ({e})")
    except (KeyError, TypeError, AttributeError) as e:
        raise CorpusError(f"{path}: needs source.held_out and runs[].parallel and cluster ({e!r})")


def coverage(corpus_dir):
    cells = {}  # (device, family) -> set of file names
    for path in sorted(pathlib.Path(corpus_dir).glob("*.json")):
        add_file(cells, path)
    return cells


def main():
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if set(flags) - {"--sources"} or len(args) > 1:
        print("corpus_coverage: usage: scripts/corpus_coverage.py [CORPUS_DIR] [--sources]", file=sys.stderr)
        return 2
    corpus_dir = args[0] if args else "corpus/published"
    if not pathlib.Path(corpus_dir).is_dir():
        print(f"corpus_coverage: {corpus_dir} is not a directory (expected corpus/published)", file=sys.stderr)
        return 2
    try:
        cells = coverage(corpus_dir)
    except CorpusError as e:
        print(f"corpus_coverage: {e}", file=sys.stderr)
        return 2
    devices = ["A100 80GB", "A100 40GB", "H100"]
    devices += sorted({d for d, _ in cells} - set(devices))
    print("| device | " + " | ".join(f for f, _ in FAMILIES) + " |")
    print("|---|" + "---:|" * len(FAMILIES))
    for device in devices:
        counts = []
        for family, _ in FAMILIES:
            n = len(cells.get((device, family), ()))
            short = SOURCES_WANTED_PER_CELL - n
            counts.append(f"{n} (short {short})" if short > 0 else str(n))
        print(f"| {device} | " + " | ".join(counts) + " |")
    if "--sources" in sys.argv:
        for (device, family), files in sorted(cells.items()):
            print(f"{device:10} {family:18} {', '.join(sorted(files))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
