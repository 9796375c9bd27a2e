#!/usr/bin/env bash
# Builds the tpcmesh images (agent, operator, dashboard) from Dockerfiles/ with whichever builder exists: docker
# when a Docker engine answers, else buildah (Debian's, vfs storage: no engine, no daemon). With buildah, each image
# is also exported as an OCI archive into a cache outside the repository (for `ctr images import` on the nodes of
# `tpcmesh-local cluster`), keyed by a hash of everything the build reads, so a rebuild with nothing changed is a
# hash check.
#
# Where the pinned base image (docker.io) or snapshot.debian.org cannot be reached, as on the development machines:
#   TPCMESH_DEBIAN_MIRROR=http://deb.debian.org/debian   apt inside the build uses that mirror (default with buildah:
#                                                         the mirror this machine's apt uses)
#   the base is made here with `debootstrap --variant=minbase trixie` from that mirror (localhost/tpcmesh-debian),
#   checked against this machine's debian-archive-keyring (which knows trixie's keys also on a bookworm host).
# The images are Debian 13 (trixie) whatever this machine runs (bookworm here: its own packages stay bookworm's):
# the release is DEBIAN_RELEASE below, the one the Dockerfiles' pinned base (debian:13.x-slim) is (a unit test
# keeps them in step), and names the archives' directory and is part of their cache key, so images of another
# release left in the cache are never taken for these.
# The Dockerfiles stay the one definition of what each image contains.
#
# Usage: hack/build-images.sh [agent|operator|dashboard ...]    (default: all three)
#   IMAGE_REGISTRY (ghcr.io/tpcmesh), IMAGE_TAG (the chart's appVersion), TPCMESH_IMAGE_BUILDER (docker|buildah),
#   TPCMESH_CACHE (~/.cache/tpcmesh). Prints the archive directory ($TPCMESH_CACHE/images/trixie) on its last line
#   (buildah).
set -euo pipefail
cd "$(dirname "$0")/.."

REGISTRY="${IMAGE_REGISTRY:-ghcr.io/tpcmesh}"
# The one version (hack/version.py): the chart's appVersion; the tag unless IMAGE_TAG names another, and the
# images' org.opencontainers.image.version label always.
VERSION="$(sed -n 's/^appVersion: *"\(.*\)"/\1/p' charts/tpcmesh/Chart.yaml)"
TAG="${IMAGE_TAG:-$VERSION}"
CACHE="${TPCMESH_CACHE:-$HOME/.cache/tpcmesh}"
DEBIAN_RELEASE=trixie
OUT="$CACHE/images/$DEBIAN_RELEASE"
BASE_REF="localhost/tpcmesh-debian:$DEBIAN_RELEASE"
components=("$@")
[ "${#components[@]}" -gt 0 ] || components=(agent operator dashboard)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'hack/build-images.sh: %s\n' "$*" >&2; exit 1; }

