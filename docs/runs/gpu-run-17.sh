#!/usr/bin/env bash
# GPU run 17 (device tool, nvidia-h200-x2): issue 13's report on the H200, cold kernel caches.
# - GPU 0: the forum scenario on the built-in model (fresh journal): the measured need without the
#   ceiling, the breakdown, the diagnosis block, the size boundary at the model's 8-px step, --html;
#   then run 16's `--exec` PyTorch diagnosis resumed from its journal (docs/runs/h200/run16), so that
#   only the new trials run (PyTorch's need without the ceiling, the fine size steps).
# - GPU 1: the planted single culprit: R50 OS8 512² batch 4 with an 8-head attention block on the
#   ASPP output under 12 GiB (run 16), fresh journal, --html.
# Everything comes back as one archive, $OUT/run17.tar.gz, and $OUT/log.txt.
# `bash docs/runs/gpu-run-17.sh b` runs only the `--exec` resume, on both GPUs (part a's copy of run 16's
# journal kept the wrong file name, so part a's exec run started afresh and hit its time limit).
set -u
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
R=/tmp/run17 && mkdir -p $R /tmp/j-exec
# The journal's name is the experiment's: run 16's file, under the name run 16 gave it.
cp docs/runs/h200/run16/exec.journal.jsonl /tmp/j-exec/forum-r101-os8-1024-82aaf994.jsonl
log() { echo "$*" | tee -a $OUT/log.txt; }
if [ "${1:-a}" = b ]; then
  s0=$SECONDS; timeout 400 $B bisect --config configs/forum-r101-os8-1024.toml --backend cuda --devices 0,1 \
      --journal /tmp/j-exec --json $R/exec.json --html $R/exec.html \
      --exec 'python3 tools/pytorch/deeplabv3plus.py {config}' \
      > $R/exec.txt 2> $R/exec.progress.txt; log "exec rc=$? secs=$((SECONDS - s0))"
  cp /tmp/j-exec/forum-r101-os8-1024-82aaf994.jsonl $R/exec.journal.jsonl
  tar -C /tmp -czf $OUT/run17b.tar.gz run17
  exit 0
fi
nvidia-smi --query-gpu=index,name,memory.total --format=csv > $R/gpus.csv
(s0=$SECONDS; timeout 420 $B bisect --config configs/forum-r101-os8-1024.toml --backend cuda --devices 0 \
    --fresh --journal /tmp/j-forum --json $R/forum.json --html $R/forum.html \
    > $R/forum.txt 2> $R/forum.progress.txt; log "forum rc=$? secs=$((SECONDS - s0))"
 cp /tmp/j-forum/*.jsonl $R/forum.journal.jsonl
 s0=$SECONDS; timeout 150 $B bisect --config configs/forum-r101-os8-1024.toml --backend cuda --devices 0 \
    --journal /tmp/j-exec --json $R/exec.json --html $R/exec.html \
    --exec 'python3 tools/pytorch/deeplabv3plus.py {config}' \
    > $R/exec.txt 2> $R/exec.progress.txt; log "exec rc=$? secs=$((SECONDS - s0))"
 cp /tmp/j-exec/forum-r101-os8-1024-82aaf994.jsonl $R/exec.journal.jsonl) &
(s0=$SECONDS; timeout 420 $B bisect --config configs/deeplabv3plus-r50-os8.toml --set model.attention_heads=8 \
    --memory-limit 12GiB --backend cuda --devices 1 --fresh --journal /tmp/j-planted \
    --json $R/planted.json --html $R/planted.html > $R/planted.txt 2> $R/planted.progress.txt
 log "planted rc=$? secs=$((SECONDS - s0))"; cp /tmp/j-planted/*.jsonl $R/planted.journal.jsonl) &
wait
tar -C /tmp -czf $OUT/run17.tar.gz run17
