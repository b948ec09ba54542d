#!/usr/bin/env bash
# Rounds of dependent trials, two binaries side by side in one call, on any machine (no GPU): the
# forum and the capacity scenario under the estimate with fake trial times (every trial takes
# $SECS seconds, as a warm GPU trial would), five workers as under the cap on an H200, and the CPU
# quickstart with real trials. Alternates the binaries so that the machine's drift hits both.
#   bash docs/bench-rounds.sh OLD_BINARY NEW_BINARY [SECS]
set -euo pipefail
old=$1 new=$2 secs=${3:-2}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
run() { # label binary args...
  local label=$1 bin=$2; shift 2
  local d; d=$(mktemp -d -p "$work")
  "$bin" bench "$@" --fresh --journal "$d/j" 2>/dev/null > "$d/out" || true
  printf '%-28s %s\n' "$label" "$(grep -E '^diagnosis:' "$d/out")"
  grep -E 'workers:|critical path|busy:' "$d/out" | sed 's/^/    /'
  # The findings, without times and paths: the same in both binaries or not.
  sed -n '/^Verdict/,/^bench:/p' "$d/out" | grep -vE 'Trials:|saved to|Reproduce|^bench:' | md5sum |
    sed 's/^/    report /'
}
for which in old new; do
  bin=$old; [ $which = new ] && bin=$new
  OOM_BISECT_FAKE_TRIAL_SECONDS=$secs run "forum ${secs}s×5 ($which)" "$bin" \
    --config configs/forum-r101-os8-1024.toml --estimate --jobs 5 --memory-limit 24GiB
  OOM_BISECT_FAKE_TRIAL_SECONDS=$secs run "capacity ${secs}s×5 ($which)" "$bin" \
    --config configs/deeplabv3plus-r50-os8.toml --set model.output_stride=16 --memory-limit 24GiB \
    --axes batch --estimate --jobs 5
  run "quickstart cpu ($which)" "$bin" --config configs/quickstart.toml --backend cpu
done
rm -rf "$work"
