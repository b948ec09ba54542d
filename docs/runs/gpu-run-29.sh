#!/usr/bin/env bash
# GPU run 29 (device tool, one H200): issue 25's sweep (tools/pytorch/sweep.py, 44 candidates) with
# the vendored pools splitting segments as PyTorch's caching allocator does, each candidate by the
# built-in model and the PyTorch reference under in-process 24 GiB ceilings, five runs at once, in
# one call. Results: $OUT/run29.tar.gz (the table: sweep.py --out DIR --table).
# Ran with the build of commit 06b35f2 (the splitting pools of 75aff1f, since reverted; the first gallop).
RUN=run29
. docs/runs/prelude.sh
# Preflight: the reference's in-process ceiling works, or nothing else runs.
timeout 60 python3 tools/pytorch/deeplabv3plus.py $R50 --set data.batch=2 --set data.size=[128,128] \
  --memory-limit 24GiB --cap > $R/preflight.jsonl 2> $R/preflight.err \
  || { log "preflight failed"; tail -5 $R/preflight.err; finish; exit 1; }
s0=$SECONDS
timeout ${DEADLINE:-480} python3 tools/pytorch/sweep.py --bin $B --out $R --jobs ${JOBS:-5} \
  > $R/table.md 2> $R/sweep.err
log "sweep rc=$? secs=$((SECONDS - s0))"
tail -3 $R/sweep.err
finish
