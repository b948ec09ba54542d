#!/usr/bin/env python3
"""The replay against the device, for `--exec` with the PyTorch reference (deeplabv3plus.py): for
each configuration, one run without a ceiling whose allocator trace oom-bisect replays (its need:
the smallest ceiling, context included, under which PyTorch's allocator holds that trace; a trial
run alone takes every training step, as the capped runs near their need do), then
real runs of the reference under ceilings just below and above that need, each held by PyTorch's
own per-process cap (the reference's `--cap`: its allocator refuses past the ceiling less what the
process holds outside it, measured by NVML), several at once on one card. The replay predicts
"fits" exactly where the ceiling is at least the need; the table counts where the device agrees,
and brackets the smallest ceiling the device passes.

    python3 tools/pytorch/replay-vs-device.py --bin target/release/oom-bisect --out /tmp/rvd [--jobs 3]
    python3 tools/pytorch/replay-vs-device.py --out /tmp/rvd --table   # the table again, from files
    python3 tools/pytorch/replay-vs-device.py --bin BIN --out /tmp/rvd --only R50 --jobs 1   # a subset, one at a time

With `--expandable` the need is the replay's under `expandable_segments:True` (the same uncapped
trace, replayed with that setting) and the capped runs set `PYTORCH_CUDA_ALLOC_CONF` to it: the check
of the modelled setting against PyTorch's own.

    python3 tools/pytorch/replay-vs-device.py --bin target/release/oom-bisect --out /tmp/rvd --expandable

A run whose result is already in OUT is not repeated, so a second call finishes what the first left
(`--deadline` seconds per call). Prints the table of docs/fidelity.md.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402  (the reference's path, the configs, `--set` arguments)

# Near the forum's and the capacity scenario's boundaries, and two smaller ones.
CONFIGS = [
    ("forum 1024² b2", sweep.FORUM, ["data.batch=2"]),
    ("forum 824² b4", sweep.FORUM, ["data.size=[824,824]"]),
    ("forum 856² b4", sweep.FORUM, ["data.size=[856,856]"]),
    ("R50 OS16 512² b32", sweep.R50, ["model.output_stride=16", "data.batch=32"]),
    ("R50 OS8 768² b8", sweep.R50, ["data.size=[768,768]", "data.batch=8"]),
    ("R50 OS8 512² b4", sweep.R50, []),
]
# Ceilings relative to the need: half below (the replay says OOM), half at or above (it says fits).
OFFSETS = [-0.04, -0.02, -0.01, -0.005, 0.005, 0.01, 0.02, 0.04]
UNCAPPED = "70GiB"  # no ceiling, on an 80 GiB card too
GIB = 2**30


def slug(name):
    return "".join(c if c.isalnum() else "-" for c in name)


def need(args, name, cfg, sets):
    """The replay's need of one uncapped `--exec` trial of the reference (run if not in OUT)."""
    path = os.path.join(args.out, f"{slug(name)}.need.json")
    if not os.path.exists(path):
        cmd = [args.bin, "trial", "--backend", "cuda", "--config", cfg, *sweep.sets_args(sets),
               "--memory-limit", UNCAPPED, "--ceiling-by", "command",
               "--exec", f"{sys.executable} {sweep.REF} {{config}}", "--json", path]
        with open(path[:-5] + ".txt", "w") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=300)
    return read_need(args, name)


def read_need(args, name):
    """The need in OUT, in bytes (under `--expandable`, the replay's with that setting), or None
    where its trial left none."""
    key = "expandable_need_bytes" if args.expandable else "need_bytes"
    try:
        return json.load(open(os.path.join(args.out, f"{slug(name)}.need.json")))["allocator"][key]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def point_path(args, name, ceiling):
    """A capped run's file; those with expandable segments apart from the default's."""
    return os.path.join(args.out, f"{slug(name)}.{'exp.' if args.expandable else ''}{ceiling}.json")


