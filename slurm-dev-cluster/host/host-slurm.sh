#!/usr/bin/env bash
# A real one-node Slurm on this machine itself (Debian's packages: slurmctld + slurmd as root,
# munge) with rootless Podman and a job user, for what the dev cluster's nodes cannot run:
# Podman, whose rootless containers map the user's subordinate ids, which a node that is itself
# a Docker container cannot do (newuidmap's write is refused there; tests/e2e/test_podman.py).
# The munge key is made here, on first use; nothing of it is in the repo. Idempotent: a second
# run finds the packages, the user and the daemons, and only waits for the node.
# Usage (as root): slurm-dev-cluster/host/host-slurm.sh [JOB_USER]   (default tfslurm-job)
job_user=${1:-tfslurm-job}
set -euo pipefail
say() { echo "host-slurm: $*"; }
if ! command -v slurmctld >/dev/null || ! command -v podman >/dev/null; then
    say "installing Slurm, munge and rootless Podman from Debian's archive"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmd slurmctld slurm-client munge podman uidmap slirp4netns runc >/dev/null
fi
# Podman's storage on the kernel's own overlay (rootless since Linux 5.13): Debian's Podman 4.3
# otherwise falls back to vfs, which copies every layer (7.6 GB for the 1.2 GB image, not 1.2).
if [ ! -f /etc/containers/storage.conf ]; then
    mkdir -p /etc/containers
    printf '[storage]\ndriver = "overlay"\n' >/etc/containers/storage.conf
fi
# Podman's runtime: Debian's default, crun, runs only on cgroup v2 alone, or beside v1 with no
# controller left on v2 ("cgroups in hybrid mode not supported, drop all controllers from
# cgroupv2": seen on a machine booted with v1 and hugetlb on v2); runc runs on v1 and hybrid
# hosts too, as a site on cgroup v1 would configure it.
if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ] && [ ! -f /etc/containers/containers.conf ]; then
    say "runtime runc for Podman: this host's cgroups are v1 or hybrid, where crun does not run"
    mkdir -p /etc/containers
    printf '[engine]\nruntime = "runc"\n' >/etc/containers/containers.conf
fi
# The job user, with the subordinate ids useradd gives (Podman maps the image's users to them).
id "$job_user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$job_user"
grep -q "^$job_user:" /etc/subuid || usermod --add-subuids 200000-265535 --add-subgids 200000-265535 "$job_user"
node=$(hostname -s)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
# CPUs: slurmd takes the configured count over the machine's (config_overrides), so a 2-core
# machine runs a step of several tasks per node as the dev cluster's nodes do.
old_conf=$(cat /etc/slurm/slurm.conf 2>/dev/null || true) # none on a fresh machine
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=tfslurm-host
SlurmctldHost=$node
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/cgroup
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MpiParams=ports=12000-12999
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=10
# A requeued job starts again once its old step credentials expired: 15 s, not the default
# 120 s (as the dev cluster's slurm.conf, which says why; a real cluster keeps the default).
AuthInfo=cred_expire=15
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=$node CPUs=8 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
# proctrack/cgroup, as a site's: rootless Podman re-parents its processes to init, and only the
# step's cgroup still holds them (proctrack/linuxproc loses them: Slurm's signals reach none).
cat >/etc/slurm/cgroup.conf <<CONF
CgroupPlugin=autodetect
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
CONF
# /etc/munge too: the package installed with its directory gone (seen after a failed purge)
# would leave dd nowhere to write the key.
install -d -m 0700 -o munge -g munge /etc/munge
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
if [ ! -s /etc/munge/munge.key ]; then
    (umask 077 && dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none)
    chown munge:munge /etc/munge/munge.key
fi
# This host's daemons by their pid files: the dev cluster's containers run slurmd, slurmctld
# and munged too, and they show in this host's process table. A pid file can outlive its
# daemon (a machine whose processes were ended, /run kept) and its number be another
# process's by now (pid_max is 32768 here: CI's builds wrap it): so the process must be the
# daemon the file is named for, in this host's pid namespace. (CI of 970beaf: a stale
# slurmctld.pid naming some other live process, no controller started, and each of 60 sinfo
# calls waited out its connection retries: 10 minutes, then "Unable to contact slurm
# controller".)
alive() {
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$(basename "$1" .pid)" ] &&
        [ "$(readlink "/proc/$pid/ns/pid")" = "$(readlink /proc/self/ns/pid)" ]
}
alive /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
# Daemons of an earlier call, with another slurm.conf: restarted on this one.
if [ "$old_conf" != "$(cat /etc/slurm/slurm.conf)" ]; then
    for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
        if alive "$pidfile"; then
            say "restarting $(basename "$pidfile" .pid): slurm.conf changed"
            kill "$(cat "$pidfile")"
            for _ in $(seq 30); do alive "$pidfile" || break; sleep 0.5; done
        fi
    done
fi
alive /run/slurmctld.pid || slurmctld
alive /run/slurmd.pid || slurmd
# 60 s of wall time, whatever each sinfo takes (one that cannot connect retries for seconds).
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
    timeout 10 sinfo -h -o %T 2>/dev/null | grep -qx idle && { say "node $node idle ($(srun --version))"; exit 0; }
    sleep 1
done
say "error: node $node not idle after 60 s: $(timeout 10 sinfo -h -o '%T %E' 2>&1); see /var/log/slurm/"
for log in /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log; do
    [ -s "$log" ] && { echo "last lines of $log:"; tail -n 5 "$log"; }
done
exit 1
