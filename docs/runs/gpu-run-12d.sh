#!/usr/bin/env bash
# GPU run 12d (device tool, one H200): the two scenarios of runs 9-10 diagnosed end to end again with
# the new default memory model (pytorch), from cold kernel caches: the forum scenario (R101 OS8 b4
# 1024², 24 GiB from the config) and R50 OS8 512² batch 8 under 24 GiB.
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
mkdir -p $OUT/r
s0=$SECONDS
timeout 330 $B bench --config configs/forum-r101-os8-1024.toml --backend cuda --fresh --quiet \
  --journal /tmp/j --json $OUT/r/forum.json > $OUT/r/forum.txt 2>&1
echo "forum rc=$? secs=$((SECONDS - s0))" >> $OUT/r/log.txt
s0=$SECONDS
timeout 240 $B bench --config configs/deeplabv3plus-r50-os8.toml --set data.batch=8 --backend cuda \
  --memory-limit 24GiB --fresh --quiet --journal /tmp/j --json $OUT/r/r50b8.json > $OUT/r/r50b8.txt 2>&1
echo "r50b8 rc=$? secs=$((SECONDS - s0))" >> $OUT/r/log.txt
