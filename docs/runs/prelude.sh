# Sourced by the GPU run scripts from run 29 on (bash docs/runs/gpu-run-NN.sh, with RUN=runNN set
# by the script): the binary from .gpu/oom-bisect.gz, the kernel cache (/tmp/kc, kept on the machine
# while it stays warm between calls; from .gpu/kc.tar.gz on a fresh one), the results folder $R,
# log(), bench_with() and finish() (the folder back through $OUT as $RUN.tar.gz).
set -uf
mkdir -p /tmp/bin && gunzip -c .gpu/oom-bisect.gz > /tmp/bin/oom-bisect && chmod +x /tmp/bin/oom-bisect
B=/tmp/bin/oom-bisect
if [ -f .gpu/oom-bisect-old.gz ]; then
  gunzip -c .gpu/oom-bisect-old.gz > /tmp/bin/oom-bisect-old && chmod +x /tmp/bin/oom-bisect-old
fi
export OOM_BISECT_KERNEL_CACHE=/tmp/kc
if [ ! -d /tmp/kc ]; then
  mkdir -p /tmp/kc
  [ -f .gpu/kc.tar.gz ] && tar -C /tmp/kc -xzf .gpu/kc.tar.gz
fi
R=/tmp/$RUN && mkdir -p $R
log() { echo "$*" | tee -a $R/log.txt; }
finish() { tar -C /tmp -czf $OUT/$RUN.tar.gz $RUN; cp $R/log.txt $OUT/; }
FORUM=configs/forum-r101-os8-1024.toml
R50=configs/deeplabv3plus-r50-os8.toml
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > $R/gpus.csv
log "kernel cache: $(du -sh /tmp/kc | cut -f1) at start"
bench_with() { # NAME LIMIT BINARY ARGS…: one `bench` on CUDA, fresh, its report and JSON in $R
  local name=$1 limit=$2 bin=$3 t0=$SECONDS; shift 3
  timeout $limit $bin bench --backend cuda --fresh --journal /tmp/j-$name \
    --json $R/$name.json "$@" > $R/$name.txt 2> $R/$name.progress.txt
  log "$name rc=$? $((SECONDS - t0))s"
}
