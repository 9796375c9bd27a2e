"""External endpoints (spec.externalEndpoints): storage outside the mesh, reached by URL with its site's credentials.

Pure code: parsing and validation (every error a SpecError naming the field), the protocol each URL scheme is
measured with, and the paths the operator may touch on an endpoint. Nothing is ever written outside an endpoint's
`path`: every path is built by `Endpoint.path_of`, which refuses a part that would leave it.

An endpoint as a source serves the test files the operator uploaded once to `<path>/sets/<file set>/`; as a
destination it receives copies in `<path>/incoming/<test id>/` (removed after each test's checksum is read).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..plan.specerror import SpecError
from ..protocols import SCHEME_PROTOCOLS  # URL scheme -> the benchmark protocol whose tests run against it

# what the operator and agents drive: davs/https (HTTP-TPC), root:// (xrdcp, a token over ztn), gsiftp://
# (globus-url-copy with an X509 proxy or certificate; the operator's checks and cleanup through gfal2)
DRIVEN_SCHEMES = ("davs", "https", "root", "gsiftp")
# a scheme of SCHEME_PROTOCOLS not driven (yet) and why: refused at apply time, naming the field
NOT_DRIVEN: Mapping[str, str] = {}
DEFAULT_PORTS: Mapping[str, int] = {"davs": 443, "https": 443, "root": 1094, "gsiftp": 2811}
ROLES = ("source", "destination", "both")
MAX_ENDPOINTS = 20
# what a credentials Secret may hold: a bearer token (davs/https, root over ztn), an X509 proxy or a certificate and
# key (gsiftp), and the endpoint's CA certificate (to verify it when the operator uploads)
SECRET_KEYS = ("token", "proxy", "tls.crt", "tls.key", "ca.crt")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PART = re.compile(r"^[A-Za-z0-9._-]{1,255}$")


class PathEscapes(ValueError):
    """A path built for an endpoint would leave its directory."""


@dataclass(frozen=True)
class ExternalEndpoint:
    name: str  # the grid's row/column name
    url: str  # scheme://host[:port], no path
    path: str  # absolute, normalised, never "/"
    credentials: str = ""  # the Secret's name (same namespace); "" = none (anonymous)
    role: str = "both"

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme

    @property
    def protocol(self) -> str:
        return SCHEME_PROTOCOLS[self.scheme]

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or DEFAULT_PORTS[self.scheme]

    @property
    def is_source(self) -> bool:
        return self.role in ("source", "both")

    @property
    def is_destination(self) -> bool:
        return self.role in ("destination", "both")

    def path_of(self, *parts: str) -> str:
        """`<path>/<part>/...`; each part a plain name (no '/', no '..'), so the result stays inside `path`."""
        for p in parts:
            if not _PART.match(p) or p in (".", ".."):
                raise PathEscapes(f"external endpoint {self.name}: {p!r} is not a plain file name; nothing is "
                                  f"written outside {self.path}")
        out = posixpath.normpath(posixpath.join(self.path, *parts))
        if not (out + "/").startswith(self.path.rstrip("/") + "/"):
            raise PathEscapes(f"external endpoint {self.name}: {out} is outside {self.path}")
        return out

    def url_of(self, *parts: str) -> str:
        """The full URL of `path_of(*parts)` (root:// wants the path after a second slash)."""
        path = self.path_of(*parts)
        return f"{self.url}/{path}" if self.scheme == "root" else f"{self.url}{path}"

    def set_dir(self, file_set: str) -> str:
        return self.path_of("sets", file_set)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "path": self.path, "role": self.role,
                **({"credentials": self.credentials} if self.credentials else {})}


