# syntax=docker/dockerfile:1
# tpcmesh operator (kopf). Build from the repository root: docker build -f Dockerfiles/operator.Dockerfile .
# Pinned: the base image by exact tag, Debian packages by a snapshot.debian.org date, Python packages by
# operator/pyproject.toml.
ARG DEBIAN_IMAGE=docker.io/library/debian:12.8-slim
FROM ${DEBIAN_IMAGE}
ARG DEBIAN_SNAPSHOT=20241210T000000Z
RUN set -eux; \
    rm -f /etc/apt/sources.list.d/debian.sources; \
    printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/%s bookworm main\n' "$DEBIAN_SNAPSHOT" \
      > /etc/apt/sources.list.d/snapshot.list; \
    printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/%s bookworm-security main\n' \
      "$DEBIAN_SNAPSHOT" >> /etc/apt/sources.list.d/snapshot.list; \
    apt-get update; \
    apt-get install -y --no-install-recommends python3 python3-venv ca-certificates openssl; \
    rm -rf /var/lib/apt/lists/*
COPY operator /src/operator
RUN python3 -m venv /opt/tpcmesh && /opt/tpcmesh/bin/pip install --no-cache-dir /src/operator && rm -rf /src
ENV PATH=/opt/tpcmesh/bin:$PATH \
    PYTHONUNBUFFERED=1
RUN useradd --system --uid 10001 --user-group --no-create-home tpcmesh
USER 10001:10001
EXPOSE 8080 9465
ENTRYPOINT ["tpcmesh-operator"]
