#!/usr/bin/env python3
"""The steps table (docs/fidelity.md): for each configuration of a GPU run made by
docs/runs/gpu-run-21.sh, the device memory held by the end of each of steps 1-5 by the built-in
model (the pools' pages, from the trial's JSON) and PyTorch's reserved peak by the end of each step
(the reference script's JSON lines), the step each run out of memory came in, and the one-step
trial with its optimizer state made first, both ways.

    python3 docs/steps-table.py docs/runs/h200/run21
"""
import json, os, sys

GIB = 2**30


def burn(path):
    """(per-step device peaks in GiB, 'oom@N' or 'fits', seconds of the trial)."""
    try:
        r = json.load(open(path))
    except (OSError, ValueError):
        return [], "none", None
    peaks = {}
    for m in r["stages"]:
        peaks[m["step"]] = max(peaks.get(m["step"], 0), m["device_bytes"])
    verdict = r["outcome"]
    if verdict == "oom":
        verdict = f"oom@{(r.get('oom') or {}).get('step', -1) + 1}"
    return [peaks[s] / GIB for s in sorted(peaks)], verdict, r.get("wall_seconds")


def torch(path):
    """(per-step cumulative reserved peaks in GiB, 'oom@N' or 'fits')."""
    peaks, verdict = [], "none"
    try:
        lines = [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError):
        return peaks, verdict
    for e in lines:
        if "step" in e:
            peaks.append(e["reserved_peak"] / GIB)
        elif "oom" in e:
            verdict = f"oom@{len(peaks) + 1}"
        elif "params" in e:
            verdict = "fits"
    return peaks, verdict


def cells(peaks, n=5):
    return " ".join(f"{p:.2f}" for p in peaks[:n]) or "–"


def main(run):
    names = sorted({f.split(".")[0] for f in os.listdir(run) if f.endswith(".burn5.json")})
    print("| config | built-in, 5 steps: device GiB by step | verdict | PyTorch, 5 steps: reserved GiB"
          " by step | verdict | built-in, 1 step, state made first | PyTorch, 1 step, state first |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in names:
        b5, bv5, _ = burn(f"{run}/{n}.burn5.json")
        t5, tv5 = torch(f"{run}/{n}.pt5.jsonl")
        b1, bv1, _ = burn(f"{run}/{n}.burn1p.json")
        t1, tv1 = torch(f"{run}/{n}.pt1p.jsonl")
        print(f"| {n} | {cells(b5)} | {bv5} | {cells(t5)} | {tv5} | {cells(b1)} {bv1} | "
              f"{cells(t1)} {tv1} |")


main(sys.argv[1] if len(sys.argv) > 1 else "docs/runs/h200/run21")
