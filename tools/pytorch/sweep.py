#!/usr/bin/env python3
"""Side-by-side sweep: each candidate run by the built-in model
(`oom-bisect trial`) and by the PyTorch reference (deeplabv3plus.py) under the same 24 GiB ceiling,
both held inside the process (`--ceiling-by cap`, `--cap`), several runs at once on one card.

    python3 tools/pytorch/sweep.py --bin target/release/oom-bisect --out /tmp/sweep [--jobs 5]
    python3 tools/pytorch/sweep.py --out /tmp/sweep --table     # the table again, from the files

Writes OUT/NAME.burn.json, OUT/NAME.pt.jsonl, OUT/sweep.jsonl (one line per candidate) and prints
the table behind docs/fidelity.md ("The sweep"): the outcome of each side, whether they agree, and
a figure with the context: the built-in trial's need (the replay's smallest ceiling), PyTorch's
reserved peak plus the context the reference measured (NVML). Attention runs PyTorch's default (need_weights=True, the
N² matrix kept) or, with `model.attention_kernel = "efficient"`, its fused kernel.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "deeplabv3plus.py")
R50 = "configs/deeplabv3plus-r50-os8.toml"      # R50 OS8 512² batch 4
FORUM = "configs/forum-r101-os8-1024.toml"      # R101 OS8 1024² batch 4
LIMIT = "24GiB"
EXIT_OOM = 3  # deeplabv3plus.py's exit code for an out-of-memory


def candidates():
    """(name, config, sets): around the 24 GiB boundary where the outcome is in question."""
    c = []
    os16 = ["model.output_stride=16"]
    for b in (30, 32, 33, 34, 36):
        c.append((f"r50-os16-b{b}", R50, os16 + [f"data.batch={b}"]))
    for b in (12, 14, 16):
        c.append((f"r50-os8-b{b}", R50, [f"data.batch={b}"]))
    for b in (24, 32, 40):
        c.append((f"r50-os8-b{b}-ckpt", R50, [f"data.batch={b}", "train.checkpointing=true"]))
    for b in (24, 28):
        c.append((f"r50-os16-b{b}-adamw", R50, os16 + [f"data.batch={b}", 'train.optimizer="adamw"']))
    for p, b in (("mixed-bf16", 56), ("mixed-f16", 56), ("mixed-f16", 64), ("bf16", 64), ("f16", 64)):
        c.append((f"r50-os16-b{b}-{p}", R50, os16 + [f"data.batch={b}", f'train.precision="{p}"']))
    for b in (4, 8):
        c.append((f"r50-att8-b{b}", R50, [f"data.batch={b}", "model.attention_heads=8"]))
    eff = ["model.attention_heads=8", 'model.attention_kernel="efficient"']
    for b in (8, 16, 24):
        c.append((f"r50-att8-b{b}-efficient", R50, [f"data.batch={b}"] + eff))
    c.append(("forum-b2-att8-efficient", FORUM, ["data.batch=2"] + eff))
    c.append(("r50-os16-b24-aux", R50, os16 + ["data.batch=24", "model.aux_head=true"]))
    for b in (2, 3):
        c.append((f"forum-b{b}", FORUM, [f"data.batch={b}"]))
    for s in (848, 856, 864, 872):
        c.append((f"forum-{s}", FORUM, [f"data.size=[{s},{s}]"]))
    c.append(("forum-os16", FORUM, os16))
    for b in (4, 6):
        c.append((f"forum-b{b}-ckpt", FORUM, [f"data.batch={b}", "train.checkpointing=true"]))
    for p in ("f16", "bf16", "mixed-f16", "mixed-bf16"):
        c.append((f"forum-{p}", FORUM, [f'train.precision="{p}"']))
    for s in (800, 832):
        c.append((f"forum-{s}-aux", FORUM, [f"data.size=[{s},{s}]", "model.aux_head=true"]))
    c.append(("forum-824-adamw", FORUM, ["data.size=[824,824]", 'train.optimizer="adamw"']))
    for t in ("layer3.21", "layer3.22"):
        c.append((f"forum-to-{t}", FORUM, [f'model.truncate_after="backbone.{t}"']))
    c.append(("forum-quarter", FORUM, ['train.loss_resolution="quarter"']))
    return c


def sets_args(sets):
    return [a for s in sets for a in ("--set", s)]


def burn(binary, out, name, cfg, sets):
    path = os.path.join(out, f"{name}.burn.json")
    args = [binary, "trial", "--backend", "cuda", "--config", cfg, *sets_args(sets),
            "--memory-limit", LIMIT, "--ceiling-by", "cap", "--json", path]
    with open(os.path.join(out, f"{name}.burn.txt"), "w") as log:
        subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, timeout=300)
    return burn_result(out, name)


def burn_result(out, name):
    try:
        r = json.load(open(os.path.join(out, f"{name}.burn.json")))
    except (OSError, ValueError):
        return {"outcome": "missing"}
    # The need (the replay's smallest ceiling, context included) where the trial has one: the
    # uncapped replay's reserved peak, which `peak_bytes` is then, may pass a ceiling it fits under.
    need = (r.get("allocator") or {}).get("need_bytes")
    return {"outcome": r["outcome"], "peak": need or r.get("peak_bytes"), "diverged": r.get("diverged")}


def pytorch(out, name, cfg, sets):
    args = [sys.executable, REF, cfg, *sets_args(sets), "--memory-limit", LIMIT, "--cap"]
    with open(os.path.join(out, f"{name}.pt.jsonl"), "w") as o, \
            open(os.path.join(out, f"{name}.pt.err"), "w") as e:
        rc = subprocess.run(args, stdout=o, stderr=e, timeout=300).returncode
    with open(os.path.join(out, f"{name}.pt.rc"), "w") as f:
        f.write(str(rc))
    return pytorch_result(out, name)


def pytorch_result(out, name):
    try:
        rc = int(open(os.path.join(out, f"{name}.pt.rc")).read())
    except (OSError, ValueError):
        return {"outcome": "missing"}
    path = os.path.join(out, f"{name}.pt.jsonl")
    lines = [json.loads(l) for l in open(path) if l.startswith("{")]
    context = next((l["context_bytes"] for l in lines if "context_bytes" in l), 0)
    reserved = max((l.get("reserved_peak", 0) for l in lines), default=0)
    outcome = {0: "fits", EXIT_OOM: "oom"}.get(rc, "error")
    return {"outcome": outcome, "peak": reserved + context if reserved else None}


def gib(b):
    return f"{b / 2**30:.2f}" if b else "–"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", help="the oom-bisect binary (not with --table)")
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", type=int, default=5, help="runs at once (24 GiB each)")
    p.add_argument("--only", help="run only the candidates whose name contains this")
    p.add_argument("--table", action="store_true",
                   help="run nothing: the table from the files an earlier sweep left in --out")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cands = candidates()
    if args.table:
        results = {(n, "burn"): burn_result(args.out, n) for n, _, _ in cands}
        results.update({(n, "pt"): pytorch_result(args.out, n) for n, _, _ in cands})
    else:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            # Each candidate's two runs side by side, so that a sweep cut short has pairs.
            jobs = {}
            if args.only:
                cands = [x for x in cands if args.only in x[0]]
            for n, c, s in cands:
                jobs[(n, "burn")] = pool.submit(burn, args.bin, args.out, n, c, s)
                jobs[(n, "pt")] = pool.submit(pytorch, args.out, n, c, s)
            results = {k: f.result() for k, f in jobs.items()}
    rows, agree, compared = [], 0, 0
    with open(os.path.join(args.out, "sweep.jsonl"), "w") as f:
        for n, c, s in cands:
            b, t = results[(n, "burn")], results[(n, "pt")]
            conclusive = {b["outcome"], t["outcome"]} <= {"fits", "oom"}
            same = conclusive and b["outcome"] == t["outcome"]
            agree += same
            compared += conclusive
            f.write(json.dumps({"name": n, "config": c, "sets": s, "burn": b, "pytorch": t}) + "\n")
            note = " (diverged)" if b.get("diverged") else ""
            rows.append(f"| {n} | `{' '.join(s)}` | {b['outcome']} {gib(b.get('peak'))}{note} "
                        f"| {t['outcome']} {gib(t.get('peak'))} | {'yes' if same else '**no**'} |")
    print("| candidate | sets | built-in: need (GiB) | PyTorch: peak reserved + context (GiB) | agree |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\n{agree} of {len(cands)} agree ({100 * agree / len(cands):.0f}%); "
          f"{len(cands) - compared} without an outcome on both sides")


if __name__ == "__main__":
    main()
