#!/usr/bin/env bash
# GPU run 10 (device tool, H200); binary `cargo build --release`, gzip -9 into .gpu/. Steps, in order:
#   r50    R50 OS8 512² at batch 8 under an RTX 3090's 24 GiB (batch 4 peaks at 14.96 GiB), each
#          boundary run 3 times (--confirm-runs 2). Resumes from .gpu/j-r50/ when it is there.
#   forum  the forum scenario, timed from scratch (fresh journal, cold kernel caches)
#   warm   the forum scenario again on the same machine: fresh journal, warm kernel cache
# e.g. `bash docs/runs/gpu-run-10.sh r50 forum`. Everything lands in $OUT/run10.tgz (only a few files
# come back from the device). Call 1 ran `r50` alone from scratch (cut by its limit at trial 49);
# call 2 `r50 forum`, resuming r50 from call 1's journal less its forward-phase trials (the bug
# fixed in crates/deeplab/src/train.rs).
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
mkdir -p $OUT/r
step() { # name timeout args...
  local name=$1 to=$2; shift 2
  local s=$SECONDS
  timeout $to $B "$@" > $OUT/r/$name.txt 2> $OUT/r/$name.err
  echo "$name rc=$? secs=$((SECONDS - s))" >> $OUT/r/log.txt
  tar czf $OUT/run10.tgz -C $OUT/r .
}
F="--config configs/forum-r101-os8-1024.toml --backend cuda --trial-timeout 120"
for what in "$@"; do case $what in
r50)
  R="--config configs/deeplabv3plus-r50-os8.toml --set data.batch=8 --gpu rtx3090 --backend cuda --trial-timeout 120"
  if [ -d .gpu/j-r50 ]; then cp -r .gpu/j-r50 $OUT/r/j-r50; fresh=; else fresh=--fresh; fi
  step r50-b8-bench ${LIMIT_R50:-420} bench $R --journal $OUT/r/j-r50 $fresh --confirm-runs 2 --json $OUT/r/r50-b8.json
  ;;
forum)
  step forum-cold ${LIMIT_FORUM:-330} bench $F --journal $OUT/r/j-cold --fresh --json $OUT/r/forum-cold.json
  du -sh /tmp/kc >> $OUT/r/log.txt
  ;;
warm)
  step forum-warm ${LIMIT_WARM:-230} bench $F --journal $OUT/r/j-warm --fresh --json $OUT/r/forum-warm.json
  ;;
*) echo "usage: $0 r50|forum|warm ..." >&2; exit 2 ;;
esac; done
