#!/usr/bin/env bash
# The forum's diagnosis (R101 OS8 b4 1024x1024 under an RTX 3090's memory) with default flags (the
# search on stream-only trials, its verdicts certified on the GPU): from an empty kernel cache, again
# with the cache warm, and one GPU trial at a time (as on the user's own card); beside it, every
# trial on the GPU (`--evidence device`), warm.
# Usage, on a machine with a GPU: bash tools/bench/forum.sh [OUTDIR]
source "$(dirname "$0")/common.sh"
F=configs/forum-r101-os8-1024.toml
export OOM_BISECT_KERNEL_CACHE=$BENCH_OUT/kernel-cache
stamp | tee "$BENCH_OUT/stamp.txt"
run forum-cold "${COLD_LIMIT:-900}" bench --config "$F" --backend cuda --fresh --journal "$BENCH_OUT/j"
run forum-warm "${WARM_LIMIT:-900}" bench --config "$F" --backend cuda --fresh --journal "$BENCH_OUT/j"
run forum-jobs1-warm "${JOBS1_LIMIT:-900}" bench --config "$F" --backend cuda --fresh --jobs 1 --journal "$BENCH_OUT/j"
run forum-device-warm "${DEVICE_LIMIT:-900}" bench --config "$F" --backend cuda --fresh --evidence device --journal "$BENCH_OUT/j"
python3 "$(dirname "$0")/table.py" "$BENCH_OUT" forum-cold forum-warm forum-jobs1-warm forum-device-warm | tee "$BENCH_OUT/table.md"
