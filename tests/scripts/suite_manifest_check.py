#!/usr/bin/env python3
"""Checks the CPU suite's manifest (examples/cpu-suite/manifest.json) against what the
issue asks of it, so that an edit that breaks the suite fails a test instead of the
loop: at least 12 plans, every plan file of the folder in exactly one half, the halves
the same size, each strategy (the file's number) once in each half, both model sizes in
each half, plans of 1 and 2 ranks, and every plan accepted by `tessel estimate`.
usage: suite_manifest_check.py MANIFEST TESSEL"""
import json
import os
import subprocess
import sys
import tempfile


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    manifest_path, tessel = sys.argv[1], sys.argv[2]
    folder = os.path.dirname(os.path.abspath(manifest_path))
    manifest = json.load(open(manifest_path))
    if not isinstance(manifest.get("rule"), str) or not manifest["rule"]:
        fail("the manifest states no rule for how the halves were chosen")
    halves = {half: manifest.get(half) for half in ("calibrate", "predict")}
    for half, plans in halves.items():
        if not isinstance(plans, list) or not plans:
            fail(f'"{half}" must be a non-empty list')
    listed = halves["calibrate"] + halves["predict"]
    on_disk = sorted(f for f in os.listdir(folder) if f.endswith(".json") and f != "manifest.json")
    if sorted(listed) != on_disk:
        fail(f"the halves must list every plan of {folder} exactly once: listed {sorted(listed)}, found {on_disk}")
    if len(listed) < 12:
        fail(f"the suite has {len(listed)} plans; the issue asks for at least 12")
    if len(halves["calibrate"]) != len(halves["predict"]):
        fail("the calibrate and predict halves differ in size")
    strategies = {half: sorted(p[:2] for p in plans) for half, plans in halves.items()}
    if strategies["calibrate"] != strategies["predict"] or len(set(strategies["calibrate"])) != len(
            strategies["calibrate"]):
        fail(f"each strategy number must appear once in each half: {strategies}")
    ranks = set()
    no_database = tempfile.TemporaryDirectory()  # estimate with the shipped profile, writing nothing
    for half, plans in halves.items():
        models = set()
        for name in plans:
            plan = json.load(open(os.path.join(folder, name)))
            models.add(plan["model"]["name"])
            parallel = plan["parallel"]
            ranks.add(parallel.get("dp", 1) * parallel.get("pp", 1) * parallel.get("tp", 1) * parallel.get("sp", 1))
            result = subprocess.run([tessel, "estimate", "--plan", os.path.join(folder, name), "--json"],
                                    capture_output=True, text=True, env={**os.environ, "TESSEL_DB": os.path.join(no_database.name, "none.db")})
            if result.returncode != 0:
                fail(f"tessel estimate refuses {name}: {result.stderr.strip()}")
        if len(models) < 2:
            fail(f'the "{half}" half holds one model size ({models}); the suite has two')
    if not {1, 2} <= ranks:
        fail(f"the suite must hold plans of 1 and 2 ranks; it holds {sorted(ranks)}")
    print(f"manifest ok: {len(listed)} plans, {len(strategies['calibrate'])} strategies, ranks {sorted(ranks)}")


if __name__ == "__main__":
    main()
