#!/bin/sh
# Make sure a Docker engine answers; install and start one from Debian packages if not.
#
# Idempotent: exits at once when `docker info` already works. Otherwise (root only)
# installs docker.io (the 20.10 engine on bookworm) with apt-get, starts dockerd in the
# background (log: /var/log/dockerd.log) and waits until `docker info` answers.
# Used by .ci/run, containers/containers.mk (make docker-engine) and the README commands.
set -eu

timeout_s="${ENSURE_DOCKER_TIMEOUT:-120}"

if docker info >/dev/null 2>&1; then
    echo "ensure-docker: engine already answers"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-docker: no Docker engine answers and I am not root; start one or run me as root" >&2
    exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
    echo "ensure-docker: installing docker.io from the Debian archive"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi

# dockerd trusts the pid file its containerd left: a live process with that pid (/run kept
# across a machine's snapshot, the pid reused) makes it wait on a socket nobody serves, then
# give up ("timeout waiting for containerd to start"). Only a pid file naming no containerd goes.
containerd_pidfile=/var/run/docker/containerd/containerd.pid
stale_containerd_pid() {
    [ -f "$containerd_pidfile" ] || return 1
    pid=$(tr -d '[:space:]' <"$containerd_pidfile")
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != containerd ]
}

started=no
if ! pgrep -x dockerd >/dev/null 2>&1; then
    if stale_containerd_pid; then
        echo "ensure-docker: removing $containerd_pidfile: its pid $pid is not a containerd" \
            "(left by an engine that did not stop), so dockerd starts its own"
        rm -f "$containerd_pidfile"
    fi
    # The same trap for dockerd's own pid file ("pid file found, ensure docker is not running").
    if [ -f /var/run/docker.pid ]; then
        echo "ensure-docker: removing /var/run/docker.pid: no dockerd runs (left by one that did not stop)"
        rm -f /var/run/docker.pid
    fi
    echo "ensure-docker: starting dockerd (log: /var/log/dockerd.log)"
    # setsid: the engine must outlive the shell (and make job) that started it.
    setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null &
    started=yes
fi

waited=0
until docker info >/dev/null 2>&1; do
    if [ "$started" = yes ] && [ "$waited" -ge 2 ] && ! pgrep -x dockerd >/dev/null 2>&1; then
        echo "ensure-docker: dockerd exited after ${waited}s; last log lines:" >&2
        grep -v 'module=grpc' /var/log/dockerd.log | tail -n 20 >&2 || true
        exit 1
    fi
    if [ "$waited" -ge "$timeout_s" ]; then
        echo "ensure-docker: dockerd did not answer within ${timeout_s}s; last log lines:" >&2
        grep -v 'module=grpc' /var/log/dockerd.log | tail -n 20 >&2 || true
        exit 1
    fi
    sleep 1
    waited=$((waited + 1))
done
echo "ensure-docker: engine answers after ${waited}s ($(docker version --format '{{.Server.Version}}'))"
