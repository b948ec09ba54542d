#!/usr/bin/env bash
# GPU run 22 (device tool, one H200), after the release-and-retry was made to free on the device
# (flush the queued releases, synchronise, trim the stream-ordered pool) before it retries:
#   part 1: run 21's nine configurations again, built-in model, 5 steps, ballast ceiling (burn5);
#   part 2: the same under the cap (--ceiling-by cap), five trials at once on the card (cap5);
#   part 3: the capacity scenario (largest batch of R50 OS16 512² under 24 GiB), ballast.
# docs/steps-table.py reads run 21's PyTorch files beside these. Results: $OUT/run22.tar.gz.
set -uf
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
[ -f .gpu/kc.tar.gz ] && mkdir -p /tmp/kc && tar -C /tmp/kc -xzf .gpu/kc.tar.gz
R=/tmp/run22 && mkdir -p $R
log() { echo "$*" | tee -a $R/log.txt; }
FORUM=configs/forum-r101-os8-1024.toml
R50=configs/deeplabv3plus-r50-os8.toml
LIST="f840 $FORUM data.size=[840,840]
f848 $FORUM data.size=[848,848]
c32 $R50 model.output_stride=16 data.batch=32
c33 $R50 model.output_stride=16 data.batch=33
f832 $FORUM data.size=[832,832]
l321 $FORUM model.truncate_after=\"backbone.layer3.21\"
adam824 $FORUM train.optimizer=\"adamw\" data.size=[824,824]
aux800 $FORUM model.aux_head=true data.size=[800,800]
mixed $FORUM train.precision=\"mixed-f16\""
# trial NAME KIND CONFIG SETS…: one 5-step trial under a 24 GiB ceiling.
trial() {
  local name=$1 kind=$2 cfg=$3 by=ballast; shift 3
  [ $kind = cap5 ] && by=cap
  local sets=() s t0=$SECONDS
  for s in "$@"; do sets+=(--set "$s"); done
  timeout 150 $B trial --backend cuda --config $cfg "${sets[@]}" --set train.steps=5 \
    --memory-limit 24GiB --ceiling-by $by --json $R/$name.$kind.json > $R/$name.$kind.txt 2>&1
  log "$name $kind rc=$? $((SECONDS - t0))s"
}
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > $R/gpus.csv
t0=$SECONDS
while read -r name cfg sets; do trial $name burn5 $cfg $sets; done <<< "$LIST"
log "part 1: $((SECONDS - t0))s"
t0=$SECONDS
while read -r name cfg sets; do
  while [ $(jobs -r | wc -l) -ge 5 ]; do sleep 0.5; done
  trial $name cap5 $cfg $sets &
  sleep 2
done <<< "$LIST"
wait
log "part 2: $((SECONDS - t0))s"
t0=$SECONDS
timeout 150 $B bench --backend cuda --fresh --journal /tmp/j-cap --config $R50 \
  --set model.output_stride=16 --memory-limit 24GiB --axes batch --ceiling-by ballast \
  --json $R/capacity.json > $R/capacity.txt 2> $R/capacity.progress.txt
log "capacity rc=$? $((SECONDS - t0))s"
tar -C /tmp -czf $OUT/run22.tar.gz run22; cp $R/log.txt $OUT/
