#!/usr/bin/env bash
# GPU run 43 (device tool, one fresh H200): the confirmation's re-runs start beside a probe that may
# close the interval (where the search is the only one asking for trials: the capacity), this
# build against run 42's (.gpu/oom-bisect-old.gz) in one call. The capacity (R50 OS16 512², 24
# GiB, cap, five at once) once cold to fill the kernel cache, then three times each alternating;
# then through --exec with the PyTorch reference holding its ceiling, once each.
# Results: $OUT/run43.tar.gz.
RUN=run43
. docs/runs/prelude.sh
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
bench() { # NAME LIMIT BINARY ARGS…
  local name=$1 limit=$2 bin=$3 t0=$SECONDS; shift 3
  timeout $limit $bin bench --backend cuda --fresh --journal /tmp/j-$name \
    --json $R/$name.json "$@" > $R/$name.txt 2> $R/$name.progress.txt
  log "$name rc=$? $((SECONDS - t0))s"
}
bench cap-cold 120 $B --ceiling-by cap $CAPACITY
for k in 1 2 3; do
  bench cap-new-$k 50 $B --ceiling-by cap $CAPACITY
  bench cap-old-$k 50 $B-old --ceiling-by cap $CAPACITY
done
bench exec-new 100 $B --exec "$TORCH" --ceiling-by command $CAPACITY
bench exec-old 100 $B-old --exec "$TORCH" --ceiling-by command $CAPACITY
log "kernel cache: $(du -sh /tmp/kc | cut -f1) at end"
finish
