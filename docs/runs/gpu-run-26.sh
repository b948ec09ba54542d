#!/usr/bin/env bash
# GPU run 26 (device tool, one H200): issue 25's side-by-side sweep (item 5), 40 candidates, each by
# the built-in model and the PyTorch reference under a 24 GiB ceiling held in the process, five runs
# at once (tools/pytorch/sweep.py). Results: $OUT/run26.tar.gz (the table: sweep.py --table).
set -uf
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
[ -f .gpu/kc.tar.gz ] && mkdir -p /tmp/kc && tar -C /tmp/kc -xzf .gpu/kc.tar.gz
R=/tmp/run26 && mkdir -p $R
# Preflight: the reference's in-process ceiling works, or nothing else runs.
timeout 60 python3 tools/pytorch/deeplabv3plus.py configs/deeplabv3plus-r50-os8.toml \
  --set data.batch=2 --set data.size=[128,128] --memory-limit 24GiB --cap > $R/preflight.jsonl \
  2> $R/preflight.err || { echo "preflight failed"; tail -5 $R/preflight.err; tar -C /tmp -czf $OUT/run26.tar.gz run26; exit 1; }
head -1 $R/preflight.jsonl
s0=$SECONDS
timeout ${DEADLINE:-530} python3 tools/pytorch/sweep.py --bin /tmp/bin/oom-bisect --out $R \
  --jobs ${JOBS:-5} > $R/table.md 2> $R/sweep.err
echo "sweep rc=$? secs=$((SECONDS - s0))" | tee $R/log.txt
tar -C /tmp -czf $OUT/run26.tar.gz run26; cp $R/log.txt $OUT/
