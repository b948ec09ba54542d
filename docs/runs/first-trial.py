#!/usr/bin/env python3
"""Where a PyTorch's first trial spends its seconds (GPU run 47): the reference
(tools/pytorch/deeplabv3plus.py) served as oom-bisect serves it (`--ceiling-by command`, the
ceiling held by the command), R50 OS16 512² under 24 GiB, started and waited for (its interpreter,
`import torch`, CUDA context and ceiling done) before the first trial is handed over.

Two fresh processes, one after the other: `cold` runs batch 32 three times; `warm` runs batch 1
(oom-bisect's warm-up) and then batch 32 twice. Each line the reference prints is timestamped, so
each trial splits into its parts: from the request to its first stage mark (the model's build, the
optimizer's state, the batch), the first step (to its `step_done`), the rest. Then one cold batch-32
trial again under cProfile: the functions that took the most time of their own.

Usage: python3 docs/runs/first-trial.py OUT_DIR
"""

import json
import os
import pstats
import subprocess
import sys
import tempfile
import time

REFERENCE = "tools/pytorch/deeplabv3plus.py"
CONFIG = "configs/deeplabv3plus-r50-os8.toml"
LIMIT = 24 << 30


def config_at(batch, folder):
    """The R50 config at output stride 16 and `batch`, as a file of its own."""
    text = open(CONFIG).read()
    text = text.replace("output_stride = 8 ", "output_stride = 16").replace(
        "batch = 4 ", f"batch = {batch}")
    path = os.path.join(folder, f"b{batch}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def start(folder, profile=None):
    env = dict(os.environ, OOM_BISECT_CONFIG=config_at(1, folder), OOM_BISECT_SERVE="1",
               OOM_BISECT_CEILING_BY="command", OOM_BISECT_MEMORY_LIMIT=str(LIMIT))
    cmd = [sys.executable] + (["-m", "cProfile", "-o", profile] if profile else []) + [REFERENCE]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    for line in p.stdout:  # ready once it says what it holds outside the allocator
        if "context_bytes" in line:
            break
    return p, time.monotonic() - t0


def trial(p, path):
    """One served trial: its parts in seconds, as the reference's own lines time them."""
    t0 = time.monotonic()
    p.stdin.write(json.dumps({"config": path}) + "\n")
    p.stdin.flush()
    first_mark = first_step = None
    for line in p.stdout:
        now = time.monotonic() - t0
        if '"stage"' in line and first_mark is None:
            first_mark = now
        if '"step_done"' in line and first_step is None:
            first_step = now
        if '"trial_done"' in line:
            done = json.loads(line)["oom_bisect"]["trial_done"]
            return {"trial": os.path.basename(path), "outcome": done, "to_first_mark": first_mark,
                    "to_first_step_done": first_step, "whole": now}
    return {"trial": os.path.basename(path), "outcome": "process ended"}


def sequence(name, batches, folder, out):
    p, ready = start(folder)
    rows = [{"sequence": name, "start_to_ready": ready}]
    for b in batches:
        rows.append(dict(trial(p, config_at(b, folder)), sequence=name))
    p.stdin.close()
    p.wait()
    for r in rows:
        print(json.dumps(r))
        out.write(json.dumps(r) + "\n")


def profiled(folder, out_dir):
    prof = os.path.join(out_dir, "first-trial.prof")
    p, _ = start(folder, prof)
    row = trial(p, config_at(32, folder))
    p.stdin.close()
    p.wait()
    with open(os.path.join(out_dir, "first-trial-profile.txt"), "w") as f:
        f.write(json.dumps(row) + "\n")
        stats = pstats.Stats(prof, stream=f)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(40)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder, \
            open(os.path.join(out_dir, "first-trial.jsonl"), "w") as out:
        sequence("cold", [32, 32, 32], folder, out)
        sequence("warm", [1, 32, 32], folder, out)
        sequence("cold-again", [32, 32], folder, out)
        profiled(folder, out_dir)


if __name__ == "__main__":
    main()
