#!/usr/bin/env bash
# GPU run 15 (device tool, nvidia-h200-x2: two H200s of one host): issue 14's measurement. The forum
# scenario (R101 OS8 b4 1024², 24 GiB from the config) diagnosed through `--exec` with the PyTorch
# reference (tools/pytorch/deeplabv3plus.py, PyTorch as installed there) on GPU 0, and by the
# built-in burn model (memory model pytorch) on GPU 1, at the same time, each with `bench`; before
# that, the reference's parity with the burn model and two single trials through `--exec`.
#   bash docs/runs/gpu-run-15.sh a   # parity, trials, both diagnoses from a fresh journal
#   bash docs/runs/gpu-run-15.sh b   # both diagnoses resumed from their journals (if a ran out of time)
set -u
part=${1:?a or b}
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
F=configs/forum-r101-os8-1024.toml
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
mkdir -p $OUT/r
log() { echo "$*" >> $OUT/r/log.txt; }
diagnose() { # name, device, time limit, flags...
    local name=$1 dev=$2 limit=$3; shift 3
    local s0=$SECONDS
    timeout $limit $B bench --config $F --backend cuda --devices $dev --journal /tmp/j-$name \
        --json $OUT/r/$name.json "$@" > $OUT/r/$name.txt 2> $OUT/r/$name.err
    log "$name rc=$? secs=$((SECONDS - s0))"
    cp /tmp/j-$name/*.jsonl $OUT/r/$name.journal.jsonl 2>/dev/null
}
if [ "$part" = a ]; then
    nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv > $OUT/r/gpus.csv 2>&1
    python3 -c "import torch; print(torch.__version__, torch.version.cuda)" > $OUT/r/torch.txt 2>&1
    timeout 120 python3 tools/pytorch/parity.py --bin $B > $OUT/r/parity.jsonl 2> $OUT/r/parity.err
    log "parity rc=$?"
    for t in "forum" "fits --set data.size=[512,512]"; do
        set -- $t; name=$1; shift
        timeout 120 $B trial --config $F --backend cuda --exec "$TORCH" --json $OUT/r/trial-$name.json \
            "$@" > $OUT/r/trial-$name.txt 2>&1
        log "trial-$name rc=$?"
    done
    diagnose exec 0 470 --fresh --exec "$TORCH" &
    diagnose burn 1 470 --fresh &
    wait
else
    diagnose exec 0 560 --exec "$TORCH" &
    diagnose burn 1 560 &
    wait
fi
