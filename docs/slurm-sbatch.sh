#!/usr/bin/env bash
# oom-bisect on a Slurm cluster: one allocation, the search on its first node, every trial a job
# step of its own on any node of the allocation (one GPU each). Submit with `sbatch docs/slurm-sbatch.sh`.
#
# The binary, the config and the journal directory must be on a file system every node sees; the
# kernel cache (OOM_BISECT_KERNEL_CACHE) is best on node-local disk, because cubecl appends to it
# without a lock that holds over NFS.
#SBATCH --job-name=oom-bisect
#SBATCH --nodes=2
#SBATCH --ntasks=8
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=4
#SBATCH --time=00:30:00
set -euo pipefail
export OOM_BISECT_KERNEL_CACHE=/tmp/$USER/oom-bisect-kc
# --jobs defaults to $SLURM_NTASKS (8 trials at once); --exact keeps each step to its own task's
# resources, so steps run side by side instead of queueing behind each other.
srun --ntasks=1 --nodes=1 --overlap mkdir -p "$OOM_BISECT_KERNEL_CACHE" || true
./target/release/oom-bisect bisect --config configs/forum-r101-os8-1024.toml --backend cuda \
    --launcher 'srun -N1 -n1 --gpus-per-task=1 --exact' --journal oom-bisect-out
