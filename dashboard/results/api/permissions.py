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


class ActAccess(ReadAccess):
    """Reads as ReadAccess; acting (acknowledging a problem, setting maintenance) needs a write API token or a
    signed-in user with the model's Django permission (results.change_problem, results.add_maintenance, ...)."""

    message = ("Acting needs an API token created with --write, or a signed-in user with the permission "
               "(Django admin: results | problem | Can change problem, results | maintenance | Can add ...).")
    ACTIONS = {"POST": "add", "PUT": "change", "PATCH": "change", "DELETE": "delete"}

    def has_permission(self, request, view):
        if request.method in permissions.SAFE_METHODS:
            return super().has_permission(request, view)
        token = request.auth
        if isinstance(token, ApiToken):
            return token.write
        user = request.user
        if not (user and user.is_authenticated):
            return False
        model = view.acting_model
        action = getattr(view, "acting_permission", None) or self.ACTIONS.get(request.method, "change")
        return user.has_perm(f"{model._meta.app_label}.{action}_{model._meta.model_name}")


def actor(request) -> str:
    """Who acted: the signed-in user's name or the API token's name."""
    if isinstance(request.auth, ApiToken):
        return f"token:{request.auth.name}"
    return request.user.get_username()
