#!/usr/bin/env python3
"""Faults against the real binary, `--exec` commands that fail in every
way a training script can (and some that only look as if they did), kills with and without the
kernel's OOM killer, escaped processes, huge and invalid output; outputs that name inputs, journals
with bytes that are not UTF-8, closed pipes, file-size limits, odd file names; `trial`'s exit codes
as `git bisect run` reads them. Each case is checked for what docs/reliability.md promises and
counted: inputs, clear errors, panics, wrong exit codes, data lost, orphans, misclassifications.
Prints the table and every broken promise; exits 1 if any.

    python3 tools/reliability/faults.py target/release/oom-bisect
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

TINY = """[model]
backbone = "resnet18"
output_stride = 16
classes = 4
aspp_channels = 32

[data]
batch = 2
size = [64, 64]
"""
TORCH_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
HEALTH = "echo 'health check: no CUDA out of memory errors so far'"
# (name, command, outcome it must get, extra flags). Every `sleep 7NNN` must be gone afterwards.
EXEC = [
    ("exit 0", "exit 0", "fits", []),
    ("prints and fits", "echo step 1 loss 0.5", "fits", []),
    ("invalid UTF-8, then fits", "printf '\\377\\376 tqdm\\n'; sleep 0.2; echo done", "fits", []),
    ("an OOM it recovered from", f"echo '{TORCH_OOM}'; echo retrying; exit 0", "fits", []),
    ("a 20 MB line, fits", "head -c 20000000 /dev/zero | tr '\\000' x; echo", "fits", []),
    ("100 MB of short lines", "yes 'step 1 loss 0.5' | head -c 100000000", "fits", []),
    ("a daemon left behind", "setsid sleep 7001 </dev/null >/dev/null 2>&1 & exit 0", "fits", []),
    ("a background job left behind", "sleep 7002 & exit 0", "fits", []),
    ("torch OOM", f"echo '{TORCH_OOM}' >&2; exit 1", "oom", []),
    ("torch OOM in a traceback, W&B after",
     f"printf 'Traceback (most recent call last):\\n  File \"t.py\"\\n{TORCH_OOM}\\nwandb: Synced\\n' >&2; exit 1",
     "oom", []),
    ("torch OOM after invalid UTF-8", f"printf '\\377\\n'; echo '{TORCH_OOM}'; exit 1", "oom", []),
    ("torch OOM after a 20 MB line",
     f"head -c 20000000 /dev/zero | tr '\\000' x; echo; echo '{TORCH_OOM}' >&2; exit 1", "oom", []),
    ("JAX OOM", "echo 'jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.' >&2; exit 1", "oom", []),
    ("TensorFlow OOM", "echo 'tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor' >&2; exit 1", "oom", []),
    ("MemoryError", "python3 -c 'raise MemoryError'", "oom", []),
    ("Rust panic, CUDA OOM", "printf \"thread 'main' panicked at src/main.rs:1:1:\\nDriverError(CUDA_ERROR_OUT_OF_MEMORY, \\\"out of memory\\\")\\n\" >&2; exit 101", "oom", []),
    ("Java OOM", "echo 'Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space' >&2; exit 1", "oom", []),
    ("std::bad_alloc", "printf \"terminate called after throwing an instance of 'std::bad_alloc'\\n  what():  std::bad_alloc\\n\" >&2; exit 134", "oom", []),
    ("torchrun around a worker's OOM", f"echo '{TORCH_OOM}' >&2; echo 'torch.distributed.elastic.multiprocessing.errors.ChildFailedError:' >&2; exit 1", "oom", []),
    ("health line, then KeyError", f"{HEALTH}; echo \"KeyError: 'labels'\" >&2; exit 1", "error", []),
    ("recovered OOM, then a crash", f"echo '{TORCH_OOM}'; echo 'ZeroDivisionError: division by zero' >&2; exit 1", "error", []),
    ("OOM text in a config dump, then ValueError", "echo 'config: {\"msg\": \"RuntimeError: CUDA out of memory\"}'; echo 'ValueError: lr' >&2; exit 1", "error", []),
    ("OOM text, a success line, exit 1", "echo 'WARNING caught CUDA out of memory'; echo 'training finished'; exit 1", "error", []),
    ("chained: OOM, then another exception", f"printf '{TORCH_OOM}\\n\\nDuring handling of the above exception, another exception occurred:\\n\\nRuntimeError: read-only\\n' >&2; exit 1", "error", []),
    ("a 20 MB line, then ValueError", "head -c 20000000 /dev/zero | tr '\\000' x; echo; echo 'ValueError: boom' >&2; exit 1", "error", []),
    ("SIGKILL by itself", "sleep 1; kill -9 $$", "error", []),
    ("exit 137 from a shell", "sleep 1; exit 137", "error", []),
    ("exit 1", "exit 1", "error", []),
    ("a control-character command", "true \x1b[2J \u202e; exit 1", "error", []),
    ("past its time", "sleep 7003", "timeout", ["--trial-timeout", "2"]),
    ("past its time, a setsid child holding the output",
     "setsid sh -c 'sleep 7004' & sleep 7005", "timeout", ["--trial-timeout", "2"]),
    ("an OOM message, then killed by a signal", f"echo '{TORCH_OOM}'; kill -TERM $$", "error", []),
    ("an OOM message, then SIGKILL", f"echo '{TORCH_OOM}'; kill -9 $$", "error", []),
    ("a health line, exit 1", "echo 'health: no CUDA out of memory so far'; exit 1", "error", []),
    ("an AssertionError about OOM",
     "echo 'AssertionError: expected no torch.OutOfMemoryError during warm-up' >&2; exit 1", "error", []),
    ("a torch OOM, then 'Exception ignored in'",
     f"printf '{TORCH_OOM}\\nException ignored in: <function _after_fork>\\nTypeError: x\\n' >&2; exit 1",
     "oom", []),
    ("NCCL's Cuda failure out of memory",
     "echo \"torch.distributed.DistBackendError: NCCL error: unhandled cuda error, NCCL version 2.21.5\" >&2; "
     "echo \"Last error: Cuda failure 'out of memory'\" >&2; exit 1", "oom", []),
    # The served protocol: an answer before its request, a second answer, and no answer at all.
    ("served: an answer before its request",
     "echo '{\"oom_bisect\":{\"trial_done\":\"fits\"}}'; exec cat", "error", ["--serve"]),
    ("served: exit 0 without answering", "read line; exit 0", "error", ["--serve"]),
    # A command that would serve, with its input detached: the end of its input is no fit.
    ("serve auto, input detached",
     f"{{ if [ \"$OOM_BISECT_SERVE\" = 1 ]; then read line || exit 0; fi; echo '{TORCH_OOM}' >&2; exit 1; }} </dev/null",
     "oom", []),
    # A caught OOM logged on stdout, flushed at exit after the traceback of what failed.
    ("a logged OOM flushed after a traceback",
     f"python3 -c \"print('{TORCH_OOM} (caught, batch halved)'); raise ValueError('labels')\"", "error", []),
    ("served: an answer of 9 KB",
     "python3 -c \"import json, sys; r = json.loads(sys.stdin.readline()); "
     f"print(json.dumps({{'oom_bisect': {{'trial_done': 'failed', 'id': r['id'], 'message': 'x' * 9000 + chr(10) + '{TORCH_OOM}'}}}}), flush=True); "
     "sys.stdin.read()\"",
     "oom", ["--serve", "--trial-timeout", "60"]),
]
CODES = {"fits": 0, "oom": 3, "error": 125, "timeout": 125}


class Tally:
    def __init__(self):
        self.n = {k: 0 for k in ["inputs", "clear errors", "panics", "wrong exit codes", "data lost",
                                 "orphans", "misclassifications"]}
        self.broken = []

    def fail(self, kind, name, why):
        self.n[kind] += 1
        self.broken.append(f"{kind}: {name}: {why}")


def run(binary, args, cwd, env=None, **kw):
    e = dict(os.environ, OOM_BISECT_KERNEL_CACHE="", **(env or {}))
    return subprocess.run([binary] + args, cwd=cwd, env=e, capture_output=True, timeout=300, **kw)


def common_checks(t, name, r):
    out = (r.stdout + r.stderr).decode("utf-8", "replace")
    t.n["inputs"] += 1
    # Ours, not a command's own text: a panic of this program names one of its crates.
    if "panicked at crates/" in out or r.returncode == 101:
        t.fail("panics", name, out[-300:])
    if any(c in r.stderr.decode("utf-8", "replace") for c in "\x1b\u202e"):
        t.fail("clear errors", name, "raw control character echoed")
    return out


def orphans(marker_prefix="sleep 70"):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if cmd.startswith(marker_prefix):
            found.append(cmd)
    return found


def bystander_oom_kill(tmp):
    """A process OOM-killed in a small memory cgroup of its own (cgroup v1), if one can be made."""
    try:
        table = open("/proc/self/cgroup").read()
        path = next(l.split(":", 2)[2] for l in table.splitlines() if "memory" in l.split(":")[1].split(","))
        d = f"/sys/fs/cgroup/memory{path}/reliability-bystander-{os.getpid()}"
        os.makedirs(d, exist_ok=True)
        open(f"{d}/memory.limit_in_bytes", "w").write("32M")
    except (OSError, StopIteration):
        return None

    def kill():
        time.sleep(0.4)
        subprocess.run(["sh", "-c", f"echo $$ > {d}/cgroup.procs; exec python3 -c 'b = bytearray(256 << 20)'"])
    return threading.Thread(target=kill), d


def exec_cases(binary, t, tmp):
    cfg = os.path.join(tmp, "c.toml")
    open(cfg, "w").write(TINY)
    for name, cmd, want, extra in EXEC:
        j = os.path.join(tmp, "r.json")
        if os.path.exists(j):
            os.remove(j)
        bystander = bystander_oom_kill(tmp) if name in ("SIGKILL by itself", "exit 137 from a shell") else None
        if bystander:
            bystander[0].start()
        r = run(binary, ["trial", "--config", cfg, "--backend", "cpu", "--memory-limit", "200MiB",
                         "--json", j] + extra + ["--exec", cmd], tmp)
        if bystander:
            bystander[0].join()
            os.rmdir(bystander[1])
        common_checks(t, name, r)
        try:
            got = json.load(open(j))["outcome"]
        except (OSError, ValueError, KeyError):
            got = None
        if got != want:
            t.fail("misclassifications", name, f"{got} instead of {want}")
        if r.returncode != CODES[want]:
            t.fail("wrong exit codes", name, f"exit {r.returncode}, not {CODES[want]}")
        if os.path.exists(j) and os.path.getsize(j) > 100_000:
            t.fail("clear errors", name, f"a {os.path.getsize(j)}-byte report")
        time.sleep(0.2)
        left = orphans()
        if left:
            t.fail("orphans", name, ", ".join(left))
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    if open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"sleep\x0070"):
                        os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass


def bisect(binary, tmp, cfg, extra, **kw):
    return run(binary, ["bisect", "--config", cfg, "--fake-trials", "--axes", "batch",
                        "--journal", os.path.join(tmp, "j")] + extra, tmp, **kw)


def journal_of(tmp):
    d = os.path.join(tmp, "j")
    return next(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".jsonl"))


def file_cases(binary, t, tmp):
    cfg = os.path.join(tmp, "q.toml")
    open(cfg, "w").write(TINY.replace("batch = 2", "batch = 8"))
    first = bisect(binary, tmp, cfg, ["--memory-limit", "150MiB"])
    common_checks(t, "a first diagnosis", first)
    journal = journal_of(tmp)
    before = open(journal, "rb").read()
    for name, extra in [("--json is the config", ["--json", cfg]),
                        ("--json is the journal", ["--json", journal]),
                        ("--html is the journal", ["--html", journal]),
                        ("--json and --html the same", ["--json", "r.json", "--html", "./r.json"]),
                        ("--html unwritable", ["--html", "/proc/none/r.html"])]:
        r = bisect(binary, tmp, cfg, ["--memory-limit", "150MiB"] + extra)
        common_checks(t, name, r)
        if r.returncode != 14:
            t.fail("wrong exit codes", name, f"exit {r.returncode}")
        else:
            t.n["clear errors"] += 1
        if open(cfg).read() != TINY.replace("batch = 2", "batch = 8") or open(journal, "rb").read() != before:
            t.fail("data lost", name, "an input was changed")
    # A link planted where an output goes is never written through.
    victim = os.path.join(tmp, "victim.txt")
    open(victim, "w").write("precious")
    for flag in ["--json", "--html"]:
        name = f"{flag} is a planted link"
        link = os.path.join(tmp, f"link{flag}")
        if not os.path.lexists(link):
            os.symlink(victim, link)
        r = bisect(binary, tmp, cfg, ["--memory-limit", "150MiB", flag, link])
        common_checks(t, name, r)
        if r.returncode != 14:
            t.fail("wrong exit codes", name, f"exit {r.returncode}")
        else:
            t.n["clear errors"] += 1
        if open(victim).read() != "precious":
            t.fail("data lost", name, "the file the link points to was changed")
    # A launcher's task count from its environment, checked.
    for tasks in ["100000", "0", "banana"]:
        name = f"SLURM_NTASKS={tasks}"
        r = run(binary, ["bisect", "--config", cfg, "--fake-trials", "--axes", "batch", "--memory-limit",
                         "150MiB", "--launcher", "env", "--journal", os.path.join(tmp, "jn")], tmp,
                env={"SLURM_NTASKS": tasks})
        common_checks(t, name, r)
        if r.returncode != 2 or b"SLURM_NTASKS" not in r.stderr:
            t.fail("wrong exit codes", name, f"exit {r.returncode}")
        else:
            t.n["clear errors"] += 1
    # A line cut inside a character, first in the journal: every record still replayed.
    n = before.count(b"\n")
    open(journal, "wb").write(b'{"key": "\xe4\xb8\n' + before)
    r = bisect(binary, tmp, cfg, ["--memory-limit", "150MiB"])
    common_checks(t, "a journal line that is not UTF-8", r)
    if f"resuming: {n} trials".encode() not in r.stderr:
        t.fail("data lost", "a journal line that is not UTF-8", r.stderr.decode()[-300:])
    # Closed pipes and a file-size limit cost no file and no report.
    for name, kw in [("closed stdout", {"stdout": subprocess.DEVNULL}), ("closed stderr", {"stderr": subprocess.DEVNULL})]:
        p = subprocess.Popen([binary, "bisect", "--config", cfg, "--fake-trials", "--axes", "batch",
                              "--memory-limit", "150MiB", "--json", "closed.json", "--fresh"],
                             cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        (p.stdout if "stdout" in name else p.stderr).close()
        (p.stderr if "stdout" in name else p.stdout).read()
        code = p.wait()
        t.n["inputs"] += 1
        if code != 0:
            t.fail("wrong exit codes", name, f"exit {code}")
        if not os.path.exists(os.path.join(tmp, "closed.json")):
            t.fail("data lost", name, "no JSON")
        os.remove(os.path.join(tmp, "closed.json"))

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    r = subprocess.run([binary, "bisect", "--config", cfg, "--fake-trials", "--axes", "batch",
                        "--memory-limit", "150MiB", "--json", "big.json", "--fresh",
                        "--journal", "jl"], cwd=tmp, capture_output=True, preexec_fn=limit)
    common_checks(t, "ulimit -f", r)
    if r.returncode != 14 or b"Verdict:" not in r.stdout:
        t.fail("data lost", "ulimit -f", f"exit {r.returncode}, report printed: {b'Verdict:' in r.stdout}")
    # Odd names.
    for name, fname in [("a config name that is not UTF-8", b"c\xff.toml"), ("a newline in a config name", b"a\nb.toml")]:
        path = os.path.join(tmp.encode(), fname)
        open(path, "w").write(TINY)
        r = subprocess.run([binary.encode(), b"bisect", b"--config", path, b"--fake-trials", b"--axes",
                            b"batch", b"--memory-limit", b"100MiB"], cwd=tmp, capture_output=True)
        common_checks(t, name, r)
        if r.returncode != 0:
            t.fail("wrong exit codes", name, f"exit {r.returncode}")


def signal_cases(binary, t, tmp):
    """Every way the driver may end while a command runs: what the command detached with
    `setsid` must die with it."""
    cfg = os.path.join(tmp, "s.toml")
    open(cfg, "w").write(TINY)
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        name = f"driver killed by {sig.name}, a setsid child running"
        cmd = "n=70; setsid sleep ${n}11 </dev/null >/dev/null 2>&1 & sleep ${n}12"
        p = subprocess.Popen([binary, "trial", "--config", cfg, "--backend", "cpu", "--exec", cmd],
                             cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t.n["inputs"] += 1
        deadline = time.time() + 20
        while not orphans("sleep 7012") and time.time() < deadline:
            time.sleep(0.05)
        p.send_signal(sig)
        p.wait()
        time.sleep(1.0)
        left = orphans("sleep 701")
        if left:
            t.fail("orphans", name, ", ".join(left))
            subprocess.run(["pkill", "-9", "-f", "^sleep 701"])


def git_bisect_codes(binary, t, tmp):
    """`trial`'s exit codes, as `git bisect run` reads them."""
    cfg = os.path.join(tmp, "g.toml")
    open(cfg, "w").write(TINY)
    cases = [("fits", ["--fake-trials", "--backend", "cpu", "--memory-limit", "300MiB"], 0),
             ("out of memory", ["--fake-trials", "--backend", "cpu", "--memory-limit", "20MiB"], 3),
             ("an invalid config", ["--fake-trials", "--set", "model.depth=3"], 125),
             ("an unreadable config", ["--fake-trials"], 125),
             ("a bad flag", ["--no-such-flag"], 202),
             ("a negative --jobs", ["--jobs", "-1"], 202),
             ("a bad ceiling", ["--backend", "cpu", "--memory-limit", "24 parsecs"], 213),
             ("an unwritable output", ["--fake-trials", "--json", "/proc/none/r.json"], 214)]
    if not os.path.exists("/dev/nvidia0"):
        cases.append(("no device", ["--backend", "cuda"], 212))
    for name, flags, want in cases:
        path = "/nonexistent.toml" if name == "an unreadable config" else cfg
        r = run(binary, ["trial", "--config", path] + flags, tmp)
        common_checks(t, f"trial: {name}", r)
        if r.returncode != want:
            t.fail("wrong exit codes", f"trial: {name}", f"exit {r.returncode}, not {want}")
        elif want not in (0, 3):
            t.n["clear errors"] += 1
    # A command line git would run at every commit: a flag before `trial`, a typo of it.
    for name, args in [("a flag before trial", ["--backend", "cpu", "trial", "--config", cfg]),
                       ("trail for trial", ["trail", "--config", cfg])]:
        r = run(binary, args, tmp)
        common_checks(t, name, r)
        if r.returncode != 202:
            t.fail("wrong exit codes", name, f"exit {r.returncode}, not 202")


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/oom-bisect")
    t = Tally()
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        exec_cases(binary, t, tmp)
        signal_cases(binary, t, tmp)
        file_cases(binary, t, tmp)
        git_bisect_codes(binary, t, tmp)
    for k, v in t.n.items():
        print(f"{k:>20}: {v}")
    print(f"({time.time() - started:.0f} s)")
    for b in t.broken:
        print("  " + b)
    bad = sum(t.n[k] for k in ["panics", "wrong exit codes", "data lost", "orphans", "misclassifications"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
