#!/usr/bin/env python3
"""A stand-in for a user's training script, stdlib only, for the tests of `--exec`.

It honours an oom-bisect config the way a real trainer would look to oom-bisect: it reads the file
it is given (argv[1], else $OOM_BISECT_CONFIG), works out how much memory that configuration needs
from batch, input size, output stride, phase, precision and the modules swapped for identity, holds
that much for real (so its resident set is the peak), and fails the way PyTorch does when the need is
above $OOM_BISECT_MEMORY_LIMIT. It is not a model of DeepLabV3+'s memory; it is monotone in every
axis, which is all a test of the search and the protocol needs.

`--need` prints the need in bytes and stops (the tests' brute force). $TOY_MODE picks a failure:
error (a ValueError), tf (TensorFlow's OOM text), oom-exit0 (an OOM message, then exit 0), sleep
(hangs, with a grandchild; pids in $TOY_PIDFILE), killed (SIGKILL by itself), own-peak (prints its
own peak figure), die-after-oom (served: the trial after an out-of-memory ends the process without a
word).

With $OOM_BISECT_SERVE=1 (oom-bisect's `--serve`) it serves trials: one `{"config": PATH}` line on
stdin per trial, each ended by a `trial_done` line echoing the request's `id`; each trial appends `PID N BATCH` to $TOY_SERVED
(N: the trials this process has served, this one included).
"""

import json
import os
import signal
import subprocess
import sys
import time
import tomllib

MIB = 1 << 20
WEIGHTS = {"resnet18": 12 * MIB, "resnet34": 20 * MIB, "resnet50": 24 * MIB, "resnet101": 40 * MIB}
# Bytes of activations per input pixel at output stride 16, f32, whole step.
PER_PIXEL = 600
# What swapping a module for identity saves, as a share of the activations.
SAVES = {"attention": 0.40, "aspp": 0.20, "decoder": 0.15, "aux_head": 0.10}


def state_of(c):
    """What stays held between steps: the weights and the optimizer's state."""
    m, t = c["model"], c.get("train", {})
    w = WEIGHTS[m["backbone"]]
    return w * ({"forward": 1, "backward": 2}.get(t.get("phase", "step")) or (4 if t.get("optimizer") == "adamw" else 3))


def need(c):
    m, d, t = c["model"], c["data"], c.get("train", {})
    phase = t.get("phase", "step")
    state = state_of(c)
    h, wd = d["size"]
    act = d["batch"] * h * wd * PER_PIXEL * (16 / m["output_stride"]) ** 2
    act *= 0.5 if t.get("precision", "f32") in ("bf16", "f16") else 1.0
    act *= {"forward": 0.5, "backward": 1.0, "step": 1.0}[phase]
    if m.get("truncate_after"):
        act *= 0.5
    share = 1.0
    for ident in m.get("identity", []):
        share -= SAVES.get(ident, 0.02)
    if not m.get("attention_heads"):
        share -= SAVES["attention"]
    return int(state + act * max(share, 0.05))


def say(**figures):
    print(json.dumps({"oom_bisect": figures}), flush=True)


def trial(path, mode):
    """One trial of the config at `path`: None where it fits, else its failure's message (the
    last line of PyTorch's traceback, or TensorFlow's)."""
    with open(path, "rb") as f:
        c = tomllib.load(f)
    n = need(c)
    limit = int(os.environ.get("OOM_BISECT_MEMORY_LIMIT", 1 << 62))
    print(f"toy: need {n} bytes, limit {limit}")
    say(stage="setup", step=1)
    if mode == "error":
        raise ValueError("Expected more than 1 value per channel when training")
    if mode == "sleep":
        child = subprocess.Popen(["sleep", "6017"])
        with open(os.environ["TOY_PIDFILE"], "w") as f:
            f.write(f"{os.getpid()} {child.pid}\n")
        time.sleep(600)
    if mode == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    say(stage="backbone.layer4", step=1, phase="forward")
    if n > limit:
        if mode == "tf":
            message = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when "
                       "allocating tensor with shape[8,256,64,64]")
        else:
            print("Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>",
                  file=sys.stderr)
            message = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                       f"{(n - limit) / MIB:.2f} MiB. Including non-PyTorch memory, this process "
                       f"has {limit / MIB:.2f} MiB memory in use.")
        print(message, file=sys.stderr)
        return None if mode == "oom-exit0" else message
    held = bytearray(n)
    held[:: 4096] = b"\x01" * len(range(0, n, 4096))  # touch every page: resident, not just mapped
    say(stage="optimizer", step=1, phase="step")
    if mode == "own-peak":
        say(peak_bytes=n)
    print(f"toy: step 1 loss {0.5:.3f}")
    say(step_done=1, loss=0.5, in_use_bytes=state_of(c))
    return None


def serve(mode):
    """Trials one after another in this process, as `--serve` hands them over."""
    failed_before = False
    for n, line in enumerate(sys.stdin, start=1):
        request = json.loads(line)
        path = request["config"]
        if "TOY_SERVED" in os.environ:
            with open(path, "rb") as f:
                batch = tomllib.load(f)["data"]["batch"]
            with open(os.environ["TOY_SERVED"], "a") as f:
                f.write(f"{os.getpid()} {n} {batch}\n")
        if mode == "die-after-oom" and failed_before:
            print("toy: giving up")
            return 1
        failure = trial(path, mode)
        failed_before = failure is not None
        if failure is None:
            say(trial_done="fits", id=request["id"])
        else:
            say(trial_done="failed", message=failure, id=request["id"])
    return 0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    path = args[0] if args else os.environ["OOM_BISECT_CONFIG"]
    if "--need" in sys.argv:
        with open(path, "rb") as f:
            print(need(tomllib.load(f)))
        return 0
    mode = os.environ.get("TOY_MODE", "")
    if os.environ.get("OOM_BISECT_SERVE") == "1":
        return serve(mode)
    return 0 if trial(path, mode) is None else 1


if __name__ == "__main__":
    sys.exit(main())
