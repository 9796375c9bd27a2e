#!/bin/sh
# Points apt (inside an image build) at the pinned Debian snapshot, or at a plain Debian mirror when one is given:
# releases use the snapshot (the same package versions every time); a build where snapshot.debian.org cannot be
# reached (as on the development machines) passes the mirror apt already uses. The packages named are the same.
# The release is the base image's own (VERSION_CODENAME of its /etc/os-release: trixie for the images), so the
# Dockerfiles' pinned base decides it and the host's Debian release (bookworm on the development machines) does not.
# Usage: apt-sources.sh SNAPSHOT [MIRROR]   e.g. apt-sources.sh 20261122T000000Z http://deb.debian.org/debian
set -eu
snapshot="$1"
mirror="${2:-}"
release="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
[ -n "$release" ] || { echo "apt-sources.sh: no VERSION_CODENAME in /etc/os-release" >&2; exit 1; }
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
if [ -n "$mirror" ]; then
  mirror="${mirror%/}"
  printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s-security %s-security main\n' \
    "$mirror" "$release" "$mirror" "$release" "$mirror" "$release" > /etc/apt/sources.list.d/mirror.list
else
  printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/%s %s main\n' "$snapshot" "$release" \
    > /etc/apt/sources.list.d/snapshot.list
  printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/%s %s-security main\n' \
    "$snapshot" "$release" >> /etc/apt/sources.list.d/snapshot.list
fi
