#!/bin/sh
# Start one role of the dev cluster: keygen | mariadb-init | slurmdbd | slurmctld | slurmd | login.
# Secrets (munge key, database password) live only in the `secrets` volume, made by keygen.
set -eu
role=${1:?usage: node-entrypoint keygen|slurmdbd|slurmctld|slurmd|login}
say() { echo "node-entrypoint[$role]: $*"; }

start_munge() {
    # munged refuses a key that others can read: copy it in as munge:munge 0400.
    install -o munge -g munge -m 0400 /secrets/munge.key /etc/munge/munge.key
    install -d -o munge -g munge -m 0755 /run/munge
    runuser -u munge -- munged
}

case "$role" in
keygen)
    umask 077
    [ -s /secrets/munge.key ] || dd if=/dev/urandom of=/secrets/munge.key bs=1024 count=1 status=none
    chown munge:munge /secrets/munge.key
    chmod 0400 /secrets/munge.key
    [ -s /secrets/db.pass ] || head -c 18 /dev/urandom | base64 | tr -d '/+=' > /secrets/db.pass
    chmod 0400 /secrets/db.pass
    # The shared file system: the job user owns it, like a cluster's project space.
    chown runner:runner /data
    chmod 0755 /data
    say "munge key and database password ready; /data owned by runner"
    ;;
slurmdbd)
    start_munge
    umask 077
    sed "s|@DB_PASS@|$(cat /secrets/db.pass)|" /etc/slurm/slurmdbd.conf.in > /etc/slurm/slurmdbd.conf
    chown slurm:slurm /etc/slurm/slurmdbd.conf
    exec slurmdbd -D
    ;;
slurmctld)
    start_munge
    exec slurmctld -D -i
    ;;
slurmd)
    start_munge
    # Apptainer mounts SIFs with squashfuse as the job user: /dev/fuse is root-only by default.
    [ -c /dev/fuse ] && chmod 0666 /dev/fuse
    exec slurmd -D
    ;;
login)
    start_munge
    [ -c /dev/fuse ] && chmod 0666 /dev/fuse
    say "ready"
    exec sleep infinity
    ;;
*)
    say "unknown role"; exit 2
    ;;
esac
