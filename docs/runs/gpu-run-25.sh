#!/usr/bin/env bash
# GPU run 25 (device tool, one H200): issue 25's checkpointing and f16 (items 1 and 2), side by side
# with the PyTorch reference under the same 24 GiB ceiling, then the forum diagnosis with both.
#   PART=a  trials: the built-in model (ballast) and tools/pytorch/deeplabv3plus.py, 2 steps each;
#           a built-in trial that runs out of memory is repeated under 80 GiB for its need.
#   PART=b  after BatchNorm's f32 accumulation without input-sized copies: f16 and mixed f16 again,
#           then the forum diagnosis (bench, cap, warm kernel cache from .gpu/kc.tar.gz).
# Results: $OUT/run25$PART.tar.gz.
set -uf
PART=${PART:-a}
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
[ -f .gpu/kc.tar.gz ] && mkdir -p /tmp/kc && tar -C /tmp/kc -xzf .gpu/kc.tar.gz
R=/tmp/run25$PART && mkdir -p $R
log() { echo "$*" | tee -a $R/log.txt; }
FORUM=configs/forum-r101-os8-1024.toml
R50=configs/deeplabv3plus-r50-os8.toml
DEADLINE=${DEADLINE:-500}
# side NAME CONFIG SETS…: the built-in trial and the PyTorch reference under 24 GiB.
side() {
  local name=$1 cfg=$2; shift 2
  local sets=() s t0=$SECONDS
  for s in "$@"; do sets+=(--set "$s"); done
  timeout 90 $B trial --backend cuda --config $cfg "${sets[@]}" --memory-limit 24GiB \
    --json $R/$name.burn.json > $R/$name.burn.txt 2>&1
  local rc=$?
  log "$name burn rc=$rc $((SECONDS - t0))s"
  if [ $rc -ne 0 ]; then
    t0=$SECONDS
    timeout 90 $B trial --backend cuda --config $cfg "${sets[@]}" --memory-limit 80GiB \
      --json $R/$name.burn80.json > $R/$name.burn80.txt 2>&1
    log "$name burn80 rc=$? $((SECONDS - t0))s"
  fi
  t0=$SECONDS
  timeout 90 python3 tools/pytorch/deeplabv3plus.py $cfg "${sets[@]}" --memory-limit 24GiB \
    > $R/$name.pt.jsonl 2> $R/$name.pt.err
  log "$name pt rc=$? $((SECONDS - t0))s"
}
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > $R/gpus.csv
if [ "$PART" = a ]; then
  while read -r name cfg sets; do
    [ $SECONDS -lt $DEADLINE ] || { log "$name skipped (time)"; continue; }
    side $name $cfg $sets
  done <<LIST
ckpt $FORUM train.checkpointing=true
f16 $FORUM train.precision="f16"
mf16 $FORUM train.precision="mixed-f16"
ckpt_aux $FORUM train.checkpointing=true model.aux_head=true
r50ckpt $R50 train.checkpointing=true data.batch=24
ckpt_b3 $FORUM train.checkpointing=true data.batch=3
LIST
else
  side f16 $FORUM train.precision="f16"
  side mf16 $FORUM train.precision="mixed-f16"
  s0=$SECONDS
  timeout 420 $B bench --backend cuda --fresh --journal /tmp/j-forum --json $R/forum.json \
    --config $FORUM --ceiling-by cap > $R/forum.txt 2> $R/forum.progress.txt
  log "forum rc=$? secs=$((SECONDS - s0))"
  cp /tmp/j-forum/*.jsonl $R/forum.journal.jsonl 2>/dev/null
fi
tar -C /tmp -czf $OUT/run25$PART.tar.gz run25$PART; cp $R/log.txt $OUT/
