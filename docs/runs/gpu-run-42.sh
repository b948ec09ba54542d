#!/usr/bin/env bash
# GPU run 42 (device tool, one fresh H200; PART=a then PART=b on the same warm machine).
#   a: an out-of-memory ends its trial at once (the watchdog's 1.5 s grace only after other
#      panics) and predictions take the pools' padding off the ceiling: this build against run
#      41's (.gpu/oom-bisect-old.gz) in one call. The forum under the cap (five at once): this
#      build cold (fills the kernel cache), then run 41's warm, then this build warm; the capacity
#      (R50 OS16 512², 24 GiB, cap) alternating, twice each.
#   b: issue 25's side-by-side sweep again with this build (44 candidates, built-in and the
#      PyTorch reference under 24 GiB held in the process, five at once): the first run of the
#      reference's `trained()` (its truncated rows), and the built-in side with one step far below
#      the ceiling. The table: python3 tools/pytorch/sweep.py --out DIR --table.
# Results: $OUT/run42$PART.tar.gz.
PART=${PART:-a}
RUN=run42$PART
. docs/runs/prelude.sh
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
if [ $PART = a ]; then
  bench_with forum-new-cold 210 $B --ceiling-by cap --config $FORUM
  bench_with forum-old-warm 150 $B-old --ceiling-by cap --config $FORUM
  bench_with forum-new-warm 150 $B --ceiling-by cap --config $FORUM
  for k in 1 2; do
    bench_with cap-new-$k 50 $B --ceiling-by cap $CAPACITY
    bench_with cap-old-$k 50 $B-old --ceiling-by cap $CAPACITY
  done
else
  t0=$SECONDS
  timeout 520 python3 tools/pytorch/sweep.py --bin $B --out $R --jobs 5 > $R/table.md 2> $R/sweep.err
  log "sweep rc=$? $((SECONDS - t0))s"
fi
log "kernel cache: $(du -sh /tmp/kc | cut -f1) at end"
finish
