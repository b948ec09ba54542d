#!/usr/bin/env bash
# GPU run 35 (device tool, one H200): after run 34 (the reference's cap let batch 33 fit where the
# ballast does not), the reference's cap multiplies by cudaMemGetInfo's total and reads NVML between
# two equal allocator readings. A sanity trial held by the command; the capacity search through
# `--exec` held by the command with guesses on (five trials at once); then the two ceilings side by
# side on the sweep's 44 candidates (tools/pytorch/ceilings.py; a second call, PART=b, finishes the
# ballast half from .gpu/run35-c carried back).
# Results: $OUT/run35$PART.tar.gz; the table in $R/table.md.
# What ran: part a (the ballast half stopped at its deadline, 35 of 44 pairs); part b failed (its
# `cp .gpu/run35-c/*` met prelude.sh's `set -f`, fixed since) and ran to the call's limit with nothing
# back; the last nine ballast runs then ran on the same warm machine into part a's folder:
#   python3 tools/pytorch/ceilings.py --bin /tmp/bin/oom-bisect --out /tmp/run35a/c --deadline 120
# docs/runs/h200/run35 holds part a's files with that table (table.md; table-first-call.md: 35 pairs).
# Ran with the build of commit 11e51d4.
PART=${PART:-a}
RUN=run35$PART
. docs/runs/prelude.sh
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB"
if [ $PART = a ]; then
  python3 -c "import torch; print('props', torch.cuda.get_device_properties(0).total_memory, 'mem_get_info', torch.cuda.mem_get_info())" > $R/totals.txt 2>&1
  t0=$SECONDS
  timeout 90 $B trial --backend cuda $CAPACITY --set data.batch=33 --ceiling-by command \
    --exec "$TORCH" --json $R/sanity.json > $R/sanity.txt 2>&1
  log "sanity b33 rc=$? $((SECONDS - t0))s"
  t0=$SECONDS
  OOM_BISECT_GUESSES=on timeout 150 $B bench --backend cuda --fresh --journal /tmp/j-cap \
    --json $R/exec-command.json --exec "$TORCH" --ceiling-by command $CAPACITY --axes batch \
    > $R/exec-command.txt 2> $R/exec-command.progress.txt
  log "exec-command (guesses on) rc=$? $((SECONDS - t0))s"
else
  mkdir -p $R/c && cp -r .gpu/run35-c/. $R/c/   # no glob: prelude.sh sets -f
fi
t0=$SECONDS
python3 tools/pytorch/ceilings.py --bin $B --out $R/c --deadline $((570 - SECONDS)) > $R/table.md 2> $R/ceilings.err
log "ceilings rc=$? $((SECONDS - t0))s"
finish
