#!/usr/bin/env bash
# Binaries: .gpu/oom-bisect-noat.gz is `cargo build --release` (no autotune, now the default build),
# gzip -9 so that two binaries fit the device tool's 64 MiB carry; unpacked to /tmp/bin on the device.
# GPU run 5 (device tool, H200): burn-cuda built without autotune (`--no-default-features --features
# cuda`: each op compiles one default kernel instead of benchmarking every candidate). The quickstart
# model at batch 64 cold then warm, the +/-1 GiB ceiling pair around the warm trial's peak, then the
# torchvision recipe's trials for the memory table. Results land in $OUT as they are produced.
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=${B:-/tmp/bin/oom-bisect-noat}
O=/tmp/o; mkdir -p $O
DEADLINE=${DEADLINE:-575}
export OOM_BISECT_KERNEL_CACHE=/tmp/kc-noat
Q="--config configs/quickstart.toml --backend cuda --set data.batch=64 --set train.steps=3"
log() { echo "$*" | tee -a $OUT/log.txt; }
logs() {
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
  log "$n rc=$rc secs=$((SECONDS - s)) compiles=$(grep -c . $O/$n.compile.log 2>/dev/null) $(grep -E '^outcome|^peak|^time|^  step' $O/$n.txt | tr '\n' ' ')"
  tar czf $OUT/o.tgz -C /tmp o
}
peak() { python3 -c "import json;print(json.load(open('$O/$1.json'))['peak_bytes'] or 0)" 2>/dev/null || echo 0; }
log "run 4 with $B"
t N1-cold 150 $Q --memory-limit 100GiB
t N2-warm 60 $Q --memory-limit 100GiB
p=$(peak N2-warm); log "N2 peak=$p"
if [ "$p" -gt $((2 << 30)) ]; then
  t N3-plus 60 $Q --memory-limit $((p + (1 << 30)))
  t N4-minus 60 $Q --memory-limit $((p - (1 << 30)))
fi
R="--backend cuda --memory-limit 130GiB --set train.steps=3"
t R50-os8 200 --config configs/deeplabv3plus-r50-os8.toml $R
t R50-os16 150 --config configs/deeplabv3plus-r50-os8.toml $R --set model.output_stride=16
t R101-os8 150 --config configs/deeplabv3plus-r101-os8.toml $R
log "done at ${SECONDS}s"
