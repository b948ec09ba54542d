#!/usr/bin/env python3
"""The PyTorch reference for oom-bisect: the same torchvision-style DeepLabV3+ as the burn model
(crates/deeplab), built from the same TOML config, trained for `train.steps` real steps on CUDA (or
the CPU with `--device cpu`). Every key of configs/README.md is honoured: identity swaps and
`truncate_after` with the same module and stage ids, precision (`mixed-*` as autocast with fp32
master weights, `mixed-f16` with a GradScaler, `f16`/`bf16` as the whole model in that type),
checkpointing as torch.utils.checkpoint around every residual block.

As the trial of `oom-bisect bisect --exec 'python3 tools/pytorch/deeplabv3plus.py {config}'` (the
config path may also come from $OOM_BISECT_CONFIG): oom-bisect holds the memory ceiling (with
`--ceiling-by command`, this script holds $OOM_BISECT_MEMORY_LIMIT itself, as `--cap` does), and it
prints `{"oom_bisect": {"stage": …, "step": …, "in_use_bytes": …}}` at every stage, so that an
out-of-memory is placed where it happened; the peak is oom-bisect's own reading of the device.
Under `--serve` ($OOM_BISECT_SERVE=1) it answers trial after trial in one process: one
`{"config": PATH, "id": ID}` line on stdin each, ended by a `trial_done` line echoing its `id`.

Prints one JSON line per step with PyTorch's own counters (`max_memory_allocated`,
`max_memory_reserved`, reset before the run) and, at the end, a summary line. With `--memory-limit`,
the card is first filled with a ballast so that only that much device memory is usable, CUDA context
included (what oom-bisect's ceiling does); the ballast is left out of every figure printed.

Exit codes: 0 the steps ran; 3 out of memory (torch.OutOfMemoryError); 4 PyTorch refused the
configuration (BatchNorm with one value per channel at batch 1: the ASPP's image pooling); 2 a key this
script cannot honour, or a bad argument; anything else is an error.

    python3 tools/pytorch/deeplabv3plus.py configs/deeplabv3plus-r50-os8.toml --set data.batch=2
    python3 tools/pytorch/deeplabv3plus.py CONFIG --memory-limit 24GiB --params
    python3 tools/pytorch/deeplabv3plus.py CONFIG --modules    # ids and parameters, as `inspect`
"""

import argparse
import ctypes
import gc
import json
import math
import os
import sys
import threading
import time
import tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F

# Keys of configs/README.md this script honours; the others (device.*) are oom-bisect's own.
HONOURED = {
    "model": {"backbone", "output_stride", "classes", "aspp_rates", "aspp_channels", "separable",
              "attention_heads", "attention_kernel", "aux_head", "identity", "truncate_after",
              "batch_norm"},
    "data": {"batch", "size"},
    "train": {"optimizer", "learning_rate", "momentum", "weight_decay", "loss_resolution",
              "precision", "checkpointing", "phase", "steps", "premade_state", "one_step_below"},
    "device": {"backend", "memory_limit", "memory_fraction", "gpu", "memory_model"},
}
LAYERS = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3], "resnet50": [3, 4, 6, 3],
          "resnet101": [3, 4, 23, 3], "resnet152": [3, 8, 36, 3]}
AUX_WEIGHT = 0.5
EXIT_OOM, EXIT_REFUSED, EXIT_UNSUPPORTED = 3, 4, 2
# How often a capped run measures again what it holds outside the caching allocator.
RECAP_SECONDS = 0.01


class Unsupported(Exception):
    pass


