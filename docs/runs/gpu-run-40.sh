#!/usr/bin/env bash
# GPU run 40 (device tool, one fresh H200; PART=a then PART=b on the same warm machine): one step
# where a trial stays far below its ceiling (`train.one_step_below = 0.9`, the state made first)
# against every step lazily (`--set train.one_step_below=0`: the behaviour of the builds before,
# from the same binary), in one call each.
#   a: the forum (cap, five at once): this build cold, then lazy warm, then this build warm.
#   b: the capacity (cap), built-in both ways twice, alternating; through --exec with the PyTorch
#      reference held by the command, both ways; 16 single trials both ways (cap, five at once):
#      12 fits far below 24 GiB and 4 near it. The table: python3 docs/one-step-table.py DIR.
#   c (GPU run 41, after the state made first was limited to what a step trains: run 40 made it
#      for parameters past a truncation point too): a, then the truncated single trials both ways.
# Results: $OUT/run40$PART.tar.gz (c: $OUT/run41.tar.gz).
PART=${PART:-a}
RUN=run40$PART
[ $PART = c ] && RUN=run41
. docs/runs/prelude.sh
LAZY="--set train.one_step_below=0"
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
bench() { # NAME LIMIT ARGS…
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  timeout $limit $B bench --backend cuda --fresh --journal /tmp/j-$name \
    --json $R/$name.json "$@" > $R/$name.txt 2> $R/$name.progress.txt
  log "$name rc=$? $((SECONDS - t0))s"
}
one() { # NAME POLICY CONFIG SETS… (one trial, its JSON report)
  local name=$1 policy=$2 config=$3; shift 3
  local sets=(); for s in "$@"; do sets+=(--set "$s"); done
  [ $policy = lazy ] && sets+=(--set train.one_step_below=0)
  timeout 120 $B trial --backend cuda --ceiling-by cap --memory-limit 24GiB --config $config \
    "${sets[@]}" --json $R/trials/$name-$policy.json > $R/trials/$name-$policy.txt 2>&1
  echo "$name-$policy rc=$?" >> $R/trials/rc.txt
}
pool() { # lines "NAME CONFIG SET…": each both ways, five trials at a time (the cap's five ceilings)
  local name config rest policy
  while read -r name config rest; do
    read -ra sets <<< "$rest"
    for policy in new lazy; do
      one $name $policy $config "${sets[@]}" &
      while [ $(jobs -rp | wc -l) -ge 5 ]; do sleep 0.5; done
    done
  done
  wait
}
if [ $PART != b ]; then
  bench forum-new-cold 210 --ceiling-by cap --config $FORUM
  bench forum-lazy-warm 160 --ceiling-by cap --config $FORUM $LAZY
  bench forum-new-warm 150 --ceiling-by cap --config $FORUM
fi
if [ $PART = c ]; then
  mkdir -p $R/trials
  t0=$SECONDS
  pool <<LIST
forum-to-layer3.10 $FORUM model.truncate_after="backbone.layer3.10"
forum-to-layer3.21 $FORUM model.truncate_after="backbone.layer3.21"
forum-to-layer3.22 $FORUM model.truncate_after="backbone.layer3.22"
forum-ckpt $FORUM train.checkpointing=true
forum-864 $FORUM data.size=[864,864]
LIST
  log "single trials $((SECONDS - t0))s"
elif [ $PART = b ]; then
  for k in 1 2; do
    bench cap-new-$k 60 --ceiling-by cap $CAPACITY
    bench cap-lazy-$k 60 --ceiling-by cap $CAPACITY $LAZY
  done
  bench exec-new 90 --exec "$TORCH" --ceiling-by command $CAPACITY
  bench exec-lazy 90 --exec "$TORCH" --ceiling-by command $CAPACITY $LAZY
  mkdir -p $R/trials
  t0=$SECONDS
  pool <<LIST
forum-mixed-bf16 $FORUM train.precision="mixed-bf16"
forum-mixed-f16 $FORUM train.precision="mixed-f16"
forum-bf16 $FORUM train.precision="bf16"
forum-f16 $FORUM train.precision="f16"
forum-ckpt $FORUM train.checkpointing=true
forum-os16 $FORUM model.output_stride=16
forum-b2 $FORUM data.batch=2
forum-to-layer3.10 $FORUM model.truncate_after="backbone.layer3.10"
r50-os16-b4 $R50 model.output_stride=16
r50-os16-b24-aux $R50 model.output_stride=16 data.batch=24 model.aux_head=true
r50-os8-b12 $R50 data.batch=12
forum-b2-att8-efficient $FORUM data.batch=2 model.attention_heads=8 model.attention_kernel="efficient"
r50-os16-b34 $R50 model.output_stride=16 data.batch=34
forum-864 $FORUM data.size=[864,864]
forum-to-layer3.21 $FORUM model.truncate_after="backbone.layer3.21"
forum-b6-ckpt $FORUM data.batch=6 train.checkpointing=true
LIST
  log "single trials $((SECONDS - t0))s"
fi
finish
