# syntax=docker/dockerfile:1
# tpcmesh dashboard (Django + DRF behind gunicorn). Build from the repository root:
#   docker build -f Dockerfiles/dashboard.Dockerfile .
# Pinned: the base image by exact tag, Debian packages by a snapshot.debian.org date, Python packages by
# dashboard/requirements.txt, the charting library by dashboard/package-lock.json.
ARG DEBIAN_IMAGE=docker.io/library/debian:12.8-slim
FROM ${DEBIAN_IMAGE} AS assets
ARG DEBIAN_SNAPSHOT=20241210T000000Z
RUN set -eux; \
    rm -f /etc/apt/sources.list.d/debian.sources; \
    printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/%s bookworm main\n' "$DEBIAN_SNAPSHOT" \
      > /etc/apt/sources.list.d/snapshot.list; \
    apt-get update; apt-get install -y --no-install-recommends npm ca-certificates; rm -rf /var/lib/apt/lists/*
COPY dashboard/package.json dashboard/package-lock.json dashboard/hack-assets.sh /src/dashboard/
COPY dashboard/results/static /src/dashboard/results/static
RUN cd /src/dashboard && npm ci --ignore-scripts && ./hack-assets.sh

FROM ${DEBIAN_IMAGE}
ARG DEBIAN_SNAPSHOT=20241210T000000Z
RUN set -eux; \
    rm -f /etc/apt/sources.list.d/debian.sources; \
    printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/%s bookworm main\n' "$DEBIAN_SNAPSHOT" \
      > /etc/apt/sources.list.d/snapshot.list; \
    printf 'deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/%s bookworm-security main\n' \
      "$DEBIAN_SNAPSHOT" >> /etc/apt/sources.list.d/snapshot.list; \
    apt-get update; \
    apt-get install -y --no-install-recommends python3 python3-venv ca-certificates; \
    rm -rf /var/lib/apt/lists/*
COPY dashboard/requirements.txt /src/requirements.txt
RUN python3 -m venv /opt/tpcmesh && /opt/tpcmesh/bin/pip install --no-cache-dir -r /src/requirements.txt \
    && rm -rf /src
COPY dashboard /app/dashboard
COPY manifests/schemas /app/manifests/schemas
COPY --from=assets /src/dashboard/results/static/vendor /app/dashboard/results/static/vendor
ENV PATH=/opt/tpcmesh/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=config.settings
WORKDIR /app/dashboard
RUN rm -rf node_modules db.sqlite3 && python3 manage.py collectstatic --noinput \
    && useradd --system --uid 10001 --user-group --no-create-home tpcmesh
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["gunicorn", "config.wsgi"]
CMD ["--bind", "0.0.0.0:8000", "--workers", "2", "--access-logfile", "-"]
