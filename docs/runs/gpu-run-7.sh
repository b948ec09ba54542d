#!/usr/bin/env bash
# Binaries: .gpu/oom-bisect-noat.gz is `cargo build --release` (no autotune, now the default build),
# gzip -9 so that two binaries fit the device tool's 64 MiB carry; unpacked to /tmp/bin on the device.
# GPU run 7 (device tool, H200): the bf16 row of the memory table, then the forum diagnosis resumed
# from run 6's journal (carried in .gpu/journal) to its end.
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect-noat
export OOM_BISECT_KERNEL_CACHE=/tmp/kc-noat
timeout 60 $B trial --config configs/deeplabv3plus-r50-os8.toml --backend cuda --memory-limit 130GiB \
  --set train.steps=3 --set train.precision=bf16 --trial-timeout 50 --json $OUT/r50-bf16.json > $OUT/r50-bf16.txt 2>&1
LIMIT=${LIMIT:-330} bash docs/runs/gpu-run-6.sh
