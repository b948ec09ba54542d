#!/usr/bin/env python3
"""Every candidate both journals measured (first attempt): outcome and peak under the built-in burn
model (memory model pytorch) and under real PyTorch through `--exec`, for docs/exec-pytorch.md.

    python3 docs/exec-compare.py docs/runs/h200/run15/burn.journal.jsonl docs/runs/h200/run15/exec.journal.jsonl
"""
import json
import sys

GIB = 1 << 30


def load(path):
    out = {}
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        if r["attempt"] == 0:
            sets = r["candidate"]["sets"]
            key = " ".join(f"{k}={v}" for k, v in sorted(sets.items())) or "(original)"
            out[key] = r["report"]
    return out


def cell(r):
    if r is None:
        return "–"
    peak = f" {r['peak_bytes'] / GIB:.2f}" if r.get("peak_bytes") else ""
    return f"{r['outcome']}{peak}"


def main():
    burn, torch = load(sys.argv[1]), load(sys.argv[2])
    walls = {n: [r["wall_seconds"] for r in j.values()] for n, j in (("burn", burn), ("torch", torch))}
    for n, w in walls.items():
        print(f"{n}: {len(w)} first attempts, {sum(w):.0f} s of trials, {sum(w) / len(w):.1f} s each")
    print("\n| candidate | burn model (pytorch memory model) | PyTorch 2.11 (--exec) | agree |")
    print("| --- | --- | --- | --- |")
    for key in sorted(set(burn) | set(torch), key=lambda k: (k != "(original)", k)):
        b, t = burn.get(key), torch.get(key)
        agree = "–" if b is None or t is None else ("yes" if b["outcome"] == t["outcome"] else "**no**")
        print(f"| `{key[:90]}` | {cell(b)} | {cell(t)} | {agree} |")


if __name__ == "__main__":
    main()
