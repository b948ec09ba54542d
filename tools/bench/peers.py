"""The peers on the capacity job: accelerate's find_executable_batch_size and Lightning's batch-size
finder (power and binsearch) on a PyTorch DeepLabV3+ (torchvision ResNet-50, output stride 16, 512x512,
21 classes, SGD momentum 0.9, 3 steps a trial), under 24 GiB with the CUDA context counted, as
oom-bisect's ceiling. Prints the answer, the batches tried and the seconds in process.

    python3 tools/bench/peers.py accelerate|power|binsearch
"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision as tv

STEPS, SIZE, CLASSES = 3, 512, 21


def ceiling_24gib():
    """The caching allocator capped at 24 GiB less what the process already holds (its context)."""
    free, total = torch.cuda.mem_get_info()
    torch.cuda.set_per_process_memory_fraction((24 * 2**30 - (total - free)) / total)


def cbr(i, o, k=1, d=1):
    return nn.Sequential(nn.Conv2d(i, o, k, padding=d * (k // 2), dilation=d, bias=False),
                         nn.BatchNorm2d(o), nn.ReLU(True))


class DeepLabV3Plus(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = tv.models.resnet50(replace_stride_with_dilation=[False, False, True])
        self.aspp = nn.ModuleList([cbr(2048, 256)] + [cbr(2048, 256, 3, r) for r in (6, 12, 18)])
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), cbr(2048, 256))
        self.project, self.low = cbr(1280, 256), cbr(256, 48)
        self.decoder = nn.Sequential(cbr(304, 256, 3), cbr(256, 256, 3), nn.Conv2d(256, CLASSES, 1))

    def forward(self, x):
        b = self.backbone
        low = b.layer1(b.maxpool(b.relu(b.bn1(b.conv1(x)))))
        h = b.layer4(b.layer3(b.layer2(low)))
        pooled = self.pool(h).expand(-1, -1, *h.shape[2:])
        h = self.project(torch.cat([m(h) for m in self.aspp] + [pooled], 1))
        h = F.interpolate(h, low.shape[2:], mode="bilinear")
        return F.interpolate(self.decoder(torch.cat([h, self.low(low)], 1)), x.shape[2:], mode="bilinear")


def batch(n):
    return (torch.randn(n, 3, SIZE, SIZE, device="cuda"),
            torch.randint(0, CLASSES, (n, SIZE, SIZE), device="cuda"))


def accelerate():
    from accelerate.utils import find_executable_batch_size
    tried = []

    @find_executable_batch_size(starting_batch_size=64)
    def train(n):
        tried.append(n)
        model = DeepLabV3Plus().cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = batch(n)
        for _ in range(STEPS):
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return n

    return train(), tried


def lightning(mode):
    import lightning as L
    from lightning.pytorch.tuner import Tuner

    class Random(torch.utils.data.Dataset):
        def __len__(self):
            return 1 << 16

        def __getitem__(self, i):
            return torch.randn(3, SIZE, SIZE), torch.randint(0, CLASSES, (SIZE, SIZE))

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model, self.batch_size = DeepLabV3Plus(), 4

        def training_step(self, b, _):
            return F.cross_entropy(self.model(b[0]), b[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(Random(), batch_size=self.batch_size)

    trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False)
    found = Tuner(trainer).scale_batch_size(Module(), mode=mode, steps_per_trial=STEPS, init_val=4)
    return found, "see the log above"


def main():
    peer = sys.argv[1] if len(sys.argv) > 1 else "accelerate"
    ceiling_24gib()
    start = time.time()
    found, tried = accelerate() if peer == "accelerate" else lightning(peer)
    print(f"{peer}: batch {found}, tried {tried}, {time.time() - start:.1f} s in process", flush=True)


main()