def on_device(args, name, cfg, sets, ceiling):
    """The reference under `ceiling` bytes held by its cap: "fits", "OOM", or why neither."""
    path = point_path(args, name, ceiling)
    if not os.path.exists(path):
        cmd = [sys.executable, sweep.REF, cfg, *sweep.sets_args(sets), "--memory-limit", str(ceiling), "--cap"]
        env = dict(os.environ)
        if args.expandable:
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        verdict = {0: "fits", sweep.EXIT_OOM: "OOM"}.get(r.returncode, f"exit {r.returncode}")
        json.dump({"ceiling": ceiling, "verdict": verdict, "stderr": r.stderr[-2000:]}, open(path, "w"))
    return json.load(open(path))["verdict"]


def chosen(args):
    """The configurations to measure and tabulate: those whose name contains an `--only` word."""
    return [c for c in CONFIGS if not args.only or any(w in c[0] for w in args.only)]


def measure(args):
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        # Two at once: a run without a ceiling may take what the card has.
        configs = chosen(args)
        needs = list(concurrent.futures.ThreadPoolExecutor(2).map(lambda c: need(args, *c), configs))
        points = [(c, round(n * (1 + off))) for c, n in zip(configs, needs) if n for off in OFFSETS]

        def point(p):
            if time.time() - args.t0 > args.deadline:
                print(f"stopped at the deadline before {p[0][0]} at {p[1]}", file=sys.stderr)
                return
            on_device(args, *p[0], p[1])

        list(pool.map(point, points))


def row(args, name, n):
    """One configuration's cells and its counts (points, agreeing, agreeing within 2%)."""
    cells, agree, close, seen = [], 0, 0, 0
    passing, failing = None, None
    for off in OFFSETS:
        path = point_path(args, name, round(n * (1 + off)))
        if not os.path.exists(path):
            cells.append("–")
            continue
        verdict, predicted = json.load(open(path))["verdict"], "fits" if off >= 0 else "OOM"
        seen += 1
        ok = verdict == predicted
        agree += ok
        close += ok and abs(off) <= 0.02
        cells.append(verdict if ok else f"**{verdict}**")
        if verdict == "fits" and passing is None:
            passing = off
        if verdict == "OOM":
            failing = off
    if passing is None or failing is None:
        bracket = "–"
    elif failing < passing:
        bracket = f"need {failing:+.1%} … {passing:+.1%}"
    else:
        bracket = f"not monotone: fits at {passing:+.1%}, OOM up to {failing:+.1%}"
    return cells, bracket, (seen, agree, close)


def table(args):
    head = " | ".join(f"{o:+.1%}" for o in OFFSETS)
    print(f"| configuration | replay's need | {head} | smallest passing ceiling, device |")
    print("|" + " --- |" * (len(OFFSETS) + 3))
    total = [0, 0, 0]
    for name, _, _ in chosen(args):
        n = read_need(args, name)
        if n is None:
            print(f"| {name} | – |" + " – |" * (len(OFFSETS) + 1))
            continue
        cells, bracket, counts = row(args, name, n)
        total = [t + c for t, c in zip(total, counts)]
        print(f"| {name} | {n / GIB:.2f} GiB | {' | '.join(cells)} | {bracket} |")
    print(f"\n{total[1]} of {total[0]} points with the replay's verdict, "
          f"{total[2]} of them within 2% of the need.")



def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", help="the oom-bisect binary (measures); without it, --table only")
    p.add_argument("--out", required=True)
    p.add_argument("--table", action="store_true", help="print the table from OUT, run nothing")
    p.add_argument("--jobs", type=int, default=3, help="runs at once on the card")
    p.add_argument("--deadline", type=float, default=540, help="seconds of measuring per call")
    p.add_argument("--expandable", action="store_true",
                   help="the replay and the runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    p.add_argument("--only", action="append", default=[],
                   help="only the configurations whose name contains this (repeatable)")
    args = p.parse_args()
    args.t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    if not args.table:
        if not args.bin:
            p.error("--bin is needed to measure")
        measure(args)
    table(args)


if __name__ == "__main__":
    main()
