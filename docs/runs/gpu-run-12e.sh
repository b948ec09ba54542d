#!/usr/bin/env bash
# GPU run 12e (device tool, one H200): the forum's f16 fix after the two fixes of run 12d (BatchNorm
# from means, NaN losses carried as null): one trial, expected to fit and to report its steps.
set -u
mkdir -p /tmp/bin && for b in .gpu/*.gz; do gunzip -c $b > /tmp/bin/$(basename $b .gz); done; chmod +x /tmp/bin/*
mkdir -p $OUT/r
timeout 200 /tmp/bin/oom-bisect trial --config configs/forum-r101-os8-1024.toml --backend cuda \
  --set train.precision='"f16"' --json $OUT/r/forum-f16.json > $OUT/r/forum-f16.txt 2>&1
echo "forum-f16 rc=$?"