builder="${TPCMESH_IMAGE_BUILDER:-}"
if [ -z "$builder" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then builder=docker
  elif command -v buildah >/dev/null; then builder=buildah
  else die "no image builder: no Docker engine answers (docker info) and buildah is missing (as root: apt-get install buildah)"
  fi
fi

if [ "$builder" = docker ]; then
  for c in "${components[@]}"; do
    log "Building $REGISTRY/tpcmesh-$c:$TAG (docker)"
    docker build -f "Dockerfiles/$c.Dockerfile" -t "$REGISTRY/tpcmesh-$c:$TAG" --build-arg TPCMESH_VERSION="$VERSION" \
      ${TPCMESH_DEBIAN_MIRROR:+--build-arg DEBIAN_MIRROR="$TPCMESH_DEBIAN_MIRROR"} .
  done
  exit 0
fi

[ "$(id -u)" = 0 ] || die "buildah builds here need root (vfs storage under /var/lib/containers); run as root or with docker"
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION="${BUILDAH_ISOLATION:-chroot}"
mkdir -p "$OUT"

# The Debian mirror this machine's apt uses (deb822 or one-line sources), unless one is given.
mirror="${TPCMESH_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  mirror="$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
    | grep -v -- '-security' | grep -Eo 'https?://[^ ]+' | head -1 || true)"
  [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list*; set TPCMESH_DEBIAN_MIRROR=http://<mirror>/debian"
fi

# The base: the pinned image when it can be pulled, else a minbase debootstrap of the same release from the mirror.
base_image() {
  if buildah inspect --type image "$BASE_REF" >/dev/null 2>&1; then echo "$BASE_REF"; return; fi
  command -v debootstrap >/dev/null || die "debootstrap missing (as root: apt-get install debootstrap)"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -r "$keyring" ] || die "$keyring missing (as root: apt-get install debian-archive-keyring)"
  log "Making the base image $BASE_REF: debootstrap --variant=minbase $DEBIAN_RELEASE from $mirror (first time only)"
  local root tmp ctr
  tmp="$(mktemp -d)"; root="$tmp/rootfs"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  debootstrap --variant=minbase --keyring="$keyring" "$DEBIAN_RELEASE" "$root" "$mirror" >"$tmp/debootstrap.log" 2>&1 \
    || { tail -20 "$tmp/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -cf "$tmp/rootfs.tar" .
  ctr="$(buildah from scratch)"
  buildah add --quiet "$ctr" "$tmp/rootfs.tar" / >/dev/null
  buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  buildah commit --quiet --rm "$ctr" "$BASE_REF" >/dev/null
  echo "$BASE_REF"
}

# Whether the pinned base of the Dockerfiles can be pulled from here (a few seconds' try).
pinned_base="$(sed -n 's/^ARG DEBIAN_IMAGE=//p' Dockerfiles/agent.Dockerfile)"
if buildah inspect --type image "$pinned_base" >/dev/null 2>&1 || timeout 30 buildah pull --quiet "$pinned_base" >/dev/null 2>&1; then
  base="$pinned_base"
else
  base="$(base_image)"
fi
base_id="$(buildah inspect --type image --format '{{.FromImageID}}' "$base")"

# Everything a build reads: the Dockerfile, the sources its COPY lines name (stage-to-stage copies aside), the base.
inputs_hash() {
  local df="Dockerfiles/$1.Dockerfile"
  local srcs
  srcs="$(awk '/^COPY / && !/--from=/ {for (i = 2; i < NF; i++) print $i}' "$df")"
  {
    echo "$DEBIAN_RELEASE $base_id $mirror $VERSION $REGISTRY $TAG"  # the tag: it is the archive's image name
    sha256sum "$df"
    # shellcheck disable=SC2086
    git ls-files -co --exclude-standard -- $srcs | grep -v -e '/node_modules/' -e '/static/vendor/' | sort \
      | while read -r f; do [ -f "$f" ] && sha256sum "$f"; done
  } | sha256sum | cut -c1-16
}

# This machine may reach PyPI and npm through a TLS proxy that only its own CA bundle trusts: the build's RUN steps
# see that bundle's directory read-only at /mnt (empty in the base image) and the Dockerfiles' build-time ARGs
# PIP_CERT / NPM_CONFIG_CAFILE name it, so nothing of it lands in the images.
trust=()
bundle="${TPCMESH_BUILD_CA_BUNDLE:-${PIP_CERT:-${SSL_CERT_FILE:-}}}"
if [ -n "$bundle" ]; then
  [ -r "$bundle" ] || die "CA bundle $bundle (TPCMESH_BUILD_CA_BUNDLE, PIP_CERT or SSL_CERT_FILE) is not readable"
  trust=(-v "$(dirname "$(readlink -f "$bundle")"):/mnt:ro"
         --build-arg "PIP_CERT=/mnt/$(basename "$(readlink -f "$bundle")")"
         --build-arg "NPM_CONFIG_CAFILE=/mnt/$(basename "$(readlink -f "$bundle")")")
  log "Image builds trust $bundle for PyPI and npm (mounted for the build only, not copied into the images)"
fi

for c in "${components[@]}"; do
  [ -f "Dockerfiles/$c.Dockerfile" ] || die "no Dockerfiles/$c.Dockerfile (components: agent operator dashboard)"
  ref="$REGISTRY/tpcmesh-$c:$TAG"
  key="$(inputs_hash "$c")"
  archive="$OUT/tpcmesh-$c.tar"
  if [ -f "$archive" ] && [ -f "$OUT/tpcmesh-$c.packages" ] && [ "$(cat "$archive.key" 2>/dev/null)" = "$key" ] \
     && buildah inspect --type image "$ref" >/dev/null 2>&1; then
    log "$ref is up to date ($archive)"
    continue
  fi
  log "Building $ref with buildah (base $base, apt from $mirror)"
  start=$SECONDS
  # the archive is made from the image this build made (its id), not from $ref: a checkout of another release
  # building at the same time tags the same ref
  buildah bud --quiet --layers=false --network host "${trust[@]}" -f "Dockerfiles/$c.Dockerfile" -t "$ref" \
    --iidfile "$OUT/tpcmesh-$c.iid" --build-arg DEBIAN_IMAGE="$base" --build-arg DEBIAN_MIRROR="$mirror" \
    --build-arg TPCMESH_VERSION="$VERSION" . >/dev/null
  iid="$(cat "$OUT/tpcmesh-$c.iid")"; rm -f "$OUT/tpcmesh-$c.iid"
  rm -f "$archive" "$archive.key" "$OUT/tpcmesh-$c.packages"
  buildah push --quiet "$iid" "oci-archive:$archive.tmp:$ref" >/dev/null
  # The Debian packages in the image and their versions (what the README and the chart state is checked against
  # them: tests/unit/test_image_versions.py)
  ctr="$(buildah from --quiet --pull-never "$iid")"
  dpkg-query --admindir="$(buildah mount "$ctr")/var/lib/dpkg" -W -f '${Package}\t${Version}\n' \
    > "$OUT/tpcmesh-$c.packages"
  buildah umount "$ctr" >/dev/null; buildah rm "$ctr" >/dev/null
  mv "$archive.tmp" "$archive"
  echo "$key" > "$archive.key"
  log "Built $ref in $((SECONDS - start)) s -> $archive"
done
echo "$OUT"
