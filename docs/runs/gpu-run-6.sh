#!/usr/bin/env bash
# Binaries: .gpu/oom-bisect-noat.gz is `cargo build --release` (no autotune, now the default build),
# gzip -9 so that two binaries fit the device tool's 64 MiB carry; unpacked to /tmp/bin on the device.
# GPU run 6 (device tool, H200): the forum scenario's full diagnosis under a 24 GiB ceiling (RTX 3090),
# burn-cuda without autotune. The journal goes to $OUT so that a later call resumes from it.
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=${B:-/tmp/bin/oom-bisect-noat}
export OOM_BISECT_KERNEL_CACHE=/tmp/kc-noat
mkdir -p $OUT/journal
[ -d .gpu/journal ] && cp .gpu/journal/* $OUT/journal/ 2>/dev/null
s=$SECONDS
timeout ${LIMIT:-560} $B bisect --config configs/forum-r101-os8-1024.toml --backend cuda \
  --trial-timeout 150 --journal $OUT/journal --json $OUT/forum.json > $OUT/forum.txt 2> $OUT/forum.err
echo "rc=$? secs=$((SECONDS - s))" >> $OUT/forum.txt
