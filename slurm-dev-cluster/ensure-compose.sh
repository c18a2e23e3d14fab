#!/bin/sh
# Make sure `docker compose` (Compose v2) works; install it from Debian trixie if not.
#
# Debian bookworm only packages Compose v1. trixie's docker-compose 2.x needs only libc >= 2.34,
# so it runs on bookworm: fetch that one .deb with apt through a temporary trixie source list
# (its own lists directory, so the system's apt state is untouched) and unpack its binary as
# the docker CLI plugin. The archive address is the one the host's own apt uses.
set -eu

if docker compose version >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-compose: 'docker compose' is missing and I am not root; install Compose v2" >&2
    exit 1
fi
archive=$(python3 "$(dirname "$0")/../containers/buildtool.py" archive-uri)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/debs"
printf 'deb %s trixie main\n' "$archive" > "$work/trixie.list"
apt_opts="-o Dir::Etc::SourceList=$work/trixie.list -o Dir::Etc::SourceParts=/dev/null \
 -o Dir::State::Lists=$work/lists -o Acquire::Check-Valid-Until=false -o APT::Sandbox::User=root -qq"
echo "ensure-compose: fetching docker-compose from Debian trixie ($archive)"
# shellcheck disable=SC2086
apt-get $apt_opts update
# shellcheck disable=SC2086
(cd "$work/debs" && apt-get $apt_opts download docker-compose)
dpkg-deb -x "$work"/debs/docker-compose_*.deb "$work/root"
install -D -m 0755 "$work/root/usr/libexec/docker/cli-plugins/docker-compose" \
    /usr/local/lib/docker/cli-plugins/docker-compose
echo "ensure-compose: $(docker compose version)"
