#!/usr/bin/env bash
# GPU run 18 (device tool, nvidia-h200-x2): mixed precision (autocast) in the built-in model against
# PyTorch's autocast, on the forum scenario (R101 OS8 batch 4 1024²).
# - GPU 0: the built-in model; GPU 1: the PyTorch reference through --exec, side by side. For each
#   precision (f32, mixed-f16, mixed-bf16, f16, bf16) one trial without a ceiling (what it needs)
#   and one under 24 GiB (fits or not).
# Everything comes back as $OUT/run18.tar.gz and $OUT/log.txt.
# `bash docs/runs/gpu-run-18.sh b`: after part a (f16 and mixed-f16 gave NaN in burn), BatchNorm under
# autocast computes in f32 as cuDNN does; the built-in model's low precisions again, into run18b.
set -u
PART=${1:-a}
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
R=/tmp/run18 && [ $PART = b ] && R=/tmp/run18b
mkdir -p $R
PRECISIONS="f32 mixed-f16 mixed-bf16 f16 bf16" && [ $PART = b ] && PRECISIONS="mixed-f16 mixed-bf16 f16"
log() { echo "$*" | tee -a $OUT/log.txt; }
EXEC='python3 tools/pytorch/deeplabv3plus.py {config}'
side() {  # side GPU NAME [flags…]: every precision, unbounded and under 24 GiB
  local gpu=$1 name=$2; shift 2
  for p in $PRECISIONS; do
    for limit in none 24GiB; do
      CUDA_VISIBLE_DEVICES=$gpu timeout 120 $B trial --config configs/forum-r101-os8-1024.toml --backend cuda \
        --set "train.precision=\"$p\"" --memory-limit $limit --json $R/$name-$p-$limit.json "$@" \
        > $R/$name-$p-$limit.txt 2>&1
      log "$name $p $limit rc=$?"
    done
  done
}
side 0 burn &
[ $PART = a ] && side 1 torch --exec "$EXEC" &
wait
tar -C /tmp -czf $OUT/$(basename $R).tar.gz $(basename $R)
