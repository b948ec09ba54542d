#!/usr/bin/env bash
# GPU run 14 (device tool, nvidia-h200-x2: two H200s of one host), after run 13 showed that the
# peak comes by the second training step (train.steps now defaults to 2 under the pytorch memory
# model). Issue 17's measurement and issue 15's one-GPU figure: the forum scenario (R101 OS8 b4
# 1024², 24 GiB from the config) with `bench`, a fresh journal each time. Two calls on the same
# machine, made back to back so that the kernel cache of the first is warm for the second:
#   bash docs/runs/gpu-run-14.sh a   # 1. cold kernel caches, --devices 0,1; 2. warm, --devices 0,1
#   bash docs/runs/gpu-run-14.sh b   # 3. warm, --jobs 1 (one GPU); the report texts diffed
set -u
part=${1:?a or b}
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
mkdir -p $OUT/r
run() { # name, time limit, flags...
    local name=$1 limit=$2; shift 2
    local s0=$SECONDS
    timeout $limit $B bench --config configs/forum-r101-os8-1024.toml --backend cuda --fresh \
        --journal /tmp/j-$name --json $OUT/r/$name.json "$@" > $OUT/r/$name.txt 2> $OUT/r/$name.err
    echo "$name rc=$? secs=$((SECONDS - s0))" >> $OUT/r/log.txt
    cp /tmp/j-$name/*.jsonl $OUT/r/$name.journal.jsonl 2>/dev/null
}
if [ "$part" = a ]; then
    rm -rf /tmp/kc
    nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv > $OUT/r/gpus.csv 2>&1
    run cold-2gpu 330 --devices 0,1
    run warm-2gpu 240 --devices 0,1
    cp $OUT/r/warm-2gpu.txt /tmp/warm-2gpu.txt
else
    kc=$(du -sh /tmp/kc 2>/dev/null || echo "none: the machine was released, figures are cold")
    echo "kernel cache at start: $kc" >> $OUT/r/log.txt
    run warm-1gpu 330 --jobs 1
    # The report is everything before bench's timings; paths and times differ by design.
    strip() { sed '/^bench:/,$d' "$1" | grep -v -e '^Trials:' -e 'saved to' -e '^Reproduce'; }
    if [ -f /tmp/warm-2gpu.txt ]; then
        diff <(strip /tmp/warm-2gpu.txt) <(strip $OUT/r/warm-1gpu.txt) > $OUT/r/diff-2gpu-1gpu.txt
        echo "diff rc=$?" >> $OUT/r/log.txt
    fi
fi
