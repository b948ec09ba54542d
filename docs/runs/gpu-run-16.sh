#!/usr/bin/env bash
# GPU run 16 (device tool, nvidia-h200-x2), after run 15's fixes:
# - the PyTorch reference's parity with the burn model again (decoder parameters, stem BatchNorm);
# - GPU 0: run 15's `--exec` diagnosis of the forum scenario resumed from its journal (carried in
#   .gpu/j-exec), so that only what the fixes change runs: the batch axis, whose bottom (batch 1,
#   refused by PyTorch) is now stepped over;
# - GPU 1: issue 13's planted single culprit on the built-in model: R50 OS8 512² batch 4 with an
#   8-head attention block on the ASPP output, under 12 GiB (run 12: 16.96 GiB with attention and
#   an aux head, 6.58 GiB without either), fresh journal, cold kernel cache.
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
mkdir -p $OUT/r /tmp/j-exec && cp .gpu/j-exec/*.jsonl /tmp/j-exec/
log() { echo "$*" >> $OUT/r/log.txt; }
timeout 120 python3 tools/pytorch/parity.py --bin $B > $OUT/r/parity.jsonl 2> $OUT/r/parity.err
log "parity rc=$?"
(s0=$SECONDS; timeout 400 $B bench --config configs/forum-r101-os8-1024.toml --backend cuda --devices 0 \
    --journal /tmp/j-exec --json $OUT/r/exec.json --exec 'python3 tools/pytorch/deeplabv3plus.py {config}' \
    > $OUT/r/exec.txt 2> $OUT/r/exec.err; log "exec rc=$? secs=$((SECONDS - s0))"
 cp /tmp/j-exec/*.jsonl $OUT/r/exec.journal.jsonl) &
(s0=$SECONDS; timeout 400 $B bench --config configs/deeplabv3plus-r50-os8.toml --set model.attention_heads=8 \
    --memory-limit 12GiB --backend cuda --devices 1 --fresh --journal /tmp/j-planted \
    --json $OUT/r/planted.json > $OUT/r/planted.txt 2> $OUT/r/planted.err
 log "planted rc=$? secs=$((SECONDS - s0))"; cp /tmp/j-planted/*.jsonl $OUT/r/planted.journal.jsonl) &
wait
