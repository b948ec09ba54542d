#!/usr/bin/env bash
# GPU run 13 (device tool, nvidia-h200-x2: two H200s of one host): issue 17's measurement and issue
# 15's one-GPU figure, in one call on one machine. The forum scenario (R101 OS8 b4 1024², 24 GiB
# from the config) with `bench`, fresh journals each time:
#   1. cold kernel caches, --devices 0,1 (two trials at once, one per GPU);
#   2. warm (same caches), --devices 0,1;
#   3. warm, --jobs 1 (one GPU, the sequential search).
# Then the report texts are diffed. Journals (per-step peaks of every trial) come back for the
# two-step analysis (docs/gpu-results.md, run 13).
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
rm -rf /tmp/kc
mkdir -p $OUT/r
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv > $OUT/r/gpus.csv 2>&1
run() { # name, time limit, flags...
    local name=$1 limit=$2; shift 2
    local s0=$SECONDS
    timeout $limit $B bench --config configs/forum-r101-os8-1024.toml --backend cuda --fresh \
        --journal /tmp/j-$name --json $OUT/r/$name.json "$@" > $OUT/r/$name.txt 2> $OUT/r/$name.err
    echo "$name rc=$? secs=$((SECONDS - s0))" >> $OUT/r/log.txt
    cp /tmp/j-$name/*.jsonl $OUT/r/$name.journal.jsonl 2>/dev/null
}
run cold-2gpu 250 --devices 0,1
run warm-2gpu 140 --devices 0,1
run warm-1gpu 190 --jobs 1
strip() { grep -v -e '^Trials:' -e 'saved to' -e '^Reproduce' -e 'journal' "$1" | sed 's#/tmp/j-[a-z0-9-]*#J#g'; }
diff <(strip $OUT/r/warm-2gpu.txt) <(strip $OUT/r/warm-1gpu.txt) > $OUT/r/diff-2gpu-1gpu.txt
echo "diff rc=$?" >> $OUT/r/log.txt
du -sh /tmp/kc >> $OUT/r/log.txt
