#!/usr/bin/env bash
# GPU run 30 (device tool, one H200), right after run 29 on the same machine (warm kernel cache):
#   steps: nine configurations near a 24 GiB ceiling (run 21's), 5 steps each, the built-in model
#          with the splitting pools (NAME.cap5.json) and the PyTorch reference (NAME.pt5.jsonl),
#          both under in-process ceilings, one after the other, five configurations at once (at
#          most five 24 GiB processes on the card; python3 docs/steps-table.py --pairs DIR);
#   capacity: the largest batch of R50 OS16 512² under 24 GiB (bench, cap), with this build and,
#          when .gpu/oom-bisect-old.gz is there, the build before (pools of size classes, bisection
#          after two predicted probes), in one call.
# Results: $OUT/run30.tar.gz.
# Ran with the build of commit 06b35f2 (the splitting pools of 75aff1f, since reverted; the first gallop).
RUN=run30
. docs/runs/prelude.sh
LIST="f840 $FORUM data.size=[840,840]
f848 $FORUM data.size=[848,848]
c32 $R50 model.output_stride=16 data.batch=32
c33 $R50 model.output_stride=16 data.batch=33
f832 $FORUM data.size=[832,832]
l321 $FORUM model.truncate_after=\"backbone.layer3.21\"
adam824 $FORUM train.optimizer=\"adamw\" data.size=[824,824]
aux800 $FORUM model.aux_head=true data.size=[800,800]
mixed $FORUM train.precision=\"mixed-f16\""
# one NAME CONFIG SETS…: the 5-step run of each side.
one() {
  local name=$1 cfg=$2 sets=() s; shift 2
  for s in "$@"; do sets+=(--set "$s"); done
  timeout 150 $B trial --backend cuda --config $cfg "${sets[@]}" --set train.steps=5 \
    --memory-limit 24GiB --ceiling-by cap --json $R/$name.cap5.json > $R/$name.cap5.txt 2>&1
  timeout 150 python3 tools/pytorch/deeplabv3plus.py $cfg "${sets[@]}" --set train.steps=5 \
    --memory-limit 24GiB --cap > $R/$name.pt5.jsonl 2> $R/$name.pt5.err
}
t0=$SECONDS
while read -r name cfg sets; do
  while [ $(jobs -r | wc -l) -ge 5 ]; do sleep 0.5; done
  one $name $cfg $sets &
  sleep 1
done <<< "$LIST"
wait
log "steps: $((SECONDS - t0))s"
# cap BINARY NAME: the capacity search by one build.
capacity() {
  local t0=$SECONDS
  timeout 150 $1 bench --backend cuda --fresh --journal /tmp/j-$2 --config $R50 \
    --set model.output_stride=16 --memory-limit 24GiB --axes batch --ceiling-by cap \
    --json $R/$2.json > $R/$2.txt 2> $R/$2.progress.txt
  log "$2 rc=$? $((SECONDS - t0))s"
}
capacity $B capacity-new
[ -x /tmp/bin/oom-bisect-old ] && capacity /tmp/bin/oom-bisect-old capacity-old
capacity $B capacity-new2
finish
