"""Tokens from a site's own issuer (INDIGO IAM, Keycloak, a token service of the grid) instead of the built-in one.

The operator is an OAuth 2.0 client of that issuer and asks for each token with the client credentials grant
(RFC 6749 section 4.4), naming the scopes and the audience the way WLCG IAM takes them (``scope``, ``audience``
form fields). The issuer decides the lifetime and the subject. The agents validate the tokens against the issuer's
JWKS as they do the built-in one's; the site's issuer must let this client ask for ``storage.read:/sets``,
``storage.create:/incoming`` and ``storage.read:/incoming`` with any audience (the agents' URLs).
"""

from __future__ import annotations

import ssl
import threading
from pathlib import Path

import httpx

from .claims import TokenRequest, check_issuer
from .server import DISCOVERY_PATH


class ExternalIssuerError(RuntimeError):
    """The external issuer could not give a token; the message names the issuer and its answer."""


class ExternalIssuer:
    """``issue(TokenRequest) -> str`` like the built-in TokenIssuer, by asking the site's issuer."""

    def __init__(self, issuer: str, client_id: str, client_secret: str, ca_file: str | Path | None = None,
                 timeout: float = 10.0) -> None:
        self.issuer = check_issuer(issuer)
        if not client_id or not client_secret:
            raise ExternalIssuerError(f"token issuer {issuer}: the client id and secret are required (the chart's "
                                      f"tokens.external.clientSecret: a Secret with keys client_id, client_secret)")
        self._auth = (client_id, client_secret)
        ctx = ssl.create_default_context()  # the system's CAs (a public issuer) and, when given, the site's own
        if ca_file:
            ctx.load_verify_locations(cafile=str(ca_file))
        self._client = httpx.Client(verify=ctx, timeout=timeout)
        self._endpoint = ""
        self._lock = threading.Lock()

    def _token_endpoint(self) -> str:
        with self._lock:
            if not self._endpoint:
                url = self.issuer + DISCOVERY_PATH
                try:
                    r = self._client.get(url)
                    r.raise_for_status()
                    endpoint = r.json().get("token_endpoint")
                except (httpx.HTTPError, ValueError) as e:
                    raise ExternalIssuerError(f"token issuer {self.issuer}: discovery document {url} unreadable: "
                                              f"{e}") from None
                if not isinstance(endpoint, str) or not endpoint.startswith("https://"):
                    raise ExternalIssuerError(f"token issuer {self.issuer}: its discovery document names no https "
                                              f"token_endpoint ({endpoint!r})")
                self._endpoint = endpoint
            return self._endpoint

    def issue(self, req: TokenRequest) -> str:
        endpoint = self._token_endpoint()
        form = {"grant_type": "client_credentials", "scope": " ".join(req.scopes), "audience": req.audience}
        try:
            r = self._client.post(endpoint, data=form, auth=self._auth)
        except httpx.HTTPError as e:
            raise ExternalIssuerError(f"token issuer {self.issuer}: {endpoint} unreachable: {e}") from None
        try:
            body = r.json()
        except ValueError:
            body = {}
        if r.status_code != 200 or not isinstance(body.get("access_token"), str):
            why = body.get("error_description") or body.get("error") or r.text[:200]
            raise ExternalIssuerError(f"token issuer {self.issuer} refused a token for {req.audience} with scopes "
                                      f"{' '.join(req.scopes)} (HTTP {r.status_code}): {why}")
        return str(body["access_token"])

    def close(self) -> None:
        self._client.close()
