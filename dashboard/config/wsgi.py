"""WSGI entry point (gunicorn config.wsgi; runserver loads it too). Refuses to start without a secret key:
sessions and sign-ins must not be signed with a key anybody can read."""

import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()
try:
    settings.SECRET_KEY  # noqa: B018 - Django raises on an empty key
except ImproperlyConfigured:
    raise ImproperlyConfigured(
        "TPCMESH_DASHBOARD_SECRET_KEY is not set: the dashboard does not serve without a secret key. Set it to a "
        "long random string kept across restarts (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(50))'`"
        "; the Helm chart generates one)."
    ) from None
