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

if ! pgrep -x dockerd >/dev/null 2>&1; then
    echo "ensure-docker: starting dockerd (log: /var/log/dockerd.log)"
    # setsid: the engine must outlive the shell (and make job) that started it.
    setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null &
fi

waited=0
until docker info >/dev/null 2>&1; do
    if [ "$waited" -ge "$timeout_s" ]; then
        echo "ensure-docker: dockerd did not answer within ${timeout_s}s; last log lines:" >&2
        tail -n 20 /var/log/dockerd.log >&2 || true
        exit 1
    fi
    sleep 1
    waited=$((waited + 1))
done
echo "ensure-docker: engine answers after ${waited}s ($(docker version --format '{{.Server.Version}}'))"
