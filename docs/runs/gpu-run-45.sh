#!/usr/bin/env bash
# GPU run 45 (device tool, one fresh H200): `--exec --serve`, the PyTorch reference answering a
# worker's trials in one process (re-runs in fresh ones), against the same command started for
# every trial, the same binary, in one call. The capacity (R50 OS16 512², 24 GiB, the reference
# holding its ceiling, five at once) alternating twice, accelerate's find_executable_batch_size
# (.gpu/accelerate_capacity.py, from ../shared/tools/peers/), then the forum served once.
# carry [".gpu"] with this build as .gpu/oom-bisect.gz. Results: $OUT/run45.tar.gz.
RUN=run45
. docs/runs/prelude.sh
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
for k in 1 2; do
  bench_with exec-served-$k 90 $B --exec "$TORCH" --ceiling-by command --serve $CAPACITY
  bench_with exec-fresh-$k 90 $B --exec "$TORCH" --ceiling-by command $CAPACITY
done
t0=$SECONDS; timeout 90 python3 .gpu/accelerate_capacity.py > $R/accelerate.txt 2>&1
log "accelerate rc=$? $((SECONDS - t0))s"
bench_with forum-exec-served 240 $B --exec "$TORCH" --ceiling-by command --serve --config $FORUM
finish
