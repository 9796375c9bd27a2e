# syntax=docker/dockerfile:1
# tpcmesh agent: the control API plus the protocol servers and clients it drives (XRootD, GridFTP, iperf3),
# all from Debian 12. Build from the repository root: docker build -f Dockerfiles/agent.Dockerfile .
# Pinned: the base image by exact tag, Debian packages by a snapshot.debian.org date (the package list is
# hack/debian-packages.txt, lines whose use starts with "agent:"), Python packages by agent/pyproject.toml.
ARG DEBIAN_IMAGE=docker.io/library/debian:12.8-slim
FROM ${DEBIAN_IMAGE}
ARG DEBIAN_SNAPSHOT=20241210T000000Z
COPY hack/debian-packages.txt /tmp/debian-packages.txt
RUN set -eux; \
    rm -f /etc/apt/sources.list.d/debian.sources; \
    printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/%s bookworm main\n' "$DEBIAN_SNAPSHOT" \
      > /etc/apt/sources.list.d/snapshot.list; \
    printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/%s bookworm-security main\n' \
      "$DEBIAN_SNAPSHOT" >> /etc/apt/sources.list.d/snapshot.list; \
    apt-get update; \
    awk -F'\t' '!/^#/ && $2 ~ /^agent:/ {print $1}' /tmp/debian-packages.txt \
      | xargs apt-get install -y --no-install-recommends python3 python3-venv ca-certificates openssl; \
    rm -rf /var/lib/apt/lists/* /tmp/debian-packages.txt
COPY agent /src/agent
RUN python3 -m venv /opt/tpcmesh && /opt/tpcmesh/bin/pip install --no-cache-dir /src/agent && rm -rf /src
ENV PATH=/opt/tpcmesh/bin:$PATH \
    PYTHONUNBUFFERED=1
# Every port is above 1023 and xrootd refuses root anyway: the agent and its servers run unprivileged.
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/tpcmesh --create-home tpcmesh
USER 10001:10001
WORKDIR /var/lib/tpcmesh
EXPOSE 9443 9464 9080 1094 8444 2811 5201
ENTRYPOINT ["tpcmesh-agent"]
