#!/usr/bin/env bash
# GPU run 32 (device tool, one fresh H200, empty kernel cache): issue 24's figures for this build:
# the forum diagnosis cold (bench, cap, fresh journal), the capacity search (R50 OS16 512² under
# 24 GiB, cap), the forum again warm, then, where time is left, the capacity search by the build of
# the eleventh session (.gpu/oom-bisect-old.gz, commit 7001d4e: no gallop from the prediction).
# Results: $OUT/run32.tar.gz.
# Ran with the build of commit a008ab6 (the gallop that bisects after a turn; the minimal search beside the axes).
RUN=run32
. docs/runs/prelude.sh
bench() { # NAME LIMIT BINARY ARGS…
  local name=$1 limit=$2 bin=$3 t0=$SECONDS; shift 3
  timeout $limit $bin bench --backend cuda --fresh --journal /tmp/j-$name --ceiling-by cap \
    --json $R/$name.json "$@" > $R/$name.txt 2> $R/$name.progress.txt
  log "$name rc=$? $((SECONDS - t0))s"
}
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
bench forum-cold ${COLD_LIMIT:-330} $B --config $FORUM
bench capacity-new 70 $B $CAPACITY
bench forum-warm ${WARM_LIMIT:-160} $B --config $FORUM
# The build before, only where the call's 600 s still hold it.
if [ -x /tmp/bin/oom-bisect-old ] && [ $((SECONDS + 75)) -lt 580 ]; then
  bench capacity-old 70 /tmp/bin/oom-bisect-old $CAPACITY
fi
finish
