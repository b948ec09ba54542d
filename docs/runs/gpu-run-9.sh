#!/usr/bin/env bash
# GPU run 9 (device tool, H200): the forum scenario (R101 OS8 b4 1024², RTX 3090's 24 GiB) diagnosed
# from scratch with implicit-GEMM convolutions (vendor/burn-cubecl): `bench` times it, `bisect` then
# prints the full report from the same journal (no new trials), and `--confirm-runs 2` runs each
# boundary a third time (only those re-runs are new). The kernel cache comes back as kc.tgz.
# Binary: `cargo build --release`, gzip -9 into .gpu/oom-bisect.gz.
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
mkdir -p /tmp/kc && [ -f .gpu/kc.tgz ] && tar xzf .gpu/kc.tgz -C /tmp/kc
mkdir -p $OUT/journal && cp .gpu/journal/* $OUT/journal/ 2>/dev/null
F="--config configs/forum-r101-os8-1024.toml --backend cuda --trial-timeout 120 --journal $OUT/journal"
step() { # name timeout args...
  local name=$1 to=$2; shift 2
  local s=$SECONDS
  timeout $to $B "$@" > $OUT/$name.txt 2> $OUT/$name.err
  echo "$name rc=$? secs=$((SECONDS - s))" >> $OUT/log.txt
}
[ -n "${FRESH:-1}" ] && step forum-bench ${LIMIT:-420} bench $F --fresh --json $OUT/forum-bench.json
step forum 30 bisect $F --json $OUT/forum.json
step forum-3x 120 bisect $F --confirm-runs 2 --json $OUT/forum-3x.json
tar czf $OUT/kc.tgz -C /tmp/kc . ; du -sh /tmp/kc >> $OUT/log.txt
