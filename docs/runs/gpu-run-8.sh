#!/usr/bin/env bash
# GPU run 8 (device tool, H200): burn-cubecl's direct convolution kernel (upstream's default without
# autotune) against implicit GEMM on tensor cores (vendor/burn-cubecl, `OOM_BISECT_CONV=gemm`), same
# binary (`cargo build --release`, gzip -9 into .gpu/), same trials: step times, peaks, losses.
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
t() { # name conv timeout args...
  local name=$1 conv=$2 to=$3; shift 3
  local s=$SECONDS
  OOM_BISECT_CONV=$conv OOM_BISECT_KERNEL_CACHE=/tmp/kc-$conv timeout $((to + 10)) $B trial --backend cuda \
    --trial-timeout $to --json $OUT/$name-$conv.json "$@" > $OUT/$name-$conv.txt 2>&1
  echo "$name $conv rc=$? secs=$((SECONDS - s))" >> $OUT/log.txt
  tar czf $OUT/o.tgz -C $OUT --exclude o.tgz . 2>/dev/null
}
Q="--config configs/quickstart.toml --set train.batch=64"
R50="--config configs/deeplabv3plus-r50-os8.toml --memory-limit 130GiB"
R101="--config configs/deeplabv3plus-r101-os8.toml --memory-limit 130GiB"
# Cold (kernels compile) then warm, gemm first: it is the new one.
t q-cold gemm 90 $Q
t q-warm gemm 40 $Q
t r50 gemm 100 $R50
t r50-warm gemm 50 $R50
t r101 gemm 100 $R101
t q-warm direct 30 $Q
t r50 direct 70 $R50
nvidia-smi --query-gpu=name,memory.total --format=csv >> $OUT/log.txt