def parse_value(raw):
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def load(path, sets):
    with open(path, "rb") as f:
        c = tomllib.load(f)
    for s in sets:
        key, _, raw = s.partition("=")
        section, _, leaf = key.strip().partition(".")
        c.setdefault(section, {})[leaf] = parse_value(raw.strip())
    for section, keys in c.items():
        unknown = set(keys) - HONOURED.get(section, set())
        if unknown:
            raise Unsupported(f"unknown keys {sorted(unknown)} in [{section}]")
    m, t = c["model"], c.setdefault("train", {})
    m.setdefault("aspp_channels", 256)
    m.setdefault("attention_kernel", "math")
    if m["attention_kernel"] not in ("math", "efficient"):
        raise Unsupported(f"model.attention_kernel = {m['attention_kernel']!r}: math or efficient")
    m.setdefault("aspp_rates", {8: [12, 24, 36], 16: [6, 12, 18], 32: [3, 6, 9]}[m["output_stride"]])
    for k, v in [("optimizer", "sgd"), ("learning_rate", 0.01), ("momentum", 0.9),
                 ("weight_decay", 1e-4), ("loss_resolution", "full"), ("precision", "f32"),
                 ("checkpointing", False), ("phase", "step"), ("premade_state", False)]:
        t.setdefault(k, v)
    # As oom-bisect's Config::steps and Config::one_step_below: 2 steps and 0.9 under the pytorch
    # memory model, 3 and 0 (every step) under burn's.
    burn = c.get("device", {}).get("memory_model") == "burn"
    t.setdefault("steps", 3 if burn else 2)
    t.setdefault("one_step_below", 0.0 if burn else 0.9)
    return c


def conv_bn_relu(cin, cout, k=1, dilation=1, groups=1):
    pad = dilation * (k - 1) // 2
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=pad, dilation=dilation, groups=groups,
                                   bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def conv3x3(cin, cout, dilation, separable):
    if separable:
        return nn.Sequential(conv_bn_relu(cin, cin, 3, dilation, groups=cin),
                             conv_bn_relu(cin, cout))
    return conv_bn_relu(cin, cout, 3, dilation)


class Block(nn.Module):
    """torchvision's Bottleneck (stride on the 3×3) or BasicBlock (dilated, as the burn model)."""

    def __init__(self, inplanes, planes, stride, dilation, downsample, bottleneck):
        super().__init__()
        e = 4 if bottleneck else 1
        self.bottleneck = bottleneck
        d = dilation
        if bottleneck:
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, padding=d, dilation=d, bias=False)
            self.conv3 = nn.Conv2d(planes, planes * e, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * e)
        else:
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, padding=d, dilation=d, bias=False)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, padding=d, dilation=d, bias=False)
        self.bn1, self.bn2 = nn.BatchNorm2d(planes), nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential(
            nn.Conv2d(inplanes, planes * e, 1, stride, bias=False),
            nn.BatchNorm2d(planes * e)) if downsample else None

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.bottleneck:
            out = self.bn3(self.conv3(self.relu(out)))
        return self.relu(out + identity)


def block_specs(backbone, output_stride):
    """As `block_specs` in crates/deeplab/src/arch.rs (torchvision's `_make_layer`)."""
    replace = {8: [False, True, True], 16: [False, False, True]}.get(output_stride, [False] * 3)
    e = 4 if backbone in ("resnet50", "resnet101", "resnet152") else 1
    inplanes, dilation, out = 64, 1, []
    for i, n in enumerate(LAYERS[backbone]):
        planes, stride, previous = 64 << i, (1 if i == 0 else 2), dilation
        if i > 0 and replace[i - 1]:
            dilation, stride = dilation * stride, 1
        layer = [(inplanes, planes, stride, previous, stride != 1 or inplanes != planes * e)]
        inplanes = planes * e
        layer += [(inplanes, planes, 1, dilation, False)] * (n - 1)
        out.append(layer)
    return out, e


