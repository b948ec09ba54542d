#!/usr/bin/env bash
# GPU run 34 (device tool, one fresh H200): `--exec` trials whose command holds its own ceiling
# (`--ceiling-by command`, issue 24). A sanity trial, then the capacity search (largest batch of
# R50 OS16 512² under 24 GiB) through `--exec` with the PyTorch reference, held by the command
# (five trials at once) and by the ballast (one at a time), accelerate's find_executable_batch_size
# in the same call, and the built-in search under the cap (cold kernel cache) where time is left.
# Results: $OUT/run34.tar.gz.
# Ran with the build of commit 9fd2a34 (the first follower in the reference: NVML, then the allocator).
RUN=run34
. docs/runs/prelude.sh
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
bench() { # NAME LIMIT ARGS…
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  timeout $limit $B bench --backend cuda --fresh --journal /tmp/j-$name --json $R/$name.json "$@" \
    > $R/$name.txt 2> $R/$name.progress.txt
  log "$name rc=$? $((SECONDS - t0))s"
}
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
t0=$SECONDS
# (the sanity trial failed: `--axes` in $CAPACITY is not a `trial` option)
timeout 90 $B trial --backend cuda $CAPACITY --set data.batch=8 --ceiling-by command \
  --exec "$TORCH" --json $R/sanity.json > $R/sanity.txt 2>&1
log "sanity rc=$? $((SECONDS - t0))s"
bench exec-command 150 --exec "$TORCH" --ceiling-by command $CAPACITY
t0=$SECONDS; timeout 90 python3 .gpu/accelerate_capacity.py > $R/accelerate.txt 2>&1
log "accelerate rc=$? $((SECONDS - t0))s"
bench exec-ballast 220 --exec "$TORCH" --ceiling-by ballast $CAPACITY
[ $((SECONDS + 100)) -lt 585 ] && bench builtin-cap $((580 - SECONDS)) --ceiling-by cap $CAPACITY
finish
