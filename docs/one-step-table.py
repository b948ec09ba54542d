#!/usr/bin/env python3
"""The table of GPU run 40 b: each single trial with one step where it stays far below its ceiling
(`train.one_step_below = 0.9`, "new") against every step lazily ("lazy").

    python3 docs/one-step-table.py docs/runs/h200/run40b
"""
import json
import pathlib
import sys

GIB = 2**30


def cell(path):
    if not path.exists():
        return "–", None
    r = json.loads(path.read_text())
    steps = len(r.get("steps") or [])
    if r["outcome"] == "fits":
        return f"fits {r['peak_bytes'] / GIB:.2f} ({steps} step{'s' * (steps != 1)})", r["peak_bytes"]
    if r["outcome"] == "oom":
        return f"oom in step {(r['oom'].get('step') or 0) + 1}", None
    return r["outcome"], None


def main(folder):
    trials = pathlib.Path(folder) / "trials"
    names = sorted({p.name.rsplit("-", 1)[0] for p in trials.glob("*-new.json")}
                   | {p.name.rsplit("-", 1)[0] for p in trials.glob("*-lazy.json")})
    print("| config | one step far below (new) | every step, lazy (before) | new − lazy (GiB) |")
    print("| --- | --- | --- | --- |")
    for n in names:
        (new, a), (lazy, b) = cell(trials / f"{n}-new.json"), cell(trials / f"{n}-lazy.json")
        diff = f"{(a - b) / GIB:+.2f}" if a is not None and b is not None else "–"
        print(f"| {n} | {new} | {lazy} | {diff} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
