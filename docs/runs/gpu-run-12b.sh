#!/usr/bin/env bash
# GPU run 12b (device tool, one H200, after 12a on the same machine: kernels cached): boundaries under
# 24 GiB (CUDA context included) from PyTorch (tools/pytorch/boundary.py, a fresh process per probe)
# and from oom-bisect with each memory model: the forum scenario's batch and size axes, and the
# largest batch of R50 OS16 512².
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
mkdir -p $OUT/r
log() { echo "$*" >> $OUT/r/log.txt; }
FORUM=configs/forum-r101-os8-1024.toml
R50=configs/deeplabv3plus-r50-os8.toml
ob() { # name sets... (after --)
  local name=$1; shift
  local s0=$SECONDS
  timeout 280 $B bisect --backend cuda --memory-limit 24GiB --no-confirm --fresh --quiet \
    --journal /tmp/j-$name --json $OUT/r/$name.json "$@" > $OUT/r/$name.txt 2>&1
  log "$name rc=$? secs=$((SECONDS - s0))"
  tar czf $OUT/run12b.tgz -C $OUT/r .
}
pt() { # name args...
  local name=$1; shift
  local s0=$SECONDS
  timeout 280 python3 tools/pytorch/boundary.py --memory-limit 24GiB "$@" > $OUT/r/$name.jsonl 2>&1
  log "$name rc=$? secs=$((SECONDS - s0))"
  tar czf $OUT/run12b.tgz -C $OUT/r .
}
pt torch-forum-batch $FORUM --axis batch
pt torch-forum-size $FORUM --axis size
pt torch-r50os16-batch $R50 --axis batch --set model.output_stride=16
for mm in pytorch burn; do
  M="--set device.memory_model=\"$mm\""
  ob $mm-forum --config $FORUM --axes batch,size $M
  ob $mm-r50os16 --config $R50 --set model.output_stride=16 --axes batch $M
done
