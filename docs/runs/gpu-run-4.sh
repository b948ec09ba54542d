#!/usr/bin/env bash
# GPU run 4 (device tool, H200): where a trial's time goes. The quickstart model at batch 64, three
# training steps, with and without burn's fusion, each cold (empty caches) then warm, with cubecl's
# compilation and autotune logs; then the ceiling pair at +/-1 GiB around the warm trial's peak.
# The binary: `cargo build --release --features autotune` (autotune was the default build then),
# copied to .gpu/oom-bisect. Everything lands in $OUT as it is produced (log.txt, and o.tgz rewritten after every trial).
set -u
B=$PWD/.gpu/oom-bisect
O=/tmp/o; mkdir -p $O
DEADLINE=${DEADLINE:-575}
export CUBECL_AUTOTUNE_LEVEL=minimal
C="--config configs/quickstart.toml --backend cuda --set data.batch=64 --set train.steps=3"
log() { echo "$*" | tee -a $OUT/log.txt; }
logs() { # cubecl's loggers, one pair of files per trial
  cat > cubecl.toml <<T
[compilation.logger]
level = "basic"
file = "$O/$1.compile.log"
[autotune.logger]
level = "minimal"
file = "$O/$1.autotune.log"
T
}
t() { # name, time limit, args...
  local n=$1 lim=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  [ $lim -gt $left ] && lim=$left
  if [ $lim -lt 20 ]; then log "$n skipped (no time left)"; return; fi
  logs $n
  local s=$SECONDS
  timeout $((lim + 10)) $B trial --trial-timeout $lim --json $O/$n.json "$@" > $O/$n.txt 2>&1
  local rc=$?
  log "$n rc=$rc secs=$((SECONDS - s)) compiles=$(grep -c . $O/$n.compile.log 2>/dev/null) tunes=$(grep -c . $O/$n.autotune.log 2>/dev/null) $(grep -E '^outcome|^peak' $O/$n.txt | tr '\n' ' ')"
  tar czf $OUT/o.tgz -C /tmp o
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a $OUT/log.txt
export OOM_BISECT_KERNEL_CACHE=/tmp/kc-fused
t Q1-fused-cold 170 $C --memory-limit 100GiB
t Q2-fused-warm 90 $C --memory-limit 100GiB
du -sh /tmp/kc-fused/* 2>&1 | tee -a $OUT/log.txt
export OOM_BISECT_KERNEL_CACHE=/tmp/kc-unfused OOM_BISECT_FUSION=off
t Q3-unfused-cold 150 $C --memory-limit 100GiB
t Q4-unfused-warm 60 $C --memory-limit 100GiB
export OOM_BISECT_KERNEL_CACHE=/tmp/kc-fused OOM_BISECT_FUSION=on
peak=$(python3 -c "import json;print(json.load(open('$O/Q2-fused-warm.json'))['peak_bytes'])" 2>/dev/null || echo 0)
log "Q2 peak=$peak"
if [ "$peak" -gt $((2 << 30)) ]; then
  t P-plus 60 $C --memory-limit $((peak + (1 << 30)))
  t P-minus 60 $C --memory-limit $((peak - (1 << 30)))
fi
log "done at ${SECONDS}s"