class DeepLabV3Plus(nn.Module):
    """Module ids are oom-bisect's (`oom-bisect inspect`); `identity` swaps them as the burn model does.
    Stage ids (`truncate_after`, the marks) are those of crates/deeplab/src/arch.rs."""

    def __init__(self, m):
        super().__init__()
        swapped = set(m.get("identity", []))
        on = lambda i: i not in swapped
        bottleneck = m["backbone"] in ("resnet50", "resnet101", "resnet152")
        specs, e = block_specs(m["backbone"], m["output_stride"])
        for i, layer in enumerate(specs):
            if not on(f"backbone.layer{i + 1}.0"):
                raise Unsupported(f"backbone.layer{i + 1}.0 cannot be swapped (nor in oom-bisect)")
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.ModuleList(nn.ModuleList(
            Block(*s, bottleneck) if on(f"backbone.layer{i + 1}.{k}") else nn.Identity()
            for k, s in enumerate(layer)) for i, layer in enumerate(specs))
        high, c, sep = 512 * e, m["aspp_channels"], m.get("separable", False)
        names = [f"branch{i}" for i in range(4)]
        kept = [b for b in names + ["pool"] if on(f"aspp.{b}")]
        self.aspp_on = on("aspp") and any(on(f"aspp.{b}") for b in names)
        aspp_out = c if self.aspp_on else high
        self.branches, self.pool = nn.ModuleDict(), None
        if self.aspp_on:
            rates = m["aspp_rates"]
            if on("aspp.branch0"):
                self.branches["branch0"] = conv_bn_relu(high, c)
            for b, r in zip(names[1:], rates):
                if on(f"aspp.{b}"):
                    self.branches[b] = conv3x3(high, c, r, sep)
            self.pool = conv_bn_relu(high, c) if on("aspp.pool") else None
            self.project = nn.Sequential(conv_bn_relu(len(kept) * c, c), nn.Dropout(0.5))
        heads = m.get("attention_heads", 0)
        self.has_attention_stage = heads > 0
        self.attention = nn.MultiheadAttention(aspp_out, heads, batch_first=True) \
            if heads and on("attention") else None
        self.fused_attention = False
        inter = 256 * e // 4
        self.aux = nn.Sequential(conv_bn_relu(256 * e, inter, 3), nn.Dropout(0.1),
                                 nn.Conv2d(inter, m["classes"], 1)) \
            if m.get("aux_head") and on("aux_head") else None
        # The decoder's parts exist only when it runs (as in the burn model: no unused parameters).
        self.decoder_on = on("decoder")
        low = 48 if on("decoder.project") else 64 * e
        self.low_project = conv_bn_relu(64 * e, 48) if self.decoder_on and on("decoder.project") else None
        ch, self.fuse_ids, fuse = aspp_out + low, [], []
        for k in range(2):
            if self.decoder_on and on(f"decoder.fuse.{k}"):
                fuse.append(conv3x3(ch, 256, 1, sep))
                self.fuse_ids.append(k)
                ch = 256
        self.fuse = nn.Sequential(*fuse)
        self.classifier = nn.Conv2d(ch if self.decoder_on else aspp_out, m["classes"], 1)
        self.truncate_after = m.get("truncate_after")

    def module_ids(self):
        """oom-bisect's module ids and the PyTorch modules they name (those that exist)."""
        ids = {"backbone.conv1": self.stem[0], "backbone.bn1": self.stem[1]}
        for i, layer in enumerate(self.layers):
            for k, block in enumerate(layer):
                ids[f"backbone.layer{i + 1}.{k}"] = block
        if self.aspp_on:
            parts = list(self.branches.values()) + [self.pool, self.project]
            ids["aspp"] = nn.ModuleList(p for p in parts if p is not None)
            ids.update({f"aspp.{b}": mod for b, mod in self.branches.items()})
            ids["aspp.pool"], ids["aspp.project"] = self.pool, self.project
        ids["attention"], ids["aux_head"] = self.attention, self.aux
        if self.decoder_on:
            ids["decoder"] = nn.ModuleList(p for p in [self.low_project, self.fuse] if p is not None)
            ids["decoder.project"] = self.low_project
            ids.update({f"decoder.fuse.{k}": self.fuse[n] for n, k in enumerate(self.fuse_ids)})
        ids["classifier"] = self.classifier
        return {k: v for k, v in ids.items() if v is not None}

    def trained(self):
        """The parameters a training step trains: those of the stages up to the truncation point
        (past it no gradient, and a real step makes no optimizer state for them), as the burn
        model's `visit_trained`."""
        stages = [("backbone.stem", [self.stem])]
        for i, layer in enumerate(self.layers):
            for k, block in enumerate(layer):
                aux = [self.aux] if i == 2 and k + 1 == len(layer) else []
                stages.append((f"backbone.layer{i + 1}.{k}", [block] + aux))
        aspp = list(self.branches.values()) + [self.pool, self.project] if self.aspp_on else []
        stages += [("aspp", aspp), ("attention", [self.attention]),
                   ("decoder", [self.low_project, self.fuse]), ("classifier", [self.classifier])]
        params = []
        for stage, mods in stages:
            params += [p for m in mods if m is not None for p in m.parameters()]
            if stage == self.truncate_after:
                break
        return params

    def forward(self, x, size, checkpoint, mark):
        """Logits and aux logits, or the truncation stage's output and aux logits (`truncated`).
        `mark(id)` is called once each stage's output exists."""
        run = (lambda f, *a: torch.utils.checkpoint.checkpoint(f, *a, use_reentrant=False)) \
            if checkpoint else (lambda f, *a: f(*a))
        low, aux = None, None

        def done(stage):
            mark(stage)
            return stage == self.truncate_after

        def up(a, to):
            return F.interpolate(a, size=to, mode="bilinear", align_corners=False) if a is not None else None

        x = self.stem(x)
        if done("backbone.stem"):
            return x, None, True
        for i, layer in enumerate(self.layers):
            for k, block in enumerate(layer):
                x = run(block, x)
                last = k + 1 == len(layer)
                if i == 2 and last and self.aux is not None:
                    aux = self.aux(x)
                if done(f"backbone.layer{i + 1}.{k}"):
                    return x, up(aux, size), True
                if i == 2 and last and aux is not None:
                    mark("aux_head")
                if i == 0 and last:
                    low = x
        if self.aspp_on:
            h, w = x.shape[-2:]
            outs = [b(x) for b in self.branches.values()]
            if self.pool is not None:
                outs.append(up(self.pool(F.adaptive_avg_pool2d(x, 1)), (h, w)))
            x = self.project(torch.cat(outs, 1))
        if done("aspp"):
            return x, up(aux, size), True
        if self.has_attention_stage:
            if self.attention is not None:
                b, c, h, w = x.shape
                t = x.flatten(2).transpose(1, 2)
                # nn.MultiheadAttention's default call (need_weights=True) materialises the attention
                # matrix, as the burn model does; need_weights=False takes PyTorch's fused kernels.
                a = self.attention(t, t, t, need_weights=not self.fused_attention)[0]
                x = (t + a).transpose(1, 2).reshape(b, c, h, w)
            if done("attention"):
                return x, up(aux, size), True
        if self.decoder_on:
            if self.low_project is not None:
                low = self.low_project(low)
            x = up(x, low.shape[-2:])
            x = self.fuse(torch.cat([x, low], 1))
        if done("decoder"):
            return x, up(aux, size), True
        logits = up(self.classifier(x), size)
        mark("classifier")
        return logits, up(aux, size), False


