#!/usr/bin/env bash
# GPU run 31 (device tool, one H200), after runs 29 and 30 on the same machine (warm kernel cache):
# the forum diagnosis (bench, cap, fresh journal) with this build and, when .gpu/oom-bisect-old.gz
# is there, the build before, and the capacity search by the build before. The kernel cache it
# packs (109 MB) does not come back: $OUT takes 16 MiB a file.
# Results: $OUT/run31.tar.gz.
# The build before: commit 7001d4e (the eleventh session).
# Ran with the build of commit 06b35f2 (the splitting pools of 75aff1f, since reverted; the first gallop).
RUN=run31
. docs/runs/prelude.sh
forum() {
  local t0=$SECONDS
  timeout ${FORUM_LIMIT:-260} $1 bench --backend cuda --fresh --journal /tmp/j-$2 --config $FORUM \
    --ceiling-by cap --json $R/$2.json > $R/$2.txt 2> $R/$2.progress.txt
  log "$2 rc=$? $((SECONDS - t0))s"
}
forum $B forum-new
if [ -x /tmp/bin/oom-bisect-old ]; then
  t0=$SECONDS
  timeout 150 /tmp/bin/oom-bisect-old bench --backend cuda --fresh --journal /tmp/j-capacity-old \
    --config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch --ceiling-by cap \
    --json $R/capacity-old.json > $R/capacity-old.txt 2> $R/capacity-old.progress.txt
  log "capacity-old rc=$? $((SECONDS - t0))s"
fi
[ -x /tmp/bin/oom-bisect-old ] && forum /tmp/bin/oom-bisect-old forum-old
tar -C /tmp/kc -czf $OUT/kc.tar.gz . 2>/dev/null; ls -la $OUT/kc.tar.gz
finish
