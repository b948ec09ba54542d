#!/usr/bin/env bash
# GPU run 1 (device tool, H200): the pipeline on CUDA, memory sanity against PyTorch's figures, and
# the ceiling held at ±1 GiB around a measured peak. Run from the repository root with the release
# binary in .gpu/; logs and JSON go to $OUT.
set -u
B=.gpu/oom-bisect
O=/tmp/o; mkdir -p $O
export OOM_BISECT_KERNEL_CACHE=/tmp/kcache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $O/nvidia-smi.txt
t() { # name, then trial args
  local n=$1; shift
  local s=$(date +%s%N)
  timeout 300 $B trial --backend cuda --json $O/$n.json "$@" > $O/$n.txt 2>&1
  local rc=$?
  echo "$n rc=$rc wall_ms=$(( ($(date +%s%N) - s) / 1000000 ))" | tee -a $O/summary.txt
}
# The pipeline on CUDA at a small size first.
t quickstart --config configs/quickstart.toml --memory-limit 4GiB
# Memory sanity: the torchvision recipe (DESIGN.md reference figures), no ceiling.
t r50-os8-b4 --config configs/deeplabv3plus-r50-os8.toml
t r50-os8-b4-again --config configs/deeplabv3plus-r50-os8.toml
t r50-os16-b4 --config configs/deeplabv3plus-r50-os8.toml --set model.output_stride=16
t r101-os8-b4 --config configs/deeplabv3plus-r101-os8.toml
t r50-os8-b4-bf16 --config configs/deeplabv3plus-r50-os8.toml --set train.precision=bf16
# The ceiling: 1 GiB above and below the measured peak of r50-os8-b4.
peak=$(python3 -c "import json;print(json.load(open('$O/r50-os8-b4.json'))['peak_bytes'])")
up=$((peak + (1<<30))); down=$((peak - (1<<30)))
echo "peak=$peak up=$up down=$down" | tee -a $O/summary.txt
t ceiling-up --config configs/deeplabv3plus-r50-os8.toml --memory-limit $up
t ceiling-down --config configs/deeplabv3plus-r50-os8.toml --memory-limit $down
tail -n 4 $O/*.txt > $O/tails.txt
# The device tool returns at most 8 files: one archive, plus the summary.
tar czf ${OUT:-/tmp}/run1.tgz -C $O . && cp $O/summary.txt ${OUT:-/tmp}/summary.txt
