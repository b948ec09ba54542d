#!/usr/bin/env bash
# GPU run 48 (device tool, one fresh H200), in one call: does a PyTorch's first trial pay for
# compiling torch's Python modules anew in each process (run 47's profile: builtins.compile 5.7 s
# of a 12.4 s process; the machine's venv keeps no bytecode)? The venv's bytecode folders and
# whether they can be written; docs/runs/first-trial.py without and then twice with
# PYTHONPYCACHEPREFIX=/tmp/pyc (the first fills that cache, the second reads it); the capacity
# (R50 OS16 512², 24 GiB, served, five at once) through --exec alternating without and with the
# filled cache; the forum served with it. OOM_BISECT_WARM_UP=off throughout (run 47: the warm-up
# never fired there, every holder had a request at once). carry [".gpu"] with this build as
# .gpu/oom-bisect.gz. Results: $OUT/run48.tar.gz.
RUN=run48
. docs/runs/prelude.sh
export OOM_BISECT_WARM_UP=off
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
SITE=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
{ echo "site-packages: $SITE"; ls -ld "$SITE" "$SITE/torch" "$SITE/torch/__pycache__" 2>&1
  echo "pyc files under torch: $(find "$SITE/torch" -name '*.pyc' | wc -l)"
  echo "py files under torch: $(find "$SITE/torch" -name '*.py' | wc -l)"
  touch "$SITE/torch/.oom-bisect-probe" 2>&1 && echo writable && rm -f "$SITE/torch/.oom-bisect-probe"
  env | grep -E '^PYTHON' ; python3 -c 'import sys; print("dont_write_bytecode", sys.dont_write_bytecode)'
} > $R/bytecode.txt 2>&1
cat $R/bytecode.txt
t0=$SECONDS; timeout 100 python3 docs/runs/first-trial.py $R/plain > $R/first-plain.txt 2>&1
log "first-trial plain rc=$? $((SECONDS - t0))s"
for k in 1 2; do
  t0=$SECONDS; PYTHONPYCACHEPREFIX=/tmp/pyc timeout 100 python3 docs/runs/first-trial.py $R/pyc-$k \
    > $R/first-pyc-$k.txt 2>&1
  log "first-trial pyc-$k rc=$? $((SECONDS - t0))s; /tmp/pyc $(du -sh /tmp/pyc | cut -f1)"
done
finish
for k in 1 2; do
  bench_with exec-plain-$k 60 $B --exec "$TORCH" --ceiling-by command --serve $CAPACITY
  PYTHONPYCACHEPREFIX=/tmp/pyc bench_with exec-pyc-$k 60 $B --exec "$TORCH" --ceiling-by command \
    --serve $CAPACITY
done
finish
PYTHONPYCACHEPREFIX=/tmp/pyc bench_with forum-pyc 120 $B --exec "$TORCH" --ceiling-by command \
  --serve --config $FORUM
finish
