"""Read access (open or token, TPCMESH_DASHBOARD_READ_ACCESS) and write access (a token with `write`)."""

from __future__ import annotations

from django.conf import settings
from rest_framework import permissions

from results.models import ApiToken


class ReadAccess(permissions.BasePermission):
    message = "Reading needs an API token or a signed-in user (TPCMESH_DASHBOARD_READ_ACCESS=token)."

    def has_permission(self, request, view):
        if request.method not in permissions.SAFE_METHODS:
            return False
        if settings.READ_ACCESS == "open" or isinstance(request.auth, ApiToken):
            return True
        return bool(request.user and request.user.is_authenticated)  # a session from the pages' sign-in


class WriteAccess(permissions.BasePermission):
    message = "This API token is read-only; ingest needs a token created with --write."

    def has_permission(self, request, view):
        token = request.auth
        return isinstance(token, ApiToken) and token.write
