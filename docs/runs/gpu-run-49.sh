#!/usr/bin/env bash
# GPU run 49 (device tool, one fresh H200), in one call: run 48 found the machine's environment sets
# PYTHONDONTWRITEBYTECODE=1 and its venv ships no .pyc, so each PyTorch process compiles torch's
# modules from source. Here bytecode is allowed (PYTHONDONTWRITEBYTECODE unset,
# PYTHONPYCACHEPREFIX=/tmp/pyc): docs/runs/first-trial.py twice (the first fills the cache, the
# second reads it), then the capacity (R50 OS16 512², 24 GiB, served, five at once) through --exec
# with the filled cache, alternating with the machine's own environment. OOM_BISECT_WARM_UP=off.
# carry [".gpu"] with this build as .gpu/oom-bisect.gz. Results: $OUT/run49.tar.gz.
RUN=run49
. docs/runs/prelude.sh
export OOM_BISECT_WARM_UP=off
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
bytecode() { env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=/tmp/pyc "$@"; }
for k in 1 2; do
  t0=$SECONDS; bytecode timeout 100 python3 docs/runs/first-trial.py $R/pyc-$k > $R/first-pyc-$k.txt 2>&1
  log "first-trial pyc-$k rc=$? $((SECONDS - t0))s; /tmp/pyc $(du -sh /tmp/pyc | cut -f1)"
done
finish
for k in 1 2; do
  bench_with exec-plain-$k 60 $B --exec "$TORCH" --ceiling-by command --serve $CAPACITY
  ( unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pyc
    bench_with exec-pyc-$k 60 $B --exec "$TORCH" --ceiling-by command --serve $CAPACITY )
done
finish
