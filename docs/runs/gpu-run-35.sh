#!/usr/bin/env bash
# GPU run 35 (device tool, one H200): the two ceilings of a `--exec` trial side by side on the
# sweep's 44 candidates near 24 GiB (tools/pytorch/ceilings.py): the PyTorch reference under the
# ballast (one run at a time) and holding its ceiling itself (`--ceiling-by command`, five at once).
# Results: $OUT/run35.tar.gz; the table in $R/table.md.
RUN=run35
. docs/runs/prelude.sh
t0=$SECONDS
python3 tools/pytorch/ceilings.py --bin $B --out $R/c --deadline ${DEADLINE:-500} > $R/table.md 2> $R/ceilings.err
log "ceilings rc=$? $((SECONDS - t0))s"
finish
