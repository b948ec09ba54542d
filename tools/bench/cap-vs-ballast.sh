#!/usr/bin/env bash
# The two ways of holding a ceiling on the device, on the configurations nearest the forum's and the
# capacity's boundaries: the ballast (the rest of the card filled) and the cap (PyTorch's allocator in
# the trial's process refusing past it). Each row: the device's verdict, and the need the replay of the
# same trial's stream gives; under the cap both come from one allocator and must agree.
# Usage, on a machine with a GPU: bash tools/bench/cap-vs-ballast.sh [OUTDIR]
source "$(dirname "$0")/common.sh"
R50=(--config configs/deeplabv3plus-r50-os8.toml --set model.output_stride=16 --memory-limit 24GiB)
F=(--config configs/forum-r101-os8-1024.toml)
stamp | tee "$BENCH_OUT/stamp.txt"
for by in cap ballast; do
    for b in 32 33 34; do run "r50-os16-b$b-$by" 300 trial --backend cuda "${R50[@]}" --set data.batch=$b --ceiling-by $by; done
    for s in 856 864; do run "forum-$s-$by" 300 trial --backend cuda "${F[@]}" --set "data.size=[$s,$s]" --ceiling-by $by; done
    for b in 2 3; do run "forum-b$b-$by" 300 trial --backend cuda "${F[@]}" --set "data.batch=$b" --ceiling-by $by; done
done
python3 "$(dirname "$0")/table.py" "$BENCH_OUT" | tee "$BENCH_OUT/table.md"
