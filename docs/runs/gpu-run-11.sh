#!/usr/bin/env bash
# GPU run 11 (device tool, H200): burn-nn's BatchNorm against the lean one (`model.batch_norm = "lean"`,
# crates/deeplab/src/blocks.rs) on the memory table's recipes, 512×512, batch 4, three steps.
# Binary: `cargo build --release`, gzip -9 into .gpu/oom-bisect.gz.
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
mkdir -p $OUT/r
t() { # name timeout args...
  local name=$1 to=$2; shift 2
  local s=$SECONDS
  timeout $((to + 10)) $B trial --backend cuda --memory-limit 130GiB --trial-timeout $to \
    --json $OUT/r/$name.json "$@" > $OUT/r/$name.txt 2>&1
  echo "$name rc=$? secs=$((SECONDS - s))" >> $OUT/r/log.txt
  tar czf $OUT/run11.tgz -C $OUT/r .
}
L='--set model.batch_norm="lean"'
t r50-os8-lean 70 --config configs/deeplabv3plus-r50-os8.toml $L
t r50-os8-burn 30 --config configs/deeplabv3plus-r50-os8.toml
t r101-os8-lean 40 --config configs/deeplabv3plus-r101-os8.toml $L
t r50-os16-lean 40 --config configs/deeplabv3plus-r50-os8.toml --set model.output_stride=16 $L
