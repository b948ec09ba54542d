#!/usr/bin/env bash
# GPU run 43 (device tool, one fresh H200): the confirmation's re-runs start beside a probe that may
# close the interval (where the search is the only one asking for trials: the capacity), this
# build against run 42's (.gpu/oom-bisect-old.gz) in one call. The capacity (R50 OS16 512², 24
# GiB, cap, five at once) once cold to fill the kernel cache, then three times each alternating;
# then through --exec with the PyTorch reference holding its ceiling, once each.
#   PART=forum, next on the same warm machine: the forum (cap) with this build "cold" (the
#   capacity's kernels cached), then warm, then run 42's build warm.
# Results: $OUT/run43.tar.gz (PART=forum: $OUT/run43f.tar.gz, kept as docs/runs/h200/run43/forum).
PART=${PART:-capacity}
RUN=run43
[ $PART = forum ] && RUN=run43f
. docs/runs/prelude.sh
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
if [ $PART = forum ]; then
  bench_with forum-new-cold 200 $B --ceiling-by cap --config $FORUM
  bench_with forum-new-warm 140 $B --ceiling-by cap --config $FORUM
  bench_with forum-old-warm 140 $B-old --ceiling-by cap --config $FORUM
  finish
  exit
fi
bench_with cap-cold 120 $B --ceiling-by cap $CAPACITY
for k in 1 2 3; do
  bench_with cap-new-$k 50 $B --ceiling-by cap $CAPACITY
  bench_with cap-old-$k 50 $B-old --ceiling-by cap $CAPACITY
done
bench_with exec-new 100 $B --exec "$TORCH" --ceiling-by command $CAPACITY
bench_with exec-old 100 $B-old --exec "$TORCH" --ceiling-by command $CAPACITY
log "kernel cache: $(du -sh /tmp/kc | cut -f1) at end"
finish
