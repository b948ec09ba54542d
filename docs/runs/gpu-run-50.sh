#!/usr/bin/env bash
# GPU run 50 (device tool, one fresh H200), in one call: the build that keeps an --exec command's
# Python bytecode in the cache folder (/tmp/kc/python-bytecode here), against the same build with
# OOM_BISECT_KERNEL_CACHE empty (the command's environment left alone: the machine's
# PYTHONDONTWRITEBYTECODE=1, torch compiled from source in every process), alternating: the
# capacity (R50 OS16 512², 24 GiB, served, five at once) twice each, the first with an empty
# bytecode folder; the forum served once each; then the built-in capacity (no --exec) twice, the
# first filling the kernel cache. carry [".gpu"] with this build as .gpu/oom-bisect.gz.
# Results: $OUT/run50.tar.gz.
RUN=run50
. docs/runs/prelude.sh
TORCH='python3 tools/pytorch/deeplabv3plus.py {config}'
CAPACITY="--config $R50 --set model.output_stride=16 --memory-limit 24GiB --axes batch"
off() { ( export OOM_BISECT_KERNEL_CACHE=; bench_with "$@" ); }
for k in 1 2; do
  bench_with exec-kept-$k 60 $B --exec "$TORCH" --ceiling-by command --serve $CAPACITY
  log "bytecode folder: $(du -sh /tmp/kc/python-bytecode 2>&1 | cut -f1)"
  off exec-compiled-$k 60 $B --exec "$TORCH" --ceiling-by command --serve $CAPACITY
done
finish
bench_with forum-kept 120 $B --exec "$TORCH" --ceiling-by command --serve --config $FORUM
off forum-compiled 120 $B --exec "$TORCH" --ceiling-by command --serve --config $FORUM
finish
for k in 1 2; do bench_with builtin-$k 90 $B $CAPACITY; done
finish
