"""The operator's own I/O with external endpoints (spec.externalEndpoints): reading their credentials, asking a
copy's size and adler32, and removing what a benchmark put there. The copies themselves are third-party copies the
agents run (runs.py asks them); only davs/https endpoints are driven so far (HTTP-TPC).

Every path comes from `ExternalEndpoint.path_of`, so nothing outside an endpoint's `path` is ever touched.
Credentials (a Secret's `token`, `ca.crt`) are never logged and never put in a status or a record.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from .externals import ExternalEndpoint

log = logging.getLogger(__name__)

HTTP_SCHEMES = ("davs", "https")


class ExternalError(RuntimeError):
    """Something an external endpoint did or refused; the message names the endpoint."""


class CredentialSource(Protocol):
    async def read(self, secret: str) -> Mapping[str, str]:
        """The Secret's data (decoded), or raise ExternalError naming the Secret."""
        ...


class StaticCredentials:
    """Secrets given in memory (tests, the local mode)."""

    def __init__(self, secrets: Mapping[str, Mapping[str, str]]) -> None:
        self._secrets = secrets

    async def read(self, secret: str) -> Mapping[str, str]:
        if secret not in self._secrets:
            raise ExternalError(f"Secret {secret} not found")
        return self._secrets[secret]


@dataclass(frozen=True)
class Access:
    """What the operator and the agents use to reach one endpoint."""

    endpoint: ExternalEndpoint
    token: str | None = None
    ca_pem: str | None = None  # the endpoint's CA (Secret key ca.crt), else the system's trust

    def describe(self) -> str:
        return f"external endpoint {self.endpoint.name} ({self.endpoint.url})"


async def access(endpoint: ExternalEndpoint, credentials: CredentialSource | None) -> Access:
    if not endpoint.credentials:
        return Access(endpoint)
    if credentials is None:
        raise ExternalError(f"external endpoint {endpoint.name}: its credentials Secret {endpoint.credentials} "
                            "cannot be read here (no Secret reader)")
    try:
        data = await credentials.read(endpoint.credentials)
    except ExternalError as e:
        raise ExternalError(f"external endpoint {endpoint.name}: {e}") from None
    token = (data.get("token") or "").strip() or None
    if endpoint.scheme in HTTP_SCHEMES and token is None:
        raise ExternalError(f"external endpoint {endpoint.name}: Secret {endpoint.credentials} has no key token "
                            f"(a bearer token for {endpoint.scheme}://)")
    return Access(endpoint, token, data.get("ca.crt") or None)


def http_url(endpoint: ExternalEndpoint, path: str) -> str:
    """The https:// URL of a path on a davs/https endpoint (davs is WebDAV over https)."""
    return f"https://{endpoint.url.split('://', 1)[1]}{path}"


