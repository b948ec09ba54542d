#!/usr/bin/env python3
"""Where PyTorch runs out of memory: the last fitting value of `data.batch` or of the input size for
the reference model (deeplabv3plus.py), each probe a fresh process under the same ceiling
(`--memory-limit`, CUDA context included), found by doubling then bisection. Prints one JSON line per
probe and one with the boundary.

    python3 tools/pytorch/boundary.py CONFIG --axis batch --memory-limit 24GiB
    python3 tools/pytorch/boundary.py CONFIG --axis size --memory-limit 24GiB --step 32
"""

import argparse
import json
import os
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
FITS, OOM, REFUSED = 0, 3, 4


def probe(args, value, cache):
    if value in cache:
        return cache[value]
    sets = [f"data.batch={value}"] if args.axis == "batch" else [f"data.size=[{value}, {value}]"]
    cmd = [sys.executable, os.path.join(HERE, "deeplabv3plus.py"), args.config,
           "--memory-limit", args.memory_limit] + sum((["--set", s] for s in args.set + sets), [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    last = (r.stdout.strip().splitlines() or ["{}"])[-1]
    outcome = {FITS: "fits", OOM: "oom", REFUSED: "refused"}.get(r.returncode)
    if outcome is None:
        sys.exit(f"probe {value}: exit {r.returncode}\n{r.stderr[-2000:]}")
    print(json.dumps({"axis": args.axis, "value": value, "outcome": outcome,
                      "result": json.loads(last)}), flush=True)
    cache[value] = outcome
    return outcome


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--axis", choices=["batch", "size"], required=True)
    p.add_argument("--memory-limit", required=True)
    p.add_argument("--step", type=int, default=32, help="size step in pixels")
    p.add_argument("--set", action="append", default=[])
    args = p.parse_args()
    with open(args.config, "rb") as f:
        data = tomllib.load(f)["data"]
    unit = 1 if args.axis == "batch" else args.step
    start = data["batch"] if args.axis == "batch" else data["size"][0]
    cache = {}
    fits = lambda v: probe(args, v * unit, cache) == "fits"
    lo, hi = None, None  # in units: lo fits, hi does not
    v = max(start // unit, 1)
    if fits(v):
        lo = v
        while hi is None:
            v *= 2
            (lo, hi) = (v, None) if fits(v) else (lo, v)
    else:
        hi = v
        while lo is None and v > 1:
            v //= 2
            (lo, hi) = (v, hi) if fits(v) else (None, v)
        lo = lo or 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        (lo, hi) = (mid, hi) if fits(mid) else (lo, mid)
    print(json.dumps({"axis": args.axis, "last_fitting": lo * unit or None,
                      "first_failing": hi * unit, "outcome_there": cache.get(hi * unit)}), flush=True)


if __name__ == "__main__":
    main()
