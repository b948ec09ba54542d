#!/usr/bin/env bash
# GPU run 33 (device tool, one fresh H200, empty kernel cache): the forum diagnosis (bench, cap,
# fresh journal) cold, then warm in the same call, after the need trial ("how much it needs") left
# the critical path. Results: $OUT/run33.tar.gz.
RUN=run33
# Ran with the build of commit 4aec73e (the need trial taken after the axes).
. docs/runs/prelude.sh
bench() { # NAME LIMIT
  local t0=$SECONDS
  timeout $2 $B bench --backend cuda --fresh --journal /tmp/j-$1 --ceiling-by cap \
    --config $FORUM --json $R/$1.json > $R/$1.txt 2> $R/$1.progress.txt
  log "$1 rc=$? $((SECONDS - t0))s"
}
bench forum-cold ${COLD_LIMIT:-205}
bench forum-warm ${WARM_LIMIT:-145}
finish
