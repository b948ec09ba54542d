# Sourced by the benchmark scripts: the binary, the output folder, and the stamp every table carries.
set -u
OOM_BISECT=${OOM_BISECT:-target/release/oom-bisect}
BENCH_OUT=${1:-bench-out/$(basename "$0" .sh)-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$BENCH_OUT"
[ -x "$OOM_BISECT" ] || { echo "no binary at $OOM_BISECT: run cargo build --release, or set OOM_BISECT" >&2; exit 2; }

# Date, the binary's version and commit, GPU, driver and PyTorch: what a figure in the table depends on.
stamp() {
    local gpu="none" torch="not installed"
    command -v nvidia-smi >/dev/null &&
        gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)
    torch=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "not installed")
    echo "date $(date -u +%Y-%m-%dT%H:%MZ), $("$OOM_BISECT" --version), GPU ${gpu} (name, memory, driver), PyTorch ${torch}, $(nproc) cores"
}

now() { date +%s.%N; }
since() { python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }

# run NAME TIMEOUT ARGS...: one oom-bisect command, its JSON, report and log under $BENCH_OUT;
# prints the wall seconds and the exit code.
run() {
    local name=$1 limit=$2; shift 2
    [ "$limit" = 0 ] && return 0
    local t0; t0=$(now)
    timeout "$limit" "$OOM_BISECT" "$@" --json "$BENCH_OUT/$name.json" >"$BENCH_OUT/$name.txt" 2>"$BENCH_OUT/$name.log"
    local rc=$?
    echo "$name rc=$rc $(since "$t0") s" | tee -a "$BENCH_OUT/runs.log"
}
