#!/usr/bin/env bash
# GPU run 36 (device tool, one fresh H200): the capacity search's first predicted probe started
# beside the top of the axis (where the original fits it needs nothing else), and `--exec` commands
# reporting each finished step (`step_done`: what the step left held, from which the search
# predicts instead of bisecting). This build (.gpu/oom-bisect.gz) against the build of run 35
# (.gpu/oom-bisect-old.gz), alternating, in one call: the built-in capacity under the cap (guesses
# off, the default; and on), the capacity through `--exec` with the PyTorch reference held by the
# command, accelerate's find_executable_batch_size in the same call.
# Results: $OUT/run36.tar.gz.
# Ran with the working tree just before commit 69c92d6: that commit's prediction beside the top and
# step_done, without its guessed re-runs (added after this run, taken out again in 7b7a32d); the
# build kept since is this one plus the readiness check (4f1da6a).
RUN=run36
. docs/runs/prelude.sh
OLD=/tmp/bin/oom-bisect-old
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
bench() { # NAME LIMIT BINARY GUESSES ARGS…
  local name=$1 limit=$2 bin=$3 guesses=$4 t0=$SECONDS; shift 4
  OOM_BISECT_GUESSES=$guesses timeout $limit $bin bench --backend cuda --fresh \
    --journal /tmp/j-$name --json $R/$name.json "$@" > $R/$name.txt 2> $R/$name.progress.txt
  log "$name rc=$? $((SECONDS - t0))s"
}
# The first run compiles the kernels (cold cache); the rest find them.
bench cap-old-cold 150 $OLD off --ceiling-by cap $CAPACITY
for k in 1 2; do
  bench cap-new-$k 90 $B off --ceiling-by cap $CAPACITY
  bench cap-old-$k 90 $OLD off --ceiling-by cap $CAPACITY
  bench cap-new-guesses-$k 90 $B on --ceiling-by cap $CAPACITY
done
t0=$SECONDS; timeout 90 python3 .gpu/accelerate_capacity.py > $R/accelerate.txt 2>&1
log "accelerate rc=$? $((SECONDS - t0))s"
bench exec-new 120 $B on --exec "$TORCH" --ceiling-by command $CAPACITY
[ $((SECONDS + 90)) -lt 580 ] && bench exec-old $((580 - SECONDS)) $OLD on --exec "$TORCH" --ceiling-by command $CAPACITY
finish
