#!/usr/bin/env python3
"""The convolution workspaces the built-in trial asks cuDNN for, against those PyTorch requests.

Runs, on a GPU with PyTorch, one configuration twice: the built-in trial (a stream-only trial, with
`OOM_BISECT_CUDNN_OUT`: every convolution it met and the workspace of each engine, in PyTorch's
order), and one training step of the PyTorch reference (tools/pytorch/deeplabv3plus.py) under
`torch.cuda.memory._record_memory_history` with C++ frames, where a workspace is an allocation made
in `at::native::run_conv_plan`. Without memory pressure PyTorch takes the first engine's workspace,
so each of its requests should be the first workspace of a convolution of the same pass.

    python3 tools/pytorch/workspaces.py --bin target/release/oom-bisect CONFIG [--set KEY=VALUE ...]

Prints the cuDNN each side used, how many of PyTorch's requests match one of the built-in trial's
(pass and bytes), how many of the built-in trial's PyTorch asked for, and those that differ.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))


def builtin(binary, config, sets, out):
    """The built-in trial's answers: {(pass, bytes)} of the first engine of each convolution."""
    path = os.path.join(out, "builtin.json")
    args = [binary, "trial", "--backend", "cuda", "--evidence", "stream", "--memory-limit", "none",
            "--config", config] + [a for s in sets for a in ("--set", s)]
    env = dict(os.environ, OOM_BISECT_CUDNN_OUT=path)
    subprocess.run(args, env=env, stdout=subprocess.DEVNULL, check=True, timeout=600)
    ours = json.load(open(path))
    firsts = {(c["pass"], c["workspaces"][0]) for c in ours["convolutions"]
              if c["workspaces"] and c["workspaces"][0] > 0}
    return ours["cudnn"], len(ours["convolutions"]), firsts


def pytorch(config, sets):
    """PyTorch's workspace requests in one step, as [(pass, bytes)], and its cuDNN version."""
    import torch
    spec = importlib.util.spec_from_file_location("ref", os.path.join(HERE, "deeplabv3plus.py"))
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    c = ref.load(config, list(sets) + ["train.steps=1"])
    args = argparse.Namespace(device="cuda", params=False, fused_attention=False, marks=False,
                              ballast=0, limit_bytes=None)
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="all",
                                             max_entries=3_000_000)
    ref.train(c, args)
    requests = []
    for t in torch.cuda.memory._snapshot()["device_traces"][0]:
        names = " ".join(f.get("name", "") for f in t.get("frames", []))
        if t["action"] == "alloc" and "run_conv_plan" in names:
            kind = ("data" if "backward_input" in names else
                    "weight" if "backward_weight" in names else "forward")
            requests.append((kind, t["size"]))
    return torch.backends.cudnn.version(), torch.cuda.get_device_name(), requests


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", required=True, help="the oom-bisect binary")
    p.add_argument("config")
    p.add_argument("--set", action="append", default=[])
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as out:
        cudnn, convs, ours = builtin(a.bin, a.config, a.set, out)
    version, device, requests = pytorch(a.config, a.set)
    theirs = Counter(requests)
    hit = sum(n for k, n in theirs.items() if k in ours)
    print(f"{a.config} {' '.join(a.set)}, {device}")
    print(f"built-in: {cudnn}, {convs} convolutions, {len(ours)} distinct first workspaces")
    print(f"PyTorch: cuDNN {version}, {len(requests)} workspace requests in one step, "
          f"{len(theirs)} distinct")
    print(f"PyTorch's requests that are a built-in first workspace: {hit} of {len(requests)}")
    print(f"built-in first workspaces PyTorch asked for: {len(ours & set(theirs))} of {len(ours)}")
    for name, only in (("only PyTorch", set(theirs) - ours), ("only built-in", ours - set(theirs))):
        if only:
            print(f"{name}: {sorted(only)[:12]}")
    return 0 if hit == len(requests) and ours <= set(theirs) else 1


if __name__ == "__main__":
    sys.exit(main())
