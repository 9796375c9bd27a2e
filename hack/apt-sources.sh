#!/bin/sh
# Points apt (inside an image build) at the pinned Debian snapshot, or at a plain Debian mirror when one is given:
# releases use the snapshot (the same package versions every time); a build where snapshot.debian.org cannot be
# reached (as on the development machines) passes the mirror apt already uses. The packages named are the same.
# Usage: apt-sources.sh SNAPSHOT [MIRROR]   e.g. apt-sources.sh 20241210T000000Z http://deb.debian.org/debian
set -eu
snapshot="$1"
mirror="${2:-}"
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
if [ -n "$mirror" ]; then
  mirror="${mirror%/}"
  printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s-security bookworm-security main\n' \
    "$mirror" "$mirror" "$mirror" > /etc/apt/sources.list.d/mirror.list
else
  printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/%s bookworm main\n' "$snapshot" \
    > /etc/apt/sources.list.d/snapshot.list
  printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/%s bookworm-security main\n' \
    "$snapshot" >> /etc/apt/sources.list.d/snapshot.list
fi
