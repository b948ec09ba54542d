#!/usr/bin/env bash
# GPU run 39 (device tool, one fresh H200): after runs 37 and 38, the re-runs guessed beside the
# probes that may close the interval are taken out again (four trials end to end in runs 36, 37
# and 38 alike, with more trials started and not needed); a probe whose result is already there
# still guesses nothing. The capacity through `--exec` with the PyTorch reference held by the
# command: this build (.gpu/oom-bisect.gz, commit 7b7a32d) twice, the build of run 35
# (.gpu/oom-bisect-old.gz, OOM_BISECT_GUESSES=on, the default for such commands since commit
# ff7108e) between them, accelerate in the same call. Results: $OUT/run39.tar.gz.
RUN=run39
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
  [ $k = 1 ] && bench exec-old-$k 90 $OLD $CAPACITY
done
t0=$SECONDS; timeout 90 python3 .gpu/accelerate_capacity.py > $R/accelerate.txt 2>&1
log "accelerate rc=$? $((SECONDS - t0))s"
finish
