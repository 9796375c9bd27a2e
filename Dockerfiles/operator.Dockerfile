# syntax=docker/dockerfile:1
# tpcmesh operator (kopf). Build from the repository root: docker build -f Dockerfiles/operator.Dockerfile .
# Pinned: the base image by exact tag, Debian packages by a snapshot.debian.org date, Python packages by
# operator/pyproject.toml.
ARG DEBIAN_IMAGE=docker.io/library/debian:13.8-slim
FROM ${DEBIAN_IMAGE}
ARG DEBIAN_SNAPSHOT=20261122T000000Z
# DEBIAN_MIRROR: a plain Debian mirror instead of the snapshot (for builds that cannot reach snapshot.debian.org;
# the same packages are installed). hack/build-images.sh passes the one apt uses on the build machine.
ARG DEBIAN_MIRROR=
COPY hack/apt-sources.sh /tmp/apt-sources.sh
RUN set -eux; \
    sh /tmp/apt-sources.sh "$DEBIAN_SNAPSHOT" "$DEBIAN_MIRROR"; rm /tmp/apt-sources.sh; \
    apt-get update; \
    apt-get install -y --no-install-recommends python3 python3-venv ca-certificates openssl \
        xrootd-client python3-gfal2 gfal2-plugin-gridftp; \
    rm -rf /var/lib/apt/lists/*
# PIP_CERT / NPM_CONFIG_CAFILE: a CA bundle for reaching PyPI / npm through a TLS proxy, at build time only.
ARG PIP_CERT
COPY operator /src/operator
RUN python3 -m venv /opt/tpcmesh && /opt/tpcmesh/bin/pip install --no-cache-dir /src/operator && rm -rf /src
# The chart's appVersion (hack/version.py: one version for the chart, the images and the packages), passed by
# hack/build-images.sh and the release workflow.
ARG TPCMESH_VERSION=unknown
LABEL org.opencontainers.image.version="${TPCMESH_VERSION}" org.opencontainers.image.title="tpcmesh-operator"
ENV PATH=/opt/tpcmesh/bin:$PATH \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 tpcmesh && useradd --system --uid 10001 --gid 10001 --no-create-home tpcmesh
USER 10001:10001
EXPOSE 8080 9465
ENTRYPOINT ["tpcmesh-operator"]
