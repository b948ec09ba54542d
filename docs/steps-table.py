#!/usr/bin/env python3
"""The steps table (docs/fidelity.md): for each configuration of a GPU run made by
docs/runs/gpu-run-21.sh, the device memory held by the end of each of steps 1-5 by the built-in
model (the pools' pages, from the trial's JSON) and PyTorch's reserved peak by the end of each step
(the reference script's JSON lines), the step each run out of memory came in, and the one-step
trial with its optimizer state made first, both ways. With a second directory (run 22, after the
release-and-retry settles), its 5-step trials under the ballast and the cap come beside them.

    python3 docs/steps-table.py docs/runs/h200/run21 docs/runs/h200/run22

With --pairs DIR (GPU run 30, docs/runs/gpu-run-30.sh): both sides from one call, each under an
in-process ceiling: the built-in model's 5-step trial (NAME.cap5.json) beside PyTorch's
(NAME.pt5.jsonl, the reference with --cap).
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


def main(run, after=None):
    names = sorted({f.split(".")[0] for f in os.listdir(run) if f.endswith(".burn5.json")})
    head = ["config", "PyTorch, 5 steps: reserved GiB by step", "verdict",
            "built-in, 5 steps, before the settle: device GiB by step", "verdict",
            "built-in, 1 step, state made first", "PyTorch, 1 step, state made first"]
    if after:
        head += ["built-in, 5 steps, settled (ballast)", "verdict", "the same, cap", "verdict"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for n in names:
        t5, tv5 = torch(f"{run}/{n}.pt5.jsonl")
        b5, bv5, _ = burn(f"{run}/{n}.burn5.json")
        b1, bv1, _ = burn(f"{run}/{n}.burn1p.json")
        t1, tv1 = torch(f"{run}/{n}.pt1p.jsonl")
        row = [n, cells(t5), tv5, cells(b5), bv5, f"{cells(b1)} {bv1}", f"{cells(t1)} {tv1}"]
        if after:
            for kind in ("burn5", "cap5"):
                p, v, _ = burn(f"{after}/{n}.{kind}.json")
                row += [cells(p), v]
        print("| " + " | ".join(row) + " |")


def pairs(run):
    names = sorted({f.split(".")[0] for f in os.listdir(run) if f.endswith(".cap5.json")})
    head = ["config", "PyTorch (cap): reserved GiB by step", "verdict",
            "built-in (cap): device GiB by step", "verdict"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for n in names:
        t, tv = torch(f"{run}/{n}.pt5.jsonl")
        b, bv, _ = burn(f"{run}/{n}.cap5.json")
        print("| " + " | ".join([n, cells(t), tv, cells(b), bv]) + " |")


if len(sys.argv) == 3 and sys.argv[1] == "--pairs":
    pairs(sys.argv[2])
else:
    main(*sys.argv[1:3] if len(sys.argv) > 1 else ["docs/runs/h200/run21", "docs/runs/h200/run22"])
