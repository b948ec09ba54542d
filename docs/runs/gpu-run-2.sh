#!/usr/bin/env bash
# GPU run 2 (device tool, H200): the ceiling held at ±1 GiB around a measured peak, then the torchvision
# recipe's peak if time is left. JSON reports and a log go to $OUT.
set -u
B=.gpu/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
export CUBECL_AUTOTUNE_LEVEL=minimal
C="--config configs/quickstart.toml --backend cuda --set data.batch=64 --set train.steps=2"
log() { echo "$*" | tee -a $OUT/log.txt; }
t() { # name, outer timeout, args
  local n=$1 lim=$2; shift 2
  local s=$SECONDS
  timeout $lim $B trial --trial-timeout $((lim - 5)) --json $OUT/$n.json "$@" > $OUT/$n.txt 2>&1
  log "$n rc=$? secs=$((SECONDS - s))"
}
t A 280 $C --memory-limit 100GiB
peak=$(python3 -c "import json;print(json.load(open('$OUT/A.json'))['peak_bytes'])" 2>/dev/null || echo 0)
log "peak=$peak"
if [ "$peak" -gt $((2 << 30)) ]; then
  t B 150 $C --memory-limit $((peak + (1 << 30)))
  t C 120 $C --memory-limit $((peak - (1 << 30)))
fi
left=$((560 - SECONDS))
[ $left -gt 60 ] && t D $left --config configs/deeplabv3plus-r50-os8.toml --backend cuda --memory-limit 100GiB --set train.steps=2
grep -h -E "^outcome|^peak|OUT OF|ERROR|TIMEOUT|step [0-9] " $OUT/*.txt | tee -a $OUT/log.txt
