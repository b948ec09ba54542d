#!/usr/bin/env bash
# GPU run 12a (device tool, one H200): peaks side by side. For each recipe, PyTorch (the reference
# script, tools/pytorch/deeplabv3plus.py, its own max_memory_allocated/reserved) and one oom-bisect
# trial per memory model (pytorch, burn), all in this one call on the same machine.
# Binary: `cargo build --release`, gzip -9 into .gpu/oom-bisect.gz.
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
mkdir -p $OUT/r
log() { echo "$*" >> $OUT/r/log.txt; }
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())' >> $OUT/r/log.txt 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $OUT/r/log.txt 2>&1
# name | config | sets
R50=configs/deeplabv3plus-r50-os8.toml
R101=configs/deeplabv3plus-r101-os8.toml
FORUM=configs/forum-r101-os8-1024.toml
rows=(
  "r50-os8|$R50|"
  "r50-os16|$R50|model.output_stride=16"
  "r101-os8|$R101|"
  "r101-os8-1024-b2|$FORUM|data.batch=2"
  "r50-os8-attn-aux|$R50|model.attention_heads=8 model.aux_head=true"
)
python3 tools/pytorch/deeplabv3plus.py $R50 --params > $OUT/r/params-r50.json 2>&1
for row in "${rows[@]}"; do
  IFS='|' read -r name cfg sets <<< "$row"
  S=(); for s in $sets; do S+=(--set "$s"); done
  s0=$SECONDS
  timeout 200 python3 tools/pytorch/deeplabv3plus.py $cfg "${S[@]}" > $OUT/r/$name-torch.jsonl 2> $OUT/r/$name-torch.err
  log "$name torch rc=$? secs=$((SECONDS - s0))"
  for mm in pytorch burn; do
    s0=$SECONDS
    timeout 200 $B trial --backend cuda --memory-limit 130GiB --trial-timeout 190 --config $cfg "${S[@]}" \
      --set device.memory_model=\"$mm\" --json $OUT/r/$name-$mm.json > $OUT/r/$name-$mm.txt 2>&1
    log "$name $mm rc=$? secs=$((SECONDS - s0))"
  done
  tar czf $OUT/run12a.tgz -C $OUT/r .
done
# A card held by another process (a leftover trial): the trial must say so, not report an OOM.
python3 -c 'import torch,time; x=torch.empty(10<<30,dtype=torch.uint8,device="cuda"); time.sleep(60)' &
HOLDER=$!; sleep 15
timeout 60 $B trial --backend cuda --memory-limit 24GiB --config configs/quickstart.toml \
  --json $OUT/r/held.json > $OUT/r/held.txt 2>&1
log "held rc=$?"
kill $HOLDER; wait
tar czf $OUT/run12a.tgz -C $OUT/r .
