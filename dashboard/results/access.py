"""Who may read the pages: everyone (READ_ACCESS=open), or with READ_ACCESS=token a signed-in user (Django
session) or a request carrying a valid API token (`Authorization: Token <key>`, for scripts). The REST API
applies the same rule through results.api.permissions.ReadAccess."""

from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from rest_framework.exceptions import AuthenticationFailed

from results.api.authentication import TokenAuthentication


def read_access_required(view):
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if settings.READ_ACCESS == "open" or request.user.is_authenticated:
            return view(request, *args, **kwargs)
        try:
            token = TokenAuthentication().authenticate(request)
        except AuthenticationFailed as err:
            return HttpResponse(f"{err.detail}\n", status=401, content_type="text/plain",
                                headers={"WWW-Authenticate": "Token"})
        if token is not None:
            return view(request, *args, **kwargs)
        return redirect_to_login(request.get_full_path())

    return wrapped
