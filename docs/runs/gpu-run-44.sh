#!/usr/bin/env bash
# GPU run 44 (device tool, one fresh H200; written in the seventeenth session, which had no device
# time left, so not run yet): this build against run 43's (commit f6973fd) in one call.
#   - The forum (cap, five at once): this build cold, then this build and run 43's warm, twice each,
#     alternating. Expected of this build: the fine sizes 840, 856 instead of 840, 848, 856 (one
#     near-ceiling round less on the longest chain), the batch and stride boundaries' fits (19.1
#     and 17.6 GiB, under 90% of 24) not re-run, every verdict, boundary and fix as before; and,
#     where a trial reads past its ceiling without a refused page (batch 3 at 960² in runs 41-43
#     warm), its error saying what the process held outside its pools at that reading.
#   - The capacity (R50 OS16 512², cap), twice each, alternating: unchanged expected (34 | 35).
# Make run 43's build first, here:
#   git worktree add /tmp/old f6973fd && (cd /tmp/old && cargo build --release) &&
#   gzip -9 -c /tmp/old/target/release/oom-bisect > .gpu/oom-bisect-old.gz
# and this build as .gpu/oom-bisect.gz; carry [".gpu"]. Two calls on one warm machine (a call may
# run 600 s): PART=a (the cold forum and one warm pair, about 350 s), then PART=b (the second warm
# pair and the capacity, about 260 s); results: $OUT/run44.tar.gz (PART=b's holds both).
RUN=run44
. docs/runs/prelude.sh
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
warm_pair() { # K: this build's forum and run 43's, warm, one after the other
  bench_with forum-new-warm-$1 120 $B --ceiling-by cap --config $FORUM
  bench_with forum-old-warm-$1 120 $B-old --ceiling-by cap --config $FORUM
}
if [ "${PART:-a}" = a ]; then
  bench_with forum-new-cold 200 $B --ceiling-by cap --config $FORUM
  warm_pair 1
else
  warm_pair 2
  for k in 1 2; do
    bench_with cap-new-$k 40 $B --ceiling-by cap $CAPACITY
    bench_with cap-old-$k 40 $B-old --ceiling-by cap $CAPACITY
  done
fi
find $R -name "*.progress.txt" -exec grep -h "more than its ceiling" {} + | head -5 | tee -a $R/log.txt
finish
