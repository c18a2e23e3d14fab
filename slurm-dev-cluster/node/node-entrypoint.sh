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

# Compose starts a service once the one it depends on has started, not once it answers: a
# daemon waits for the service it needs itself (slurmd and login retry the controller anyway).
wait_for_port() {
    say "waiting for $1:$2"
    until bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; do sleep 0.5; done
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
    wait_for_port mariadb 3306  # listens only once the accounting database exists
    exec slurmdbd -D
    ;;
slurmctld)
    start_munge
    wait_for_port slurmdbd 6819
    exec slurmctld -D -i
    ;;
slurmd)
    start_munge
    # Apptainer mounts SIFs with squashfuse as the job user: /dev/fuse is root-only by default.
    [ -c /dev/fuse ] && chmod 0666 /dev/fuse
    # A GPU node (TFSLURM_PLACEHOLDER_GPUS=N): gres.conf's File= names these placeholders.
    # slurmd only stats them and wants character devices: nodes with NVIDIA's numbers (195:i,
    # Docker's default CAP_MKNOD), which the container's device rules do not let anyone open.
    # Slurm allocates, binds and exports them (CUDA_VISIBLE_DEVICES) as it would real GPUs.
    i=0
    while [ "$i" -lt "${TFSLURM_PLACEHOLDER_GPUS:-0}" ]; do
        [ -c "/dev/tfslurm-gpu$i" ] || mknod -m 0666 "/dev/tfslurm-gpu$i" c 195 "$i"
        i=$((i + 1))
    done
    # crun's state for Slurm's OCI containers (oci.conf: --root=/run/user/UID), private to each
    # job user, as systemd makes it for a lingering user on a site's nodes.
    for user in runner other; do
        install -d -o "$user" -g "$user" -m 0700 "/run/user/$(id -u "$user")"
    done
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
