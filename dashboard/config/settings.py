"""Settings of the tpcmesh dashboard, all from the environment (one module; tests use settings_test).

TPCMESH_DASHBOARD_* variables:
  SECRET_KEY     Django secret key, required to serve: the server (config.wsgi: gunicorn, runserver) refuses
                 to start without it; commands that sign nothing (migrate, collectstatic, ...) run without
  DEBUG          "1" for debug pages
  ALLOWED_HOSTS  comma-separated host names (default "localhost,127.0.0.1,[::1]"; "*" for any)
  READ_ACCESS    "open" (default): anyone may read; "token": the pages and the read API need a signed-in
                 user (Django accounts, /accounts/login/) or an API token
  MAX_BODY_BYTES largest accepted request body in bytes (default 32 MiB); larger ingests get 413
  STALE_SECONDS  a grid cell older than this is drawn as stale (default 2 days)
  ANALYSIS       change detection and problem rules after ingest: "background" (a thread per process),
                 "inline" (inside the ingest request), "off" (only `manage.py analyse`); "auto" (default):
                 background on PostgreSQL, inline on SQLite (one writer at a time: a thread would meet "locked")
  CSV_MAX_ROWS   most rows one ?format=csv export streams (default 100 000); a last "# truncated" line says so
  RETENTION_RAW_DAYS   days raw measurements are kept (default 180) before `manage.py prune_archive` removes
                 them, whole UTC days at a time, after rolling them up into daily per-cell summaries (kept for good)
  RETENTION_FILE_DAYS  days per-file transfer rows are kept (default 30); at most RETENTION_RAW_DAYS in effect
  RETENTION_LOSS_DAYS  days loss summaries are kept (default 30), by their period's start, whole UTC days
DATABASE_URL: any dj-database-url URL (postgres://...); a SQLite file dashboard/db.sqlite3 when unset.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = BASE_DIR.parent


def _env(name: str, default: str) -> str:
    return os.environ.get(f"TPCMESH_DASHBOARD_{name}", default)


# No default: Django refuses to use an empty key (ImproperlyConfigured on first use); config.wsgi checks it first.
SECRET_KEY = _env("SECRET_KEY", "")
DEBUG = _env("DEBUG", "0") == "1"
ALLOWED_HOSTS = [h.strip() for h in _env("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h.strip()]

READ_ACCESS = _env("READ_ACCESS", "open")
if READ_ACCESS not in ("open", "token"):
    raise ValueError(f"TPCMESH_DASHBOARD_READ_ACCESS must be 'open' or 'token', not {READ_ACCESS!r}")
MAX_BODY_BYTES = int(_env("MAX_BODY_BYTES", str(32 * 1024 * 1024)))
STALE_SECONDS = int(_env("STALE_SECONDS", str(2 * 24 * 3600)))
ANALYSIS = _env("ANALYSIS", "auto")
if ANALYSIS not in ("auto", "background", "inline", "off"):
    raise ValueError(f"TPCMESH_DASHBOARD_ANALYSIS must be 'auto', 'background', 'inline' or 'off', not {ANALYSIS!r}")
CSV_MAX_ROWS = int(_env("CSV_MAX_ROWS", "100000"))


def _days(name: str, default: int) -> int:
    """A retention age in whole days (1 or more); a clear error naming the variable otherwise."""
    value = _env(name, str(default))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"TPCMESH_DASHBOARD_{name} must be a whole number of days, 1 or more, not {value!r}")
    return int(value)


RETENTION_RAW_DAYS = _days("RETENTION_RAW_DAYS", 180)
RETENTION_FILE_DAYS = _days("RETENTION_FILE_DAYS", 30)
RETENTION_LOSS_DAYS = _days("RETENTION_LOSS_DAYS", 30)
# The whole ingest body is read at once; Django's own limit must not refuse it before our 413 does.
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_BODY_BYTES

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "results",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "results.middleware.BodySizeLimitMiddleware",
    "results.middleware.MetricsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
# The covering index meas_window INCLUDEs columns only PostgreSQL can use; on SQLite (the zero-setup default) it is
# a plain index, as meant, and Django's warning about it would print on every command.
SILENCED_SYSTEM_CHECKS = ["models.W040"]
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_max_age=60,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "index"
LOGOUT_REDIRECT_URL = "index"

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"  # collectstatic's target (images); whitenoise also serves from the finders
try:  # whitenoise warns about a missing STATIC_ROOT; a read-only image has it from collectstatic
    STATIC_ROOT.mkdir(exist_ok=True)
except OSError:
    pass
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "results.api.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",  # reads by a user signed in on the pages
    ],
    "DEFAULT_PERMISSION_CLASSES": ["results.api.permissions.ReadAccess"],
    "DEFAULT_FILTER_BACKENDS": [
        "results.api.filtering.SingleValueFilterBackend",
        "results.api.ordering.OrderingFilter",
    ],
    "EXCEPTION_HANDLER": "results.api.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "results.api.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "tpcmesh dashboard API",
    "DESCRIPTION": "Results archive of the tpcmesh transfer mesh: bulk ingest, reads, aggregates.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "OAS_VERSION": "3.1.0",  # the measurement contract is JSON Schema 2020-12, which OpenAPI 3.1 speaks
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "results.api.openapi.postprocess",
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
