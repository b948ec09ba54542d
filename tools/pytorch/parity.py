#!/usr/bin/env python3
"""Checks that the PyTorch reference (deeplabv3plus.py) is the burn model: the same module ids with
the same trainable parameters, in total and per module, as `oom-bisect inspect` lists them, over a
set of configurations that exercises every option (backbones, output strides, separable, attention,
aux head, identity swaps). Needs PyTorch. Exit 0 when every figure agrees, 1 otherwise.

    python3 tools/pytorch/parity.py --bin target/release/oom-bisect
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CASES = [
    ("configs/forum-r101-os8-1024.toml", []),
    ("configs/deeplabv3plus-r50-os8.toml", ["model.output_stride=16", "model.aux_head=true"]),
    ("configs/quickstart.toml", []),
    ("configs/quickstart.toml", ["model.separable=true", "model.attention_heads=4",
                                 'model.identity=["aspp.branch2","decoder.fuse.0","backbone.layer2.1"]']),
    ("configs/deeplabv3plus-r50-os8.toml", ['model.identity=["aspp","decoder"]', "model.backbone=\"resnet34\""]),
    ("configs/deeplabv3plus-r50-os8.toml", ['model.identity=["aspp.pool","decoder.project","attention"]',
                                            "model.attention_heads=8", "model.output_stride=32"]),
]


def inspect(binary, config, sets):
    """Total and per-id trainable parameters from `oom-bisect inspect`."""
    args = [binary, "inspect", "--config", config] + [a for s in sets for a in ("--set", s)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    total = int(re.search(r"trainable parameters: ([\d,]+)", out).group(1).replace(",", ""))
    per = {}
    for line in out.splitlines():
        m = re.match(r"\s+([a-z_][\w.]*)\s+([\d,]+)\s", line)
        if m:
            per[m.group(1)] = int(m.group(2).replace(",", ""))
    return total, per


def reference(config, sets):
    args = [sys.executable, os.path.join(HERE, "deeplabv3plus.py"), config, "--modules", "--device", "cpu"]
    args += [a for s in sets for a in ("--set", s)]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"deeplabv3plus.py {config} {sets}: exit {r.returncode}\n{r.stderr}")
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return j["params"], j["modules"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "target/release/oom-bisect"))
    args = p.parse_args()
    bad = 0
    for config, sets in CASES:
        path = os.path.join(ROOT, config)
        (burn_total, burn), (torch_total, torch_) = inspect(args.bin, path, sets), reference(path, sets)
        # inspect lists swapped modules too (with the parameters they would have); the reference
        # builds only what runs.
        diffs = [f"{k}: burn {burn.get(k)} torch {v}" for k, v in torch_.items() if burn.get(k) != v]
        if burn_total != torch_total:
            diffs.insert(0, f"total: burn {burn_total} torch {torch_total}")
        print(json.dumps({"config": config, "set": sets, "params": torch_total,
                          "modules_compared": len(torch_), "differences": diffs}))
        bad += bool(diffs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
