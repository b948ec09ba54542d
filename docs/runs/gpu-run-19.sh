#!/usr/bin/env bash
# GPU run 19 (device tool, nvidia-h200): the `--exec` holder of issue 26 (its own pipes, a cgroup
# for the command, a subreaper sweep, its own deadline, classification by the failure message) with
# the PyTorch reference on the H200, the `--gpu h200` fix of issue 27, and one built-in trial (the
# switches now come in the request). Logs into $OUT/log.txt, outputs in $OUT/run19.tar.gz.
set -u
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
R=/tmp/run19 && mkdir -p $R
log() { echo "$*" | tee -a $OUT/log.txt; }
EXEC='python3 tools/pytorch/deeplabv3plus.py {config}'
R50=configs/deeplabv3plus-r50-os8.toml
FORUM=configs/forum-r101-os8-1024.toml
log "cgroup: $(cat /proc/self/cgroup | tr '\n' ' ')"
log "cgroup v2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>&1)"
t() {  # t NAME ARGS…: one trial, its exit code and its last lines
  local name=$1; shift
  timeout 300 $B trial "$@" --json $R/$name.json > $R/$name.txt 2>&1
  local rc=$?
  log "$name rc=$rc: $(grep -E 'OUT OF MEMORY|ERROR|TIMEOUT|peak:' $R/$name.txt | head -2 | tr '\n' ' ')"
}
# PyTorch through --exec: a fit (R50 OS8 512² b4, about 5 GiB) and an OOM (the forum, 24 GiB).
t torch-fit --config $R50 --backend cuda --memory-limit 24GiB --exec "$EXEC"
t torch-oom --config $FORUM --backend cuda --memory-limit 24GiB --exec "$EXEC"
# A command that leaves a setsid child holding its output, past a 5 s limit; then what is left.
t setsid --config $R50 --backend cuda --memory-limit 24GiB --trial-timeout 5 \
  --exec "setsid sh -c 'sleep 7019' & sleep 7020"
sleep 1
log "left behind: $(pgrep -af 'sleep 70(19|20)' | tr '\n' ' ')"
# A log line mentioning OOM, then another error: an error, not an OOM.
t oom-log --config $R50 --backend cuda --memory-limit 24GiB \
  --exec "echo 'health check: no CUDA out of memory errors so far'; echo \"KeyError: 'labels'\" >&2; exit 1"
# --gpu h200 on an H200: the whole device, not refused.
t gpu-h200 --config $R50 --backend cuda --gpu h200 --fake-trials
$B trial --config $R50 --backend cuda --gpu h200 --fake-trials 2>&1 | grep -i "ceiling\|note" | head -3 | tee -a $OUT/log.txt
# One built-in trial (cold kernels), fusion as the default.
t burn-r50 --config $R50 --backend cuda --memory-limit 24GiB
ls /sys/fs/cgroup/memory 2>/dev/null | grep -c oom-bisect-trial | xargs -I{} echo "cgroups left: {}" | tee -a $OUT/log.txt
tar -C /tmp -czf $OUT/run19.tar.gz run19
