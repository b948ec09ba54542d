#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the integration test of `--launcher 'srun …'`
# (tests/parallel.rs). Installs Debian's slurm-wlm and munge when missing, starts munged, slurmctld
# and slurmd with a slurm.conf naming this host, and waits until `srun` runs a step. Needs root
# (CI runs as root). Idempotent: a second call finds the cluster up and returns at once.
#
#   bash tests/slurm/start.sh && salloc -N1 -n2 srun -n1 --exact hostname
set -euo pipefail

if srun -N1 -n1 --immediate=5 true >/dev/null 2>&1; then
    echo "slurm: already up"
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q slurm-wlm munge >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc)

# munge: one key, owned by the munge user, as munged insists.
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
chmod 0700 /etc/munge /var/lib/munge /var/log/munge
chmod 0755 /run/munge
chmod 0400 /etc/munge/munge.key
pgrep -x munged >/dev/null || su -s /bin/sh munge -c munged

# slurm: controller and node on this host, no accounting database (steps are told by their ids).
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=oombisect
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
# No cgroup.conf: slurmd picks the cgroup version the host has (22.05 knows no "disabled").

pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd

for _ in $(seq 60); do
    if srun -N1 -n1 --immediate=5 true >/dev/null 2>&1; then
        echo "slurm: up ($host, $cpus CPUs)"
        exit 0
    fi
    scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
    sleep 1
done
echo "slurm: did not come up; logs follow" >&2
tail -n 30 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
