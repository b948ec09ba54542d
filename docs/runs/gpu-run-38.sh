#!/usr/bin/env bash
# GPU run 38 (device tool, one fresh H200): after run 37, a probe whose result is already there
# guesses nothing (stale guesses had taken the slots the confirmation's re-runs needed). The
# capacity through `--exec` with the PyTorch reference held by the command, this build
# (.gpu/oom-bisect.gz, commit 4f1da6a) against the build of run 35 (.gpu/oom-bisect-old.gz, with
# OOM_BISECT_GUESSES=on, the default for such commands since commit ff7108e), alternating,
# accelerate in the same call; then the forum through `--exec` again (run 37: 166 s).
# Results: $OUT/run38.tar.gz.
RUN=run38
. docs/runs/prelude.sh
OLD=/tmp/bin/oom-bisect-old
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
bench() { # NAME LIMIT BINARY ARGS…
  local name=$1 limit=$2 bin=$3 t0=$SECONDS; shift 3
  OOM_BISECT_GUESSES=on timeout $limit $bin bench --backend cuda --fresh --journal /tmp/j-$name \
    --json $R/$name.json --exec "$TORCH" --ceiling-by command "$@" > $R/$name.txt 2> $R/$name.progress.txt
  log "$name rc=$? $((SECONDS - t0))s"
}
for k in 1 2; do
  bench exec-new-$k 90 $B $CAPACITY
  bench exec-old-$k 90 $OLD $CAPACITY
done
t0=$SECONDS; timeout 90 python3 .gpu/accelerate_capacity.py > $R/accelerate.txt 2>&1
log "accelerate rc=$? $((SECONDS - t0))s"
bench exec-forum $((585 - SECONDS)) $B --config $FORUM
finish
