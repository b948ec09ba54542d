#!/usr/bin/env python3
"""Hostile input against the real binary: every config key with values of the wrong type, out of
range, huge, empty, or full of control characters; files cut at every line; command-line misuse.
Each case runs `inspect` and `trial --fake-trials` (no training: the estimate answers) on the CPU and
is checked for what docs/reliability.md promises: a documented exit code, no panic, the key or flag
named, no raw control character echoed, no message longer than a screenful. Prints a table of counts
and every case that broke a promise; exits 1 if any did.

    python3 tools/reliability/hostile-input.py target/release/oom-bisect
"""

import os
import subprocess
import sys
import tempfile

BASE = {
    "model": {"backbone": '"resnet18"', "output_stride": "16", "classes": "4", "aspp_channels": "32"},
    "data": {"batch": "2", "size": "[64, 64]"},
    "train": {"steps": "1"},
}
KEYS = {
    "model": ["backbone", "output_stride", "classes", "aspp_rates", "aspp_channels", "separable",
              "attention_heads", "aux_head", "identity", "truncate_after", "batch_norm"],
    "data": ["batch", "size"],
    "train": ["optimizer", "learning_rate", "momentum", "weight_decay", "loss_resolution",
              "precision", "checkpointing", "phase", "steps"],
    "device": ["backend", "memory_limit", "memory_fraction", "gpu", "memory_model"],
}
HOSTILE = ['"x"', "0", "-1", "1e12", "9223372036854775807", "18446744073709551616", "0.5", "nan",
           "inf", "true", "[]", "[1, 2, 3]", "[0, 0]", "[4294967296, 4294967296]", "{ a = 1 }",
           '""', '"' + "y" * 100_000 + '"', '"a\\u001b[2Jb"', '"a\\u202eb"', '"\\u0000"', "[\"\"]",
           '["backbone.layer1.0"]', '["nope"]', '"aspp"', '"backbone.stem"']
# `trial` speaks `git bisect run`: 125 skip, 200 + the code where nothing can be measured.
DOCUMENTED = {0, 2, 3, 10, 11, 12, 13, 14, 15, 125, 201, 202, 212, 213, 214}


def toml(config):
    return "".join(f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items())
                   for s, kv in config.items())


def cases():
    for section, keys in KEYS.items():
        for key in keys:
            for value in HOSTILE:
                c = {s: dict(kv) for s, kv in BASE.items()}
                c.setdefault(section, {})[key] = value
                yield f"{section}.{key} = {value[:30]}", toml(c), [], f"{section}.{key}"
    text = toml(BASE)
    lines = text.splitlines(keepends=True)
    for i in range(1, len(lines)):
        yield f"file cut after line {i}", "".join(lines[:i]), [], None
        yield f"line {i} cut in half", "".join(lines[:i]) + lines[i][: len(lines[i]) // 2], [], None
    yield "empty file", "", [], None
    yield "binary file", "\x00\xff\xfe garbage \x01", [], None
    yield "unknown section", text + "[extra]\na = 1\n", [], "extra"
    yield "duplicate key", text + "[data]\nbatch = 3\n", [], None
    for flags, named in [(["--memory-limit", "-5GiB"], "--memory-limit"),
                         (["--memory-limit", "1e400"], "--memory-limit"),
                         (["--memory-fraction", "2"], "--memory-fraction"),
                         (["--memory-fraction", "nan"], "--memory-fraction"),
                         (["--gpu", "\x1b[31mred"], "--gpu"),
                         (["--trial-timeout", "0"], "--trial-timeout"),
                         (["--trial-timeout", "99999999999999999999"], "--trial-timeout"),
                         (["--backend", "tpu"], "--backend"),
                         (["--set", "model.classes"], "model.classes"),
                         (["--set", "nope.key=1"], "nope"),
                         (["--set", "data.batch=\x07"], "data.batch"),
                         (["--memory-limit", "1GiB", "--gpu", "rtx3090"], "--gpu"),
                         (["--no-such-flag"], "--no-such-flag")]:
        yield f"flags {' '.join(flags)[:40]!r}", text, flags, named


def check(binary, name, body, flags, named, tmp):
    path = os.path.join(tmp, "c.toml")
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(body)
    broken = []
    # `inspect` takes no device flags: it gets the `--set`s only.
    sets = sum((["--set", flags[i + 1]] for i, x in enumerate(flags[:-1]) if x == "--set"), [])
    for cmd, extra in ((["inspect"], sets), (["trial", "--fake-trials", "--backend", "cpu"], flags)):
        args = [binary] + cmd + ["--config", path] + extra
        r = subprocess.run(args, capture_output=True, timeout=120, cwd=tmp)
        out = (r.stdout + r.stderr).decode("utf-8", "replace")
        err = r.stderr.decode("utf-8", "replace")
        if r.returncode not in DOCUMENTED or r.returncode < 0:
            broken.append(f"{cmd[0]}: exit {r.returncode}")
        if "panicked" in out or "RUST_BACKTRACE" in out:
            broken.append(f"{cmd[0]}: panic")
        if r.returncode not in (0, 3) and named and named not in err and cmd[0] == "trial":
            broken.append(f"{cmd[0]}: {named!r} not named")
        if any(c in err for c in "\x1b\u202e\x00\x07"):
            broken.append(f"{cmd[0]}: raw control character echoed")
        if len(err) > 6000:
            broken.append(f"{cmd[0]}: {len(err)} characters of error")
        yield r.returncode, broken


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/oom-bisect")
    counts, failures, runs = {}, [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, body, flags, named in cases():
            for code, broken in check(binary, name, body, flags, named, tmp):
                runs += 1
                counts[code] = counts.get(code, 0) + 1
                if broken:
                    failures.append(f"{name}: {'; '.join(dict.fromkeys(broken))}")
    print(f"{runs} invocations")
    for code in sorted(counts):
        print(f"  exit {code:>3}: {counts[code]}")
    print(f"promises broken: {len(failures)}")
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
