#!/usr/bin/env bash
# GPU run 24 (device tool, one H200): the session's final binary (no `unfused` feature) on the GPU:
# one R50 OS8 512² b4 trial under 12 GiB (fits), the forum under 24 GiB (out of memory, with the
# settled retry), and OOM_BISECT_FUSION=off refused up front naming the feature.
set -u
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
[ -f .gpu/kc.tar.gz ] && mkdir -p /tmp/kc && tar -C /tmp/kc -xzf .gpu/kc.tar.gz
R=$OUT
timeout 120 $B trial --config configs/deeplabv3plus-r50-os8.toml --backend cuda --memory-limit 12GiB \
  --json $R/r50.json > $R/r50.txt 2>&1; echo "r50 rc=$?" | tee -a $R/log.txt
timeout 120 $B trial --config configs/forum-r101-os8-1024.toml --backend cuda \
  --json $R/forum.json > $R/forum.txt 2>&1; echo "forum rc=$?" | tee -a $R/log.txt
OOM_BISECT_FUSION=off timeout 60 $B trial --config configs/quickstart.toml --backend cuda \
  > $R/unfused.txt 2>&1; echo "unfused rc=$?" | tee -a $R/log.txt
