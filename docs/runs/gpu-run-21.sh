#!/usr/bin/env bash
# GPU run 21 (device tool, one H200): the steps table of issue 25 (item 4) and issue 24's cheaper
# trial (item 2). For each configuration near a 24 GiB ceiling, four runs under that ceiling:
#   burn5   the built-in model (ballast ceiling), 5 steps, optimizer state made in step 1 (today);
#   burn1p  the built-in model, 1 step after train.premade_state made the optimizer state;
#   pt5     the PyTorch reference (tools/pytorch/deeplabv3plus.py), 5 steps;
#   pt1p    the PyTorch reference, 1 step with its optimizer state made first.
# docs/steps-table.py turns the results into the table in docs/fidelity.md.
# Results come back as $OUT/run21.tar.gz (the device returns at most 8 files).
set -uf
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
[ -f .gpu/kc.tar.gz ] && mkdir -p /tmp/kc && tar -C /tmp/kc -xzf .gpu/kc.tar.gz
R=/tmp/run21 && mkdir -p $R
log() { echo "$*" | tee -a $R/log.txt; }
pack() { tar -C /tmp -czf $OUT/run21.tar.gz run21; cp $R/log.txt $OUT/; }
FORUM=configs/forum-r101-os8-1024.toml
R50=configs/deeplabv3plus-r50-os8.toml
DEADLINE=${DEADLINE:-540}
# one NAME CONFIG SETS…: the four runs of one configuration.
one() {
  local name=$1 cfg=$2; shift 2
  local sets=() s
  for s in "$@"; do sets+=(--set "$s"); done
  local t0=$SECONDS
  timeout 60 python3 tools/pytorch/deeplabv3plus.py $cfg "${sets[@]}" --set train.steps=5 \
    --memory-limit 24GiB > $R/$name.pt5.jsonl 2> $R/$name.pt5.err; log "$name pt5 rc=$? $((SECONDS - t0))s"
  t0=$SECONDS
  timeout 120 $B trial --backend cuda --config $cfg "${sets[@]}" --set train.steps=5 \
    --memory-limit 24GiB --json $R/$name.burn5.json > $R/$name.burn5.txt 2>&1
  log "$name burn5 rc=$? $((SECONDS - t0))s"
  t0=$SECONDS
  timeout 60 $B trial --backend cuda --config $cfg "${sets[@]}" --set train.steps=1 \
    --set train.premade_state=true --memory-limit 24GiB --json $R/$name.burn1p.json \
    > $R/$name.burn1p.txt 2>&1
  log "$name burn1p rc=$? $((SECONDS - t0))s"
  t0=$SECONDS
  timeout 60 python3 tools/pytorch/deeplabv3plus.py $cfg "${sets[@]}" --set train.steps=1 \
    --set train.premade_state=true --memory-limit 24GiB > $R/$name.pt1p.jsonl 2> $R/$name.pt1p.err
  log "$name pt1p rc=$? $((SECONDS - t0))s"
}
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > $R/gpus.csv
while read -r name cfg sets; do
  [ $SECONDS -lt $DEADLINE ] || { log "$name skipped (time)"; continue; }
  one $name $cfg $sets
done <<LIST
f840 $FORUM data.size=[840,840]
c32 $R50 model.output_stride=16 data.batch=32
f848 $FORUM data.size=[848,848]
c33 $R50 model.output_stride=16 data.batch=33
f832 $FORUM data.size=[832,832]
l321 $FORUM model.truncate_after="backbone.layer3.21"
adam824 $FORUM train.optimizer="adamw" data.size=[824,824]
aux800 $FORUM model.aux_head=true data.size=[800,800]
mixed $FORUM train.precision="mixed-f16"
LIST
pack
