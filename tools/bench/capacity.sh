#!/usr/bin/env bash
# The largest batch of R50 OS16 512x512 under 24 GiB: built-in with default flags (stream-only trials,
# certified on the GPU), cold and warm; every trial on the GPU (`--evidence device`); through --exec
# with the PyTorch reference; and the peers (accelerate, Lightning's power and binsearch) on the same
# model, in one call. PEERS=accelerate runs that peer alone; EXEC=0 leaves out the --exec run.
# Usage, on a machine with a GPU and PyTorch: bash tools/bench/capacity.sh [OUTDIR]
source "$(dirname "$0")/common.sh"
C=(--config configs/deeplabv3plus-r50-os8.toml --set model.output_stride=16 --set data.batch=4
   --memory-limit 24GiB --backend cuda --axes batch --fresh --journal "$BENCH_OUT/j")
export OOM_BISECT_KERNEL_CACHE=$BENCH_OUT/kernel-cache
stamp | tee "$BENCH_OUT/stamp.txt"
run capacity-builtin-cold 600 bisect "${C[@]}"
run capacity-builtin 600 bisect "${C[@]}"
run capacity-device 600 bisect "${C[@]}" --evidence device
[ "${EXEC:-1}" = 1 ] && run capacity-exec 600 bisect "${C[@]}" --exec 'python3 tools/pytorch/deeplabv3plus.py {config}'
for peer in ${PEERS:-accelerate power binsearch}; do
    t0=$(now)
    timeout 300 python3 "$(dirname "$0")/peers.py" $peer >"$BENCH_OUT/peer-$peer.txt" 2>&1
    echo "$(tail -n 1 "$BENCH_OUT/peer-$peer.txt"); $(since "$t0") s with the interpreter" |
        tee -a "$BENCH_OUT/peers.md"
done
runs=(capacity-builtin-cold capacity-builtin capacity-device)
[ "${EXEC:-1}" = 1 ] && runs+=(capacity-exec)
python3 "$(dirname "$0")/table.py" "$BENCH_OUT" "${runs[@]}" | tee "$BENCH_OUT/table.md"
cat "$BENCH_OUT/peers.md" >>"$BENCH_OUT/table.md"
