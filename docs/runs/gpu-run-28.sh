#!/usr/bin/env bash
# GPU run 28 (device tool, one H200): issue 24, trials sharing one GPU under the cap without guesses
# (Dispatch::guesses). The capacity scenario with guesses off (the new default under the cap) and
# on (OOM_BISECT_GUESSES=on, as before), then the forum diagnosis with them off. Warm kernel cache.
# Results: $OUT/run28.tar.gz.
set -uf
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
[ -f .gpu/kc.tar.gz ] && mkdir -p /tmp/kc && tar -C /tmp/kc -xzf .gpu/kc.tar.gz
R=/tmp/run28 && mkdir -p $R
log() { echo "$*" | tee -a $R/log.txt; }
FORUM=configs/forum-r101-os8-1024.toml
R50=configs/deeplabv3plus-r50-os8.toml
bench() {
  local name=$1 limit=$2; shift 2
  local s0=$SECONDS
  timeout $limit $B bench --backend cuda --fresh --journal /tmp/j-$name --json $R/$name.json "$@" \
    > $R/$name.txt 2> $R/$name.progress.txt
  log "$name rc=$? secs=$((SECONDS - s0))"
}
bench capacity-off 90 --config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch \
  --ceiling-by cap
OOM_BISECT_GUESSES=on bench capacity-on 90 --config $R50 --set model.output_stride=16 \
  --memory-limit 24GiB --axes batch --ceiling-by cap
bench forum-off ${FORUM_LIMIT:-280} --config $FORUM --ceiling-by cap
tar -C /tmp -czf $OUT/run28.tar.gz run28; cp $R/log.txt $OUT/
