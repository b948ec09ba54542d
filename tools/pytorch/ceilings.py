#!/usr/bin/env python3
"""The two ceilings of a `--exec` trial side by side (issue 24: "prove the two ceilings
equivalent"): each candidate of the sweep (tools/pytorch/sweep.py, 44 configurations near a 24 GiB
ceiling) run through `oom-bisect trial --exec` with the PyTorch reference, once under the ballast
(the holder fills the rest of the card: one run at a time) and once under `--ceiling-by command`
(the reference holds $OOM_BISECT_MEMORY_LIMIT itself, several runs at once on the card).

    python3 tools/pytorch/ceilings.py --bin target/release/oom-bisect --out /tmp/ceilings
    python3 tools/pytorch/ceilings.py --out /tmp/ceilings --table   # the table again, from files

The command-held runs go first (they are the fast half), then the ballast runs one by one until
`--deadline` seconds have passed; a run whose report is already in OUT is not repeated, so a second
call finishes what the first left. The table pairs what both sides measured. Writes
OUT/NAME.{ballast,command}.json (the trial reports) and prints the table of docs/performance.md.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402  (the candidates, and their `--set` arguments)

TORCH = f"{sys.executable} {sweep.REF} {{config}}"


def trial(binary, out, name, cfg, sets, held_by):
    path = os.path.join(out, f"{name}.{held_by}.json")
    if os.path.exists(path):  # measured by an earlier call into the same --out
        return
    args = [binary, "trial", "--backend", "cuda", "--config", cfg, *sweep.sets_args(sets),
            "--memory-limit", sweep.LIMIT, "--ceiling-by", held_by, "--exec", TORCH,
            "--json", path]
    with open(os.path.join(out, f"{name}.{held_by}.txt"), "w") as log:
        subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, timeout=300)


def result(out, name, held_by):
    try:
        r = json.load(open(os.path.join(out, f"{name}.{held_by}.json")))
    except (OSError, ValueError):
        return None
    return r["outcome"], r.get("peak_bytes"), r.get("error")


def cell(r):
    if r is None:
        return "–"
    outcome, peak, error = r
    why = f" ({error[:60]}…)" if error else ""
    return f"{outcome} {sweep.gib(peak)}{why}"


def run(args, cands):
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda c: trial(args.bin, args.out, *c, "command"), cands))
    print(f"command-held: {time.time() - args.t0:.0f} s", file=sys.stderr)
    for c in cands:
        if time.time() - args.t0 > args.deadline:
            print(f"ballast: stopped at the deadline before {c[0]}", file=sys.stderr)
            break
        trial(args.bin, args.out, *c, "ballast")
    print(f"both: {time.time() - args.t0:.0f} s", file=sys.stderr)


def table(out, cands):
    rows, same, both = [], 0, 0
    for name, _, sets in cands:
        b, c = result(out, name, "ballast"), result(out, name, "command")
        if b is None or c is None:
            continue
        both += 1
        agree = b[0] == c[0]
        same += agree
        rows.append(f"| {name} | `{' '.join(sets)}` | {cell(b)} | {cell(c)} | "
                    f"{'yes' if agree else '**no**'} |")
    print("| candidate | sets | ballast (GiB) | held by the command (GiB) | same verdict |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\n{same} of {both} the same verdict ({len(cands) - both} not run both ways)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", help="the oom-bisect binary (not with --table)")
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", type=int, default=5, help="command-held runs at once (24 GiB each)")
    p.add_argument("--deadline", type=float, default=480, help="no ballast run starts after this")
    p.add_argument("--only", help="only the candidates whose name contains this")
    p.add_argument("--table", action="store_true", help="run nothing: the table from --out")
    args = p.parse_args()
    args.t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    cands = [c for c in sweep.candidates() if not args.only or args.only in c[0]]
    if not args.table:
        run(args, cands)
    table(args.out, cands)


if __name__ == "__main__":
    main()
