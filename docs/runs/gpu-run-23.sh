#!/usr/bin/env bash
# GPU run 23 (device tool, one H200), with the settled release-and-retry of run 22, kernel cache
# carried from run 20 (.gpu/kc.tar.gz, the forum's and the capacity scenario's kernels):
#   forum-cap      the forum diagnosis under the cap, as many trials at once as fit (warm);
#   capacity-cap   the capacity scenario under the cap;
#   forum-ballast  the forum's batch and size axes under the ballast, for the equality table.
# Results: $OUT/run23.tar.gz.
set -uf
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
[ -f .gpu/kc.tar.gz ] && mkdir -p /tmp/kc && tar -C /tmp/kc -xzf .gpu/kc.tar.gz
R=/tmp/run23 && mkdir -p $R
log() { echo "$*" | tee -a $R/log.txt; }
FORUM=configs/forum-r101-os8-1024.toml
R50=configs/deeplabv3plus-r50-os8.toml
bench() {
  local name=$1 limit=$2; shift 2
  local s0=$SECONDS
  timeout $limit $B bench --backend cuda --fresh --journal /tmp/j-$name --json $R/$name.json "$@" \
    > $R/$name.txt 2> $R/$name.progress.txt
  log "$name rc=$? secs=$((SECONDS - s0))"
  cp /tmp/j-$name/*.jsonl $R/$name.journal.jsonl 2>/dev/null
}
bench forum-cap 260 --config $FORUM --ceiling-by cap
bench capacity-cap 90 --config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch \
  --ceiling-by cap
bench forum-ballast 170 --config $FORUM --ceiling-by ballast --axes batch,size
tar -C /tmp -czf $OUT/run23.tar.gz run23; cp $R/log.txt $OUT/
