"""API token authentication: `Authorization: Token <key>` (or `Bearer <key>`), looked up by its SHA-256."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from results import services
from results.models import ApiToken, hash_token


class TokenAuthentication(authentication.BaseAuthentication):
    keywords = ("token", "bearer")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower().decode(errors="replace") not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid Authorization header: expected 'Token <key>'.")
        key = header[1].decode(errors="replace")
        token = ApiToken.objects.select_related("cluster").filter(key_hash=hash_token(key), enabled=True).first()
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or disabled API token.")
        services.touch_token(token)
        return (token, token)

    def authenticate_header(self, request):
        return "Token"


class TokenScheme(OpenApiAuthenticationExtension):
    target_class = "results.api.authentication.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <key>` (create one with `manage.py create_api_token NAME [--write | "
                               "--cluster CLUSTER]`)"}
