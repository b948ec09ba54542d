#!/usr/bin/env bash
# GPU run 20 (device tool, one H200): issue 24's capped ceiling, several trials per GPU.
# Part a (first try, kept for the record: the cap's release-and-retry counted the memory pool's
#   spare pages, so 800×800 failed where the ballast fits 840×840): the forum diagnosis with the default (a cap in the allocator, as many trials at once as
#   24 GiB ceilings fit on the card), cold and then warm; the capacity scenario (largest batch of
#   R50 OS16 512² under 24 GiB) warm; accelerate's find_executable_batch_size in the same call.
# Part b (after the fix): the forum cold under the cap; the capacity scenario under the cap, beside
#   accelerate, and under ballast; the kernel cache comes back (kc.tar.gz) for part c.
# Part c (kernel cache carried in .gpu/kc.tar.gz; the cap now reuses only spare blocks that cover
#   a request, as the stream-ordered pool does): the forum warm and the capacity scenario under the
#   cap; two more configs both ways (attention, aux head), the batch axis each.
# Results come back as $OUT/run20$PART.tar.gz (the device returns at most 8 files).
# What ran: part a; part b; part c's first call was lost (the machine was taken back), and with the
# device time left only its first bench ran, inline, on a fresh machine (timeout 195 s: it did not
# finish; its progress and journal are in docs/runs/h200/run20/c-*).
set -u
PART=${1:-a}
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
R=/tmp/run20$PART && mkdir -p $R
[ -f .gpu/kc.tar.gz ] && mkdir -p /tmp/kc && tar -C /tmp/kc -xzf .gpu/kc.tar.gz
pack() { cp $R/log.txt $OUT/ 2>/dev/null; tar -C /tmp -czf $OUT/run20$PART.tar.gz run20$PART; }
# later NAME FLAGS…: a bench only while at least 90 s of the call are left.
later() { [ $SECONDS -lt ${DEADLINE:-480} ] && bench "$@" || log "$1 skipped (time)"; }
log() { echo "$*" | tee -a $R/log.txt; }
FORUM=configs/forum-r101-os8-1024.toml
R50=configs/deeplabv3plus-r50-os8.toml
# bench NAME TIMEOUT [flags…]: one timed diagnosis, fresh journal, report + JSON + progress kept.
bench() {
  local name=$1 limit=$2; shift 2
  local s0=$SECONDS
  timeout $limit $B bench --backend cuda --fresh --journal /tmp/j-$name --json $R/$name.json "$@" \
    > $R/$name.txt 2> $R/$name.progress.txt
  log "$name rc=$? secs=$((SECONDS - s0))"
  cp /tmp/j-$name/*.jsonl $R/$name.journal.jsonl 2>/dev/null
}
capacity() { bench "$1" 200 --config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch "${@:2}"; }
if [ $PART = a ]; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > $R/gpus.csv
  # A capped trial first, in a kernel cache of its own (the cold run below stays cold).
  OOM_BISECT_KERNEL_CACHE=/tmp/kc-sanity timeout 150 $B trial --config $R50 --backend cuda \
    --memory-limit 12GiB --ceiling-by cap --json $R/sanity-cap.json > $R/sanity-cap.txt 2>&1
  log "sanity-cap rc=$?"
  grep -q '"outcome": *"fits"' $R/sanity-cap.json || { log "the capped trial did not fit: stop"; exit 1; }
  bench forum-cap-cold 420 --config $FORUM
  bench forum-cap-warm 300 --config $FORUM
  capacity capacity-cap
elif [ $PART = b ]; then
  bench forum-cap-cold 400 --config $FORUM
  capacity capacity-cap
  s0=$SECONDS; timeout 90 python3 .gpu/accelerate_capacity.py > $R/accelerate.txt 2>&1
  log "accelerate rc=$? secs=$((SECONDS - s0))"
  DEADLINE=500 later capacity-ballast 120 --config $R50 --set model.output_stride=16 \
    --memory-limit 24GiB --axes batch --ceiling-by ballast
  tar -C /tmp/kc -czf $OUT/kc.tar.gz compilation cuda-jit 2>/dev/null
  [ $(stat -c %s $OUT/kc.tar.gz) -gt 15000000 ] && tar -C /tmp/kc -czf $OUT/kc.tar.gz compilation
  ls -la $OUT/kc.tar.gz >> $R/log.txt
else
  bench forum-cap-warm 240 --config $FORUM
  capacity capacity-cap
  export DEADLINE=330
  for cfg in model.attention_heads=8 model.aux_head=true; do
    for by in cap ballast; do
      later ${cfg%%=*}-$by 70 --config $R50 --set $cfg --memory-limit 12GiB --axes batch --ceiling-by $by
    done
  done
fi
pack
