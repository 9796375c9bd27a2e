# syntax=docker/dockerfile:1
# tpcmesh agent: the control API plus the protocol servers and clients it drives (XRootD, GridFTP, iperf3),
# all from Debian 13 (trixie). Build from the repository root: docker build -f Dockerfiles/agent.Dockerfile .
# Pinned: the base image by exact tag, Debian packages by a snapshot.debian.org date (the package list is
# hack/debian-packages.txt, lines whose use starts with "agent:"), Python packages by agent/pyproject.toml.
ARG DEBIAN_IMAGE=docker.io/library/debian:13.8-slim
FROM ${DEBIAN_IMAGE}
ARG DEBIAN_SNAPSHOT=20261122T000000Z
# DEBIAN_MIRROR: a plain Debian mirror instead of the snapshot (for builds that cannot reach snapshot.debian.org;
# the same packages are installed). hack/build-images.sh passes the one apt uses on the build machine.
ARG DEBIAN_MIRROR=
COPY hack/apt-sources.sh /tmp/apt-sources.sh
COPY hack/debian-packages.txt /tmp/debian-packages.txt
RUN set -eux; \
    sh /tmp/apt-sources.sh "$DEBIAN_SNAPSHOT" "$DEBIAN_MIRROR"; rm /tmp/apt-sources.sh; \
    apt-get update; \
    awk -F'\t' '!/^#/ && $2 ~ /^agent:/ {print $1}' /tmp/debian-packages.txt \
      | xargs apt-get install -y --no-install-recommends python3 python3-venv ca-certificates openssl; \
    rm -rf /var/lib/apt/lists/* /tmp/debian-packages.txt
# PIP_CERT / NPM_CONFIG_CAFILE: a CA bundle for reaching PyPI / npm through a TLS proxy, at build time only.
ARG PIP_CERT
COPY agent /src/agent
RUN python3 -m venv /opt/tpcmesh && /opt/tpcmesh/bin/pip install --no-cache-dir /src/agent && rm -rf /src
# The chart's appVersion (hack/version.py: one version for the chart, the images and the packages), passed by
# hack/build-images.sh and the release workflow.
ARG TPCMESH_VERSION=unknown
LABEL org.opencontainers.image.version="${TPCMESH_VERSION}" org.opencontainers.image.title="tpcmesh-agent"
ENV PATH=/opt/tpcmesh/bin:$PATH \
    PYTHONUNBUFFERED=1
# Every port is above 1023 and xrootd refuses root anyway: the agent and its servers run unprivileged.
RUN groupadd --system --gid 10001 tpcmesh && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/tpcmesh --create-home tpcmesh
USER 10001:10001
WORKDIR /var/lib/tpcmesh
EXPOSE 9443 9464 9080 1094 8444 2811 5201
ENTRYPOINT ["tpcmesh-agent"]
