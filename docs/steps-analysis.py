#!/usr/bin/env python3
"""Whether a trial's peak comes by its second training step: reads oom-bisect journals (plain or
gzipped JSON lines) and prints, for every trial that ran three steps, the device and live peaks of
each step, and the step each out-of-memory came in. Used for train.steps' default
(docs/gpu-results.md, run 13).

    python3 docs/steps-analysis.py docs/runs/h200/run13/*.journal.jsonl.gz
"""
import gzip, json, sys

def records(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                pass

oom_steps, rises, fits = {}, [], 0
for path in sys.argv[1:]:
    for e in records(path):
        r = e["report"]
        if r["outcome"] == "oom":
            s = (r.get("oom") or {}).get("step")
            oom_steps[s] = oom_steps.get(s, 0) + 1
            continue
        dev, live = {}, {}
        for m in r["stages"]:
            dev[m["step"]] = max(dev.get(m["step"], 0), m["device_bytes"])
            live[m["step"]] = max(live.get(m["step"], 0), m["in_use_bytes"])
        if r["outcome"] != "fits" or 2 not in dev:
            continue
        fits += 1
        before = max(dev[0], dev[1]), max(live[0], live[1])
        rises.append((dev[2] / before[0], live[2] / before[1], e["candidate"]["sets"]))
print(f"out-of-memory trials by step (0 = first): {dict(sorted(oom_steps.items(), key=str))}")
print(f"trials that fit and ran a third step: {fits}")
print(f"  third step above the first two, device peak: {sum(d > 1 for d, _, _ in rises)}, "
      f"largest {max((d for d, _, _ in rises), default=1) - 1:+.2%}")
print(f"  third step above the first two, live peak:   {sum(l > 1 for _, l, _ in rises)}, "
      f"largest {max((l for _, l, _ in rises), default=1) - 1:+.2%}")
for d, l, c in rises:
    if d > 1 or l > 1:
        print(f"    device {d - 1:+.2%} live {l - 1:+.2%}  {c or 'original'}")
