# syntax=docker/dockerfile:1
# tpcmesh dashboard (Django + DRF behind gunicorn). Build from the repository root:
#   docker build -f Dockerfiles/dashboard.Dockerfile .
# Pinned: the base image by exact tag, Debian packages by a snapshot.debian.org date, Python packages by
# dashboard/requirements.txt, the charting library by dashboard/package-lock.json.
ARG DEBIAN_IMAGE=docker.io/library/debian:13.8-slim
FROM ${DEBIAN_IMAGE} AS assets
ARG DEBIAN_SNAPSHOT=20261122T000000Z
# DEBIAN_MIRROR: a plain Debian mirror instead of the snapshot (for builds that cannot reach snapshot.debian.org;
# the same packages are installed). hack/build-images.sh passes the one apt uses on the build machine.
ARG DEBIAN_MIRROR=
COPY hack/apt-sources.sh /tmp/apt-sources.sh
RUN set -eux; \
    sh /tmp/apt-sources.sh "$DEBIAN_SNAPSHOT" "$DEBIAN_MIRROR"; rm /tmp/apt-sources.sh; \
    apt-get update; apt-get install -y --no-install-recommends npm ca-certificates; rm -rf /var/lib/apt/lists/*
# PIP_CERT / NPM_CONFIG_CAFILE: a CA bundle for reaching PyPI / npm through a TLS proxy, at build time only.
ARG NPM_CONFIG_CAFILE
COPY dashboard/package.json dashboard/package-lock.json dashboard/hack-assets.sh /src/dashboard/
COPY dashboard/results/static /src/dashboard/results/static
RUN cd /src/dashboard && npm ci --ignore-scripts && ./hack-assets.sh

FROM ${DEBIAN_IMAGE}
ARG DEBIAN_SNAPSHOT=20261122T000000Z
# DEBIAN_MIRROR: a plain Debian mirror instead of the snapshot (for builds that cannot reach snapshot.debian.org;
# the same packages are installed). hack/build-images.sh passes the one apt uses on the build machine.
ARG DEBIAN_MIRROR=
COPY hack/apt-sources.sh /tmp/apt-sources.sh
RUN set -eux; \
    sh /tmp/apt-sources.sh "$DEBIAN_SNAPSHOT" "$DEBIAN_MIRROR"; rm /tmp/apt-sources.sh; \
    apt-get update; \
    apt-get install -y --no-install-recommends python3 python3-venv ca-certificates; \
    rm -rf /var/lib/apt/lists/*
# PIP_CERT / NPM_CONFIG_CAFILE: a CA bundle for reaching PyPI / npm through a TLS proxy, at build time only.
ARG PIP_CERT
COPY dashboard/requirements.txt /src/requirements.txt
RUN python3 -m venv /opt/tpcmesh && /opt/tpcmesh/bin/pip install --no-cache-dir -r /src/requirements.txt \
    && rm -rf /src
COPY dashboard /app/dashboard
COPY manifests/schemas /app/manifests/schemas
COPY --from=assets /src/dashboard/results/static/vendor /app/dashboard/results/static/vendor
# The chart's appVersion (hack/version.py: one version for the chart, the images and the packages), passed by
# hack/build-images.sh and the release workflow.
ARG TPCMESH_VERSION=unknown
LABEL org.opencontainers.image.version="${TPCMESH_VERSION}" org.opencontainers.image.title="tpcmesh-dashboard"
ENV PATH=/opt/tpcmesh/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=config.settings
WORKDIR /app/dashboard
RUN rm -rf node_modules db.sqlite3 && python3 manage.py collectstatic --noinput \
    && groupadd --system --gid 10001 tpcmesh && useradd --system --uid 10001 --gid 10001 --no-create-home tpcmesh
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["gunicorn", "config.wsgi"]
CMD ["--bind", "0.0.0.0:8000", "--workers", "2", "--access-logfile", "-"]
