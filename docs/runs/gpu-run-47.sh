#!/usr/bin/env bash
# GPU run 47 (device tool, one fresh H200), in one call: where a PyTorch's first trial spends its
# seconds (docs/runs/first-trial.py: a reference started and waiting, batch 32 cold three times,
# batch 1 then 32 twice, cProfile of a first trial); the capacity (R50 OS16 512², 24 GiB, the
# reference holding its ceiling, served, five at once) with each worker's holder warming its
# command up while idle (the default) against OOM_BISECT_WARM_UP=off (run 46's behaviour),
# alternating; accelerate's find_executable_batch_size (.gpu/accelerate_capacity.py, from
# ../shared/tools/peers/); then the forum served, warm-up on and off. The warm-up never fired and
# was reverted after this run (docs/performance.md, twenty-first session): OOM_BISECT_WARM_UP is
# gone, so this script now runs the same thing twice. carry [".gpu"] with this
# build as .gpu/oom-bisect.gz. Results: $OUT/run47.tar.gz.
RUN=run47
. docs/runs/prelude.sh
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
t0=$SECONDS; timeout 150 python3 docs/runs/first-trial.py $R > $R/first-trial.txt 2>&1
log "first-trial rc=$? $((SECONDS - t0))s"
for k in 1 2; do
  bench_with exec-warm-$k 60 $B --exec "$TORCH" --ceiling-by command --serve $CAPACITY
  OOM_BISECT_WARM_UP=off bench_with exec-nowarm-$k 60 $B --exec "$TORCH" --ceiling-by command \
    --serve $CAPACITY
done
t0=$SECONDS; timeout 60 python3 .gpu/accelerate_capacity.py > $R/accelerate.txt 2>&1
log "accelerate rc=$? $((SECONDS - t0))s"
finish # the results so far, should the forum runs pass the call's limit
bench_with forum-warm 120 $B --exec "$TORCH" --ceiling-by command --serve --config $FORUM
OOM_BISECT_WARM_UP=off bench_with forum-nowarm 120 $B --exec "$TORCH" --ceiling-by command \
  --serve --config $FORUM
finish