def _endpoint_url(v: Any, field: str) -> str:
    if not isinstance(v, str) or not v:
        raise SpecError(field, f"expected a URL such as davs://storage.example.org:1094, got {v!r}")
    try:
        u = urlsplit(v)
        port = u.port
    except ValueError as e:
        raise SpecError(field, f"not a URL ({e}): {v!r}") from None
    if u.scheme not in SCHEME_PROTOCOLS:
        raise SpecError(field, f"scheme {u.scheme!r} is not one of {', '.join(SCHEME_PROTOCOLS)}: {v!r}")
    if not u.hostname:
        raise SpecError(field, f"names no host: {v!r}")
    if u.username or u.password:
        raise SpecError(field, "must not hold credentials: put them in the credentials Secret")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise SpecError(field, f"must be scheme://host[:port] only; the directory goes in path: {v!r}")
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return f"{u.scheme}://{host}" + (f":{port}" if port else "")


def _endpoint_path(v: Any, field: str) -> str:
    if not isinstance(v, str) or not v.startswith("/"):
        raise SpecError(field, f"expected an absolute path on the endpoint, such as /store/tpcmesh, got {v!r}")
    parts = [p for p in v.split("/") if p]
    if not parts:
        raise SpecError(field, "must not be / (the test files need a directory of their own)")
    for p in parts:
        if p in (".", "..") or not _PART.match(p):
            raise SpecError(field, f"{p!r} is not allowed in a path (plain names only, no . or ..): {v!r}")
    return "/" + "/".join(parts)


def parse_external_endpoints(v: Any, path: str, protocols: tuple[str, ...]) -> tuple[ExternalEndpoint, ...]:
    """spec.externalEndpoints: each {name, url, path, credentials, role}; its URL's protocol must be measured."""
    if v is None:
        return ()
    if not isinstance(v, list):
        raise SpecError(path, f"expected a list of {{name, url, path, credentials, role}}, got {v!r}")
    if len(v) > MAX_ENDPOINTS:
        raise SpecError(path, f"at most {MAX_ENDPOINTS} endpoints, got {len(v)}")
    known = {"name", "url", "path", "credentials", "role"}
    out: list[ExternalEndpoint] = []
    for i, d in enumerate(v):
        ip = f"{path}[{i}]"
        if not isinstance(d, Mapping):
            raise SpecError(ip, f"expected {{name, url, path, credentials, role}}, got {d!r}")
        unknown = sorted(set(d) - known)
        if unknown:
            raise SpecError(f"{ip}.{unknown[0]}", f"unknown field (known: {', '.join(sorted(known))})")
        name = d.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise SpecError(f"{ip}.name", f"expected a DNS label (a-z, 0-9, -; up to 63), got {name!r}")
        if any(e.name == name for e in out):
            raise SpecError(f"{ip}.name", f"endpoint {name!r} listed twice")
        url = _endpoint_url(d.get("url"), f"{ip}.url")
        ep_path = _endpoint_path(d.get("path"), f"{ip}.path")
        credentials = d.get("credentials", "")
        if credentials is None:
            credentials = ""
        if not isinstance(credentials, str) or (credentials and not re.match(r"^[a-z0-9]([-a-z0-9.]{0,251}"
                                                                              r"[a-z0-9])?$", credentials)):
            raise SpecError(f"{ip}.credentials", f"expected the name of a Secret in this namespace, got "
                                                 f"{credentials!r}")
        role = d.get("role", "both")
        if role not in ROLES:
            raise SpecError(f"{ip}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
        ep = ExternalEndpoint(name=name, url=url, path=ep_path, credentials=credentials, role=role)
        if ep.scheme not in DRIVEN_SCHEMES:
            raise SpecError(f"{ip}.url", f"{ep.scheme}:// endpoints are not measured by this operator yet: "
                                         f"{NOT_DRIVEN.get(ep.scheme, 'no mover')} "
                                         f"({', '.join(s + '://' for s in DRIVEN_SCHEMES)} are)")
        if ep.protocol not in protocols:
            raise SpecError(f"{ip}.url", f"a {ep.scheme}:// endpoint is measured with {ep.protocol}, which is not in "
                                         f"spec.protocols ({', '.join(protocols) or 'none'})")
        out.append(ep)
    return tuple(out)