def parse_bytes(s):
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
    for u, f in units.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * f)
    return int(s)


class Nvml:
    """NVML's per-process figure for this process on its device (the CUDA context, loaded modules
    and the allocator's segments), read through libnvidia-ml with ctypes."""

    class Process(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                    ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.lib.nvmlInit_v2()
        self.handle = nvml_handle(self.lib)

    def used(self):
        count, procs = ctypes.c_uint(64), (self.Process * 64)()
        rc = self.lib.nvmlDeviceGetComputeRunningProcesses_v3(self.handle, ctypes.byref(count),
                                                              procs)
        if rc != 0:
            raise RuntimeError(f"NVML could not list the device's processes (error {rc})")
        mine = [p.used for p in procs[: count.value] if p.pid == os.getpid()]
        if not mine:
            raise RuntimeError("NVML does not list this process on the device")
        return mine[0]


def nvml_handle(nvml):
    """NVML's handle of this process's CUDA device: by its PCI address, since CUDA_VISIBLE_DEVICES
    renumbers CUDA's devices and never NVML's; by index where torch does not give the address."""
    handle = ctypes.c_void_p()
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    if all(hasattr(p, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        bus = f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0".encode()
        if nvml.nvmlDeviceGetHandleByPciBusId_v2(ctypes.c_char_p(bus), ctypes.byref(handle)) == 0:
            return handle
    index = ctypes.c_uint(torch.cuda.current_device())
    rc = nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))
    if rc != 0:
        raise RuntimeError(f"NVML has no device for CUDA device {index.value} (error {rc})")
    return handle


def cap(limit):
    """Holds `limit` bytes, context included, inside this process, so that several runs can share
    one card (oom-bisect's `--ceiling-by command`): the caching allocator may reserve the limit less
    what the process holds outside it (measured by NVML, not assumed). That outside part grows
    while the run loads the kernels it launches for the first time (CUDA loads modules lazily), so
    it is measured again every 10 ms on a thread of its own. Returns no ballast."""
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the context exists from here on
    nvml, dev = Nvml(), torch.cuda.current_device()
    # What the allocator multiplies the fraction by (cudaMemGetInfo's total, not the device
    # properties' figure, which may differ).
    total = torch.cuda.mem_get_info(dev)[1]
    fraction = [None]

    def outside():
        # The allocator's figure on both sides of NVML's: a segment allocated or freed between the
        # two readings would count as outside (or not) for a moment; read again then.
        while True:
            reserved = torch.cuda.memory_reserved(dev)
            used = nvml.used()
            if torch.cuda.memory_reserved(dev) == reserved:
                break
        held = used - reserved
        f = max(limit - held, 0) / total
        if f != fraction[0]:
            torch.cuda.set_per_process_memory_fraction(f, dev)
            fraction[0] = f
        return held

    emit(context_bytes=outside())

    def follow():
        while True:
            time.sleep(RECAP_SECONDS)
            outside()

    threading.Thread(target=follow, daemon=True).start()
    return None, 0


def ballast(limit):
    """Fills the card so that `limit` bytes are usable, context included; returns the ballast's size."""
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the context exists from here on
    free, total = torch.cuda.mem_get_info()
    used = total - free
    size = free - max(limit - used, 0)
    if size <= 0:
        return None, 0
    return torch.empty(size, dtype=torch.uint8, device="cuda"), size


def emit(**kv):
    print(json.dumps(kv), flush=True)


class Marks:
    """The `{"oom_bisect": …}` lines oom-bisect reads (only when it runs this script): where the step
    is, with the memory PyTorch's allocator holds there (a host-side counter: no synchronisation)."""

    def __init__(self, on, device):
        self.on, self.cuda, self.step, self.phase = on, device == "cuda", 1, "forward"

    def __call__(self, stage):
        if self.on:
            figures = {"stage": stage, "step": self.step, "phase": self.phase}
            if self.cuda:
                figures["in_use_bytes"] = torch.cuda.memory_allocated()
            say(figures)

    def step_done(self, loss):
        """The step has finished: what it leaves held (weights, optimizer state, the batch) is what
        does not grow with the batch, from which oom-bisect predicts a boundary. A step whose loss
        is not finite is not reported (JSON has no NaN)."""
        if self.on and self.cuda and math.isfinite(loss):
            say({"step_done": self.step, "loss": loss, "in_use_bytes": torch.cuda.memory_allocated()})


def say(figures):
    """One line oom-bisect reads as the command's own figures."""
    print(json.dumps({"oom_bisect": figures}), flush=True)


def modules(c):
    """Trainable parameters, in total and per module id, as `oom-bisect inspect` lists them."""
    model = DeepLabV3Plus(c["model"])
    count = lambda mod: sum(p.numel() for p in mod.parameters() if p.requires_grad)
    emit(params=count(model), modules={k: count(v) for k, v in model.module_ids().items()})


def loss_of(out, aux, truncated, y):
    # A truncated model has no logits: the loss is the mean square of the stage's output, as the
    # burn model's (crates/deeplab/src/train.rs), so that backward runs through what ran.
    loss = out.float().pow(2).mean() if truncated else F.cross_entropy(out, y)
    if aux is not None:
        loss = loss + AUX_WEIGHT * F.cross_entropy(aux, y)
    return loss


def make_optimizer_state(opt, trained):
    """As oom-bisect's train.premade_state: an update with zero gradients and a zero learning rate,
    so that momentum (or Adam's moments) exists before the first measured step, for the parameters
    a step trains (`trained`; the others get no gradient, so no state)."""
    rates = [g["lr"] for g in opt.param_groups]
    for g in opt.param_groups:
        g["lr"] = 0.0
    for p in trained:
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    for g, lr in zip(opt.param_groups, rates):
        g["lr"] = lr


def enough_steps(t, done, args):
    """As oom-bisect's Config::enough_steps: all of train.steps, or a step whose peak (what the
    caching allocator reserved, and what the process holds outside it, by NVML) stayed at or below
    train.one_step_below of the ceiling. Without a ceiling or NVML every step runs."""
    if done >= t["steps"]:
        return True
    limit = args.limit_bytes
    if done == 0 or not t["one_step_below"] or limit is None or args.device != "cuda":
        return False
    try:
        outside = Nvml().used() - torch.cuda.memory_reserved()
    except (OSError, RuntimeError):
        return False
    peak = torch.cuda.max_memory_reserved() - args.ballast + outside
    return peak <= t["one_step_below"] * limit


def train(c, args):
    m, d, t = c["model"], c["data"], c["train"]
    dev = args.device
    torch.manual_seed(0)
    model = DeepLabV3Plus(m).to(dev).train()
    # "efficient": need_weights=False, PyTorch's fused scaled_dot_product_attention.
    model.fused_attention = args.fused_attention or m["attention_kernel"] == "efficient"
    # "mixed-*" is autocast (f32 master weights); "f16"/"bf16" are pure: the whole model, its
    # gradients and optimizer state in the low precision, as the burn model's pure precisions.
    amp = {"mixed-f16": torch.float16, "mixed-bf16": torch.bfloat16}.get(t["precision"])
    pure = {"f16": torch.float16, "bf16": torch.bfloat16}.get(t["precision"])
    if pure is not None:
        model.to(pure)
    params = sum(p.numel() for p in model.parameters())
    if args.params:
        emit(params=params)
        return
    b, (h, w) = d["batch"], d["size"]
    size = (h, w) if t["loss_resolution"] == "full" else (h // 4, w // 4)
    opt = torch.optim.SGD(model.parameters(), lr=t["learning_rate"], momentum=t["momentum"],
                          weight_decay=t["weight_decay"]) if t["optimizer"] == "sgd" else \
        torch.optim.AdamW(model.parameters(), lr=t["learning_rate"], weight_decay=t["weight_decay"])
    x = torch.randn(b, 3, h, w, device=dev, dtype=pure or torch.float32)
    y = torch.randint(0, m["classes"], (b, *size), device=dev)
    if (t["premade_state"] or t["one_step_below"] > 0) and t["phase"] == "step":
        make_optimizer_state(opt, model.trained())
    # As PyTorch users run autocast in f16: dynamic loss scaling (it refuses pure f16 gradients).
    scaler = torch.amp.GradScaler(dev, enabled=t["precision"] == "mixed-f16")
    mark = Marks(args.marks, dev)
    cuda = dev == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    step = 0
    while not enough_steps(t, step, args):
        mark.step, mark.phase = step + 1, "forward"
        with torch.autocast(dev, dtype=amp, enabled=amp is not None):
            out, aux, truncated = model(x, size, t["checkpointing"], mark)
            loss = loss_of(out, aux, truncated, y)
        mark("loss")
        if t["phase"] != "forward":
            mark.phase = "backward"
            scaler.scale(loss).backward()
            mark("backward")
        if t["phase"] == "step":
            mark.phase = "step"
            scaler.step(opt)
            scaler.update()
            mark("optimizer")
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        peaks = dict(allocated_peak=torch.cuda.max_memory_allocated() - args.ballast,
                     reserved_peak=torch.cuda.max_memory_reserved() - args.ballast) if cuda else {}
        value = loss.item()
        emit(step=step, loss=value, **peaks)
        del out, aux, loss
        mark.step_done(value)
        step += 1
    peaks = dict(allocated_peak=torch.cuda.max_memory_allocated() - args.ballast,
                 reserved_peak=torch.cuda.max_memory_reserved() - args.ballast,
                 device=torch.cuda.get_device_name()) if cuda else {"device": "cpu"}
    emit(params=params, **peaks)


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", nargs="?", default=os.environ.get("OOM_BISECT_CONFIG"),
                   help="the TOML config [default: $OOM_BISECT_CONFIG]")
    p.add_argument("--set", action="append", default=[], help="key=value, as oom-bisect's --set")
    p.add_argument("--memory-limit", help="usable device memory, context included (e.g. 24GiB); "
                   "not under oom-bisect, which holds its own ceiling")
    p.add_argument("--device", choices=["cuda", "cpu"],
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--params", action="store_true", help="print the parameter count and stop")
    p.add_argument("--modules", action="store_true",
                   help="print the parameters per module id (as `oom-bisect inspect`) and stop")
    p.add_argument("--cap", action="store_true",
                   help="hold --memory-limit inside this process (PyTorch's per-process memory "
                   "fraction, what it holds outside the allocator measured by NVML every 10 ms) "
                   "instead of a ballast, so that runs can share a card")
    p.add_argument("--fused-attention", action="store_true",
                   help="attention through PyTorch's fused kernels (need_weights=False), as "
                   "model.attention_kernel = \"efficient\"")
    args = p.parse_args()
    if not args.config:
        p.error("no config: give its path, or set OOM_BISECT_CONFIG")
    # Under oom-bisect (--exec): the stage lines, and its ceiling, not ours.
    args.marks = "OOM_BISECT_CONFIG" in os.environ
    return args


def limit_bytes(args):
    """The ceiling the run is measured under, context included, or None."""
    if args.marks and os.environ.get("OOM_BISECT_MEMORY_LIMIT", "").isdigit():
        return int(os.environ["OOM_BISECT_MEMORY_LIMIT"])
    return parse_bytes(args.memory_limit) if args.memory_limit else None


def hold_ceiling(args):
    """The ceiling this process holds itself: `--memory-limit` (by ballast, or `--cap`), or under
    oom-bisect's `--ceiling-by command` its $OOM_BISECT_MEMORY_LIMIT as a cap; none where oom-bisect
    holds it (its ballast) or on the CPU. Returns the ballast tensor, if any, and its size."""
    if args.device != "cuda":
        return None, 0
    if args.marks and os.environ.get("OOM_BISECT_CEILING_BY") == "command":
        return cap(int(os.environ["OOM_BISECT_MEMORY_LIMIT"]))
    if args.memory_limit:
        return (cap if args.cap else ballast)(parse_bytes(args.memory_limit))
    return None, 0


def attempt(c, args):
    """One run of `c`: None where its steps ran, else why not, as (exit code, the message a
    traceback's last line would give)."""
    try:
        train(c, args)
    except Unsupported as e:
        return EXIT_UNSUPPORTED, f"deeplabv3plus.py: {e}"
    except torch.OutOfMemoryError as e:
        # PyTorch's own message, as the last line of a traceback would give it: oom-bisect reads it.
        first = str(e).splitlines()[0]
        emit(oom=first)
        return EXIT_OOM, f"torch.OutOfMemoryError: {first}"
    except ValueError as e:
        if "Expected more than 1 value per channel" in str(e):
            emit(refused=str(e))
            return EXIT_REFUSED, f"deeplabv3plus.py: PyTorch refuses this configuration: {e}"
        raise
    return None


def serve(args):
    """oom-bisect's `--serve`: trials one after another in this process, under the ceiling held
    once. After each, every tensor it made is freed and the caching allocator gives its blocks
    back (empty_cache), so that the next starts from the context alone, as a fresh process would;
    what stays is what a process keeps (kernels loaded, cuBLAS workspaces): oom-bisect re-runs
    each boundary's sides in fresh processes."""
    hold, args.ballast = hold_ceiling(args)
    args.limit_bytes = limit_bytes(args)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            failed = attempt(load(request["config"], args.set), args)
        except (Unsupported, KeyError, tomllib.TOMLDecodeError) as e:
            failed = EXIT_UNSUPPORTED, f"deeplabv3plus.py: {e}"
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
        if failed is None:
            say({"trial_done": "fits", "id": request["id"]})
        else:
            print(failed[1], file=sys.stderr, flush=True)
            say({"trial_done": "failed", "message": failed[1], "id": request["id"]})
    del hold
    return 0


def main():
    args = arguments()
    if args.marks and os.environ.get("OOM_BISECT_SERVE") == "1":
        return serve(args)
    try:
        c = load(args.config, args.set)
        if args.modules:
            modules(c)
            return 0
    except (Unsupported, KeyError, tomllib.TOMLDecodeError) as e:
        print(f"deeplabv3plus.py: {e}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    hold, args.ballast = hold_ceiling(args)
    args.limit_bytes = limit_bytes(args)
    failed = attempt(c, args)
    if failed is not None:
        print(failed[1], file=sys.stderr)
        return failed[0]
    del hold
    return 0


if __name__ == "__main__":
    sys.exit(main())
