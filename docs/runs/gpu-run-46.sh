#!/usr/bin/env bash
# GPU run 46 (device tool, one fresh H200): `--exec --serve` with spares (each worker starts the
# PyTorch reference ahead: its holder before its first trial, a spare that has run no trial for the
# next re-run) against the same build with OOM_BISECT_SPARES=off (run 45's served behaviour), in one
# call: the capacity (R50 OS16 512², 24 GiB, the reference holding its ceiling, five at once)
# alternating, then accelerate's find_executable_batch_size (.gpu/accelerate_capacity.py, from
# ../shared/tools/peers/). carry [".gpu"] with this build as .gpu/oom-bisect.gz.
# Results: $OUT/run46.tar.gz.
RUN=run46
. docs/runs/prelude.sh
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
bench_with exec-spares-1 60 $B --exec "$TORCH" --ceiling-by command --serve $CAPACITY
OOM_BISECT_SPARES=off bench_with exec-nospares-1 60 $B --exec "$TORCH" --ceiling-by command --serve $CAPACITY
bench_with exec-spares-2 60 $B --exec "$TORCH" --ceiling-by command --serve $CAPACITY
t0=$SECONDS; timeout 60 python3 .gpu/accelerate_capacity.py > $R/accelerate.txt 2>&1
log "accelerate rc=$? $((SECONDS - t0))s"
finish