class EndpointClient:
    """HTTPS to one davs/https endpoint with its token: a file's size and adler32, deletions."""

    def __init__(self, acc: Access, ca_file: str | None = None) -> None:
        if acc.endpoint.scheme not in HTTP_SCHEMES:
            raise ExternalError(f"{acc.describe()}: {acc.endpoint.scheme}:// endpoints are not driven by this "
                                "operator yet (davs and https are)")
        self.acc = acc
        ctx = ssl.create_default_context(cafile=ca_file)
        if acc.ca_pem:
            ctx.load_verify_locations(cadata=acc.ca_pem)
        self._ssl = ctx
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> EndpointClient:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl),
                                              timeout=aiohttp.ClientTimeout(total=60))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    def _headers(self, **extra: str) -> dict[str, str]:
        return {**({"Authorization": f"Bearer {self.acc.token}"} if self.acc.token else {}), **extra}

    async def _request(self, method: str, path: str, **headers: str) -> tuple[int, str, Mapping[str, str]]:
        assert self._session is not None
        url = http_url(self.acc.endpoint, path)
        try:
            async with self._session.request(method, url, headers=self._headers(**headers)) as resp:
                text = "" if method == "HEAD" else await resp.text(errors="replace")
                body = text if method == "PROPFIND" else text[:300]
                return resp.status, body, dict(resp.headers)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise ExternalError(f"{self.acc.describe()} unreachable: {type(e).__name__}: {e}") from None

    async def digest(self, path: str) -> tuple[int, str | None] | None:
        """(size, 'adler32:<hex>' or None) of a file, None when it does not exist; ExternalError otherwise."""
        status, _, headers = await self._request("HEAD", path, **{"Want-Digest": "adler32"})
        if status == 404:
            return None
        if status != 200:
            raise ExternalError(f"{self.acc.describe()} answered {status} to HEAD {path}"
                                + (" (its credentials were refused)" if status in (401, 403) else ""))
        from_header = headers.get("Digest", "")
        for part in from_header.split(","):
            name, _, value = part.strip().partition("=")
            if name.lower() == "adler32" and value:
                return int(headers.get("Content-Length") or 0), "adler32:" + value.strip().lower().zfill(8)
        return int(headers.get("Content-Length") or 0), None

    async def make_dirs(self, path: str) -> None:
        """MKCOL each directory from the endpoint's path down to `path` (a COPY does not make them); nothing above
        the endpoint's path is created: a missing parent there is the endpoint's refusal."""
        base = self.acc.endpoint.path
        if not (path + "/").startswith(base + "/"):
            raise ExternalError(f"{self.acc.describe()}: {path} is outside {base}")
        parts = [p for p in path[len(base):].split("/") if p]
        for i in range(len(parts) + 1):
            d = self.acc.endpoint.path_of(*parts[:i]) if i else base
            status, body, _ = await self._request("MKCOL", d)
            if status not in (200, 201, 405):  # 405: it exists already
                raise ExternalError(f"{self.acc.describe()} refused to make the directory {d}: {status} "
                                    f"{body.strip()[:200]}")

    async def children(self, directory: str) -> list[tuple[str, bool]]:
        """(path, is a directory) of what `directory` holds (PROPFIND, depth 1); [] when it does not exist."""
        status, body, _ = await self._request("PROPFIND", directory, Depth="1")
        if status == 404:
            return []
        if status != 207:
            raise ExternalError(f"{self.acc.describe()} answered {status} to PROPFIND {directory}: {body[:200]}")
        return _listing(body, directory)

    async def remove_tree(self, directory: str, problems: list[str]) -> None:
        """Delete `directory` and all below it (never above: every entry must lie below it); refusals go to
        `problems`, the walk goes on."""
        for path, is_dir in await self.children(directory):
            if is_dir:
                await self.remove_tree(path, problems)
            else:
                try:
                    await self.delete(path)
                except ExternalError as e:
                    problems.append(str(e))
        try:
            await self.delete(directory)
        except ExternalError as e:
            problems.append(str(e))

    async def delete(self, path: str) -> None:
        """Remove a file or an empty directory; gone already is fine."""
        status, body, _ = await self._request("DELETE", path)
        if status not in (200, 202, 204, 404):
            raise ExternalError(f"{self.acc.describe()} refused to delete {path}: {status} {body.strip()[:200]}")


def _listing(xml: str, directory: str) -> list[tuple[str, bool]]:
    """A PROPFIND multistatus' entries strictly below `directory` (its own entry and anything else left out)."""
    from urllib.parse import unquote, urlsplit
    from xml.etree import ElementTree

    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as e:
        raise ExternalError(f"unreadable PROPFIND answer for {directory}: {e}") from None
    out = []
    prefix = directory.rstrip("/") + "/"
    for response in root.iter("{DAV:}response"):
        href = response.findtext("{DAV:}href") or ""
        path = unquote(urlsplit(href).path).rstrip("/")
        if not path.startswith(prefix) or "/" in path[len(prefix):] or path[len(prefix):] in ("", ".", ".."):
            continue
        is_dir = response.find(".//{DAV:}resourcetype/{DAV:}collection") is not None
        out.append((path, is_dir))
    return out


async def missing_files(client: EndpointClient, directory: str, files: Sequence[Mapping[str, object]]) -> list[str]:
    """The set's files (name, size, checksum) not at `directory` with their size and adler32."""
    out = []
    for f in files:
        got = await client.digest(f"{directory}/{f['name']}")
        if got is None or got[0] != f["size"] or (f.get("checksum") and got[1] != f["checksum"]):
            out.append(str(f["name"]))
    return out


async def verify_upload(client: EndpointClient, directory: str, files: Sequence[Mapping[str, object]]) -> None:
    """After the upload: every file there with the set's size and adler32, else ExternalError naming which."""
    for f in files:
        got = await client.digest(f"{directory}/{f['name']}")
        if got is None:
            raise ExternalError(f"{client.acc.describe()}: {directory}/{f['name']} is missing after the upload")
        size, checksum = got
        if size != f["size"]:
            raise ExternalError(f"{client.acc.describe()}: {directory}/{f['name']} has {size} of {f['size']} bytes")
        if f.get("checksum") and checksum != f["checksum"]:
            raise ExternalError(f"{client.acc.describe()}: {directory}/{f['name']} has adler32 {checksum}, the set "
                                f"{f['checksum']}")


async def remove_uploads(acc: Access, bench_dir: str, ca_file: str | None = None) -> list[str]:
    """Remove a benchmark's directory `<path>/<bench_dir>` from an endpoint, depth first (what it holds is listed
    with PROPFIND; only entries below it are touched). The problems, one line each (empty: all removed)."""
    problems: list[str] = []
    async with EndpointClient(acc, ca_file) as client:
        try:
            await client.remove_tree(acc.endpoint.path_of(bench_dir), problems)
        except ExternalError as e:
            problems.append(str(e))
    return problems
