#!/usr/bin/env bash
# GPU run 27 (device tool, one H200): issue 25's memory-efficient attention (item 3) side by side:
# the sweep's attention candidates (tools/pytorch/sweep.py --only att8), math and efficient, by the
# built-in model and the PyTorch reference under in-process 24 GiB ceilings.
# Results: $OUT/run27.tar.gz.
set -uf
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
[ -f .gpu/kc.tar.gz ] && mkdir -p /tmp/kc && tar -C /tmp/kc -xzf .gpu/kc.tar.gz
R=/tmp/run27 && mkdir -p $R
s0=$SECONDS
timeout ${DEADLINE:-300} python3 tools/pytorch/sweep.py --bin /tmp/bin/oom-bisect --out $R \
  --only att8 --jobs ${JOBS:-4} > $R/table.md 2> $R/sweep.err
echo "sweep rc=$? secs=$((SECONDS - s0))" | tee $R/log.txt
tail -2 $R/sweep.err
tar -C /tmp -czf $OUT/run27.tar.gz run27; cp $R/log.txt $OUT/
