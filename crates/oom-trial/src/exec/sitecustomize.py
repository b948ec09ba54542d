"""oom-bisect --exec: records PyTorch's CUDA allocator trace of this process, without a change to
the command's script. oom-bisect writes this file as `sitecustomize.py` into the trial's private
directory and puts that directory first on PYTHONPATH; Python imports it at start-up. It does
nothing until the script imports torch, then turns on `torch.cuda.memory._record_memory_history`
(no stack traces: cheap) and, when the interpreter exits (after an uncaught exception too), writes
the trace's events to $OOM_BISECT_TORCH_TRACE for oom-bisect to replay. A command that serves
trials ($OOM_BISECT_SERVE=1) has each trial's events written as it answers the trial: the trace is
written, then its `trial_done` line goes out, so that oom-bisect finds the trial's trace complete
when it reads the answer. A sitecustomize of the user's own, further along the path, still runs
after this one.
"""

import os
import sys

_OUT = os.environ.get("OOM_BISECT_TORCH_TRACE")
_HERE = os.path.dirname(os.path.abspath(__file__))
# Events already written: a served command's trial is what its allocator did since its last answer.
_written = 0


def _record(torch):
    """Recording on, before the script's first CUDA tensor; the trace written at exit."""
    try:
        if not torch.cuda.is_available():
            return
        torch.cuda.memory._record_memory_history(
            enabled="all", context=None, stacks="python", max_entries=sys.maxsize
        )
    except Exception as e:  # an older torch, no CUDA: the command runs as without oom-bisect
        print(f"oom-bisect: no allocator trace ({e})", file=sys.stderr)
        return
    import atexit

    atexit.register(_write, torch)
    if os.environ.get("OOM_BISECT_SERVE") == "1":
        sys.stdout = _Answers(sys.stdout, torch)


class _Answers:
    """A served command's stdout: a trial's trace is written as the trial's answer goes out."""

    def __init__(self, out, torch):
        self._out = out
        self._torch = torch

    def write(self, text):
        if '"trial_done"' in text:
            _write(self._torch)
        return self._out.write(text)

    def __getattr__(self, name):
        return getattr(self._out, name)


def _write(torch):
    """The events since the last write, as $OOM_BISECT_TORCH_TRACE (replaced whole)."""
    global _written
    import json

    try:
        snapshot = torch.cuda.memory._snapshot()
        traces = (snapshot.get("device_traces") or [[]])[0]
        # Counted first: an entry that cannot be read is never read again for a later trial.
        new, _written = traces[_written:], len(traces)
        # An out-of-memory's entry names the device's free bytes where the others name an address.
        events = [
            [t["action"], t.get("addr", t.get("device_free", 0)), t.get("size", 0), t.get("stream", 0)]
            for t in new
        ]
        # The allocator's settings decide how it holds the events: the replay follows them.
        settings = snapshot.get("allocator_settings") or {}
        conf = [os.environ.get(v, "") for v in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")]
        trace = {
            "events": events,
            "alloc_conf": ",".join(c for c in conf if c),
            "expandable_segments": settings.get("expandable_segments"),
        }
        tmp = _OUT + ".part"
        with open(tmp, "w") as f:
            json.dump(trace, f)
        os.replace(tmp, _OUT)
    except Exception as e:
        print(f"oom-bisect: the allocator trace could not be written ({e})", file=sys.stderr)


class _AfterTorch:
    """A finder that lets torch load as usual, then starts recording."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            load = loader.exec_module

            def exec_module(module):
                load(module)
                _record(module)

            loader.exec_module = exec_module
        return spec


def _chain():
    """The user's own sitecustomize, which this file hides by coming first on the path."""
    import importlib.machinery
    import importlib.util

    for entry in sys.path:
        if not entry or os.path.abspath(entry) == _HERE:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


if _OUT:
    sys.meta_path.insert(0, _AfterTorch())
_chain()
