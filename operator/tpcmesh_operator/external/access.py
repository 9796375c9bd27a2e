"""The operator's own I/O with external endpoints (spec.externalEndpoints): reading their credentials, asking a
copy's size and adler32, and removing what a benchmark put there. The copies themselves are third-party copies the
agents run (run/executor.py asks them). davs/https endpoints are reached over HTTPS (aiohttp, WebDAV), root:// endpoints
with Debian's xrdfs (xrootd-client; the site's token in a private file, sent with the ztn protocol over TLS),
gsiftp:// endpoints with gfal2 and its GridFTP plugin under Debian's python3 (external/gfal_ops.py; the site's X509
proxy or
certificate in private files).

Every path comes from `ExternalEndpoint.path_of`, so nothing outside an endpoint's `path` is ever touched.
Credentials (a Secret's `token`, `ca.crt`) are never logged and never put in a status or a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from .endpoints import ExternalEndpoint

log = logging.getLogger(__name__)

HTTP_SCHEMES = ("davs", "https")
Client = Any  # EndpointClient | RootEndpointClient: the same methods
# what each scheme's credentials Secret must hold (a key of externals.SECRET_KEYS)
NEEDS = {"davs": "token", "https": "token", "root": "token", "gsiftp": "x509"}
DEBIAN_PYTHON = "/usr/bin/python3"  # the interpreter Debian's python3-gfal2 is built for


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
    token: str | None = field(default=None, repr=False)
    ca_pem: str | None = None  # the endpoint's CA (Secret key ca.crt), else the system's trust
    proxy: str | None = field(default=None, repr=False)  # an X509 proxy (Secret key proxy), gsiftp
    cert: str | None = field(default=None, repr=False)  # or a certificate and key (tls.crt, tls.key), gsiftp
    key: str | None = field(default=None, repr=False)

    def x509(self) -> dict[str, str] | None:
        """The X509 credential as an agent's request carries it (`x509`), None when there is none."""
        if self.proxy:
            return {"proxy": self.proxy}
        if self.cert and self.key:
            return {"cert": self.cert, "key": self.key}
        return None

    def x509_env(self, directory: Path) -> dict[str, str]:
        """The credential written to private files in `directory`, as Globus's environment names them."""
        env = {}
        if self.proxy:
            env["X509_USER_PROXY"] = _private(directory / "proxy.pem", self.proxy)
        elif self.cert and self.key:
            env["X509_USER_CERT"] = _private(directory / "usercert.pem", self.cert)
            env["X509_USER_KEY"] = _private(directory / "userkey.pem", self.key)
        return env

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
    if NEEDS.get(endpoint.scheme) == "token" and token is None:
        how = "over ztn; X509 (gsi) over root:// is not supported yet" if endpoint.scheme == "root" else \
            "in the Authorization header"
        raise ExternalError(f"external endpoint {endpoint.name}: Secret {endpoint.credentials} has no key token "
                            f"(a bearer token for {endpoint.scheme}://, sent {how})")
    proxy, cert, key = (data.get(k) or None for k in ("proxy", "tls.crt", "tls.key"))
    if NEEDS.get(endpoint.scheme) == "x509" and not proxy and not (cert and key):
        raise ExternalError(f"external endpoint {endpoint.name}: Secret {endpoint.credentials} has neither a key proxy "
                            f"(an X509 proxy) nor tls.crt and tls.key (a certificate and key) for {endpoint.scheme}://")
    return Access(endpoint, token, data.get("ca.crt") or None, proxy, cert, key)


def endpoint_client(acc: Access, ca_file: str | None = None) -> Client:
    """The operator's client for the endpoint's scheme (same methods for each)."""
    if acc.endpoint.scheme == "root":
        return RootEndpointClient(acc, ca_file)
    if acc.endpoint.scheme == "gsiftp":
        return GridftpEndpointClient(acc, ca_file)
    return EndpointClient(acc, ca_file)


def _private(path: Path, text: str) -> str:
    """A file only this user reads (a credential), its path."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    return str(path)


def _one_line_dn(cert_pem: bytes) -> str:
    """A certificate's subject in OpenSSL's one-line form (/O=…/CN=…), as a Globus signing policy names a CA."""
    from cryptography import x509

    subject = x509.load_pem_x509_certificate(cert_pem).subject
    return "".join(f"/{a.rfc4514_attribute_name}="
                   f"{a.value if isinstance(a.value, str) else a.value.decode(errors='replace')}" for a in subject)


def write_trust_dir(acc: Access, ca_file: str | None, directory: Path, signing_policy: bool = False) -> Path | None:
    """The endpoint's CA (Secret key ca.crt) and the operator's CA file as an OpenSSL CA directory (<hash>.0), with
    Globus signing policies for GridFTP; None when there is neither."""
    from ..credentials import pki

    cas = [acc.ca_pem.encode()] if acc.ca_pem else []
    if ca_file:
        cas.append(Path(ca_file).read_bytes())
    certs = [b.strip() + b"\n-----END CERTIFICATE-----\n" for pem in cas
             for b in pem.split(b"-----END CERTIFICATE-----") if b"BEGIN CERTIFICATE" in b]
    if not certs:
        return None
    directory.mkdir()
    for cert in certs:
        name = pki.openssl_subject_hash_name(cert)
        (directory / name).write_bytes(cert)
        if signing_policy:
            (directory / name.replace(".0", ".signing_policy")).write_text(
                f"access_id_CA X509 '{_one_line_dn(cert)}'\npos_rights globus CA:sign\ncond_subjects globus '\"*\"'\n")
    return directory


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
        await remove_tree(self, directory, problems)

    async def remove_dir(self, path: str) -> None:
        await self.delete(path)

    async def delete(self, path: str) -> None:
        """Remove a file or an empty directory; gone already is fine."""
        status, body, _ = await self._request("DELETE", path)
        if status not in (200, 202, 204, 404):
            raise ExternalError(f"{self.acc.describe()} refused to delete {path}: {status} {body.strip()[:200]}")


async def remove_tree(client: Client, directory: str, problems: list[str]) -> None:
    """Delete `directory` and all below it (never above: every entry listed lies below it); refusals go to
    `problems`, the walk goes on."""
    for path, is_dir in await client.children(directory):
        if is_dir:
            await remove_tree(client, path, problems)
        else:
            try:
                await client.delete(path)
            except ExternalError as e:
                problems.append(str(e))
    try:
        await client.remove_dir(directory)
    except ExternalError as e:
        problems.append(str(e))


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


XRDFS_ENV = {"XRD_CONNECTIONRETRY": "1", "XRD_CONNECTIONWINDOW": "10", "XRD_REQUESTTIMEOUT": "60"}
XRDFS_SECONDS = 120
_XRD_ERROR = re.compile(r"\[(\d+)\]")


class RootEndpointClient:
    """root:// to one endpoint with Debian's xrdfs: a file's size and adler32, directories, deletions. The token goes
    in a file only this process's user reads (BEARER_TOKEN_FILE), never on a command line; the endpoint is verified
    with its CA (Secret key ca.crt) and the operator's CA file, as an OpenSSL CA directory (X509_CERT_DIR)."""

    def __init__(self, acc: Access, ca_file: str | None = None) -> None:
        if shutil.which("xrdfs") is None:
            raise ExternalError(f"{acc.describe()}: xrdfs is not installed where the operator runs (Debian package "
                                "xrootd-client), so root:// endpoints cannot be prepared or cleaned up here")
        self.acc = acc
        self._ca_file = ca_file
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._env: dict[str, str] = {}

    @property
    def server(self) -> str:
        return self.acc.endpoint.url

    async def __aenter__(self) -> RootEndpointClient:
        self._dir = tempfile.TemporaryDirectory(prefix="tpcmesh-root-")
        self._env = await asyncio.to_thread(self._prepare, Path(self._dir.name))
        return self

    def _prepare(self, d: Path) -> dict[str, str]:
        env = dict(XRDFS_ENV)
        trust = write_trust_dir(self.acc, self._ca_file, d / "ca-dir")
        if trust is not None:
            env["X509_CERT_DIR"] = str(trust)
        if self.acc.token:
            env["BEARER_TOKEN_FILE"] = _private(d / "token", self.acc.token)
        return env

    async def __aexit__(self, *exc: object) -> None:
        if self._dir is not None:
            self._dir.cleanup()

    async def _xrdfs(self, *args: str) -> tuple[int, str, str]:
        rc, out, err = await self._xrdfs_once(*args)
        if rc == -signal.SIGSEGV:  # XRootD 5.5's client may crash setting up TLS (xrootd/xrootd issue 2164)
            log.warning("xrdfs %s died of SIGSEGV (a known XRootD 5.5 client crash under TLS); trying it again once",
                        args[0])
            rc, out, err = await self._xrdfs_once(*args)
        if rc != 0 and ("Connection error" in err or "Connection refused" in err or "Socket error" in err or
                        "Unable to resolve" in err):
            raise ExternalError(f"{self.acc.describe()} unreachable: {_last_line(err)}")
        return rc, out, err

    async def _xrdfs_once(self, *args: str) -> tuple[int, str, str]:
        try:
            proc = await asyncio.create_subprocess_exec(
                "xrdfs", self.server, *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env={**os.environ, **self._env}, start_new_session=True)
        except OSError as e:
            raise ExternalError(f"{self.acc.describe()}: xrdfs could not run: {e}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), XRDFS_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise ExternalError(f"{self.acc.describe()} unreachable: xrdfs {args[0]} took over {XRDFS_SECONDS} s"
                                ) from None
        text = err.decode("utf-8", "replace").replace("\x00", "").strip()
        if proc.returncode is not None and proc.returncode < 0 and not text:
            text = f"xrdfs died of signal {-proc.returncode}"
        return proc.returncode or 0, out.decode("utf-8", "replace"), text

    def _refused(self, what: str, err: str) -> ExternalError:
        code = _XRD_ERROR.search(err)
        why = " (its authorization refused it: the token's audience or scopes do not cover this path)" if code and \
            code.group(1) in ("3010", "3006") and "permission denied" in err.lower() else ""
        return ExternalError(f"{self.acc.describe()} refused {what}: {_last_line(err)}{why}")

    async def digest(self, path: str) -> tuple[int, str | None] | None:
        """(size, 'adler32:<hex>' or None) of a file, None when it does not exist; ExternalError otherwise."""
        rc, out, err = await self._xrdfs("stat", path)
        if rc != 0:
            if "[3011]" in err or "no such file" in err.lower():
                return None
            raise self._refused(f"stat {path}", err)
        m = re.search(r"^Size:\s+(\d+)", out, re.MULTILINE)
        size = int(m.group(1)) if m else 0
        rc, out, err = await self._xrdfs("query", "checksum", path)
        c = re.search(r"^adler32\s+([0-9a-fA-F]{1,8})\s*$", out, re.MULTILINE) if rc == 0 else None
        return size, ("adler32:" + c.group(1).lower().zfill(8)) if c else None

    async def make_dirs(self, path: str) -> None:
        """`path` and its parents below the endpoint's path (`xrdfs mkdir -p`); the endpoint's path itself must be
        there or creatable: a refusal there is the endpoint's."""
        base = self.acc.endpoint.path
        if not (path + "/").startswith(base + "/"):
            raise ExternalError(f"{self.acc.describe()}: {path} is outside {base}")
        rc, _, err = await self._xrdfs("mkdir", "-p", path)
        if rc != 0:
            raise self._refused(f"to make the directory {path}", err)

    async def children(self, directory: str) -> list[tuple[str, bool]]:
        """(path, is a directory) of what `directory` holds; [] when it does not exist."""
        rc, out, err = await self._xrdfs("ls", "-l", directory)
        if rc != 0:
            if "[3011]" in err or "no such file" in err.lower():
                return []
            raise self._refused(f"to list {directory}", err)
        prefix = directory.rstrip("/") + "/"
        found = []
        for line in out.splitlines():
            fields = line.split()
            if len(fields) < 2 or not fields[-1].startswith(prefix):
                continue
            name = fields[-1][len(prefix):]
            if not name or "/" in name or name in (".", ".."):
                continue
            found.append((fields[-1], fields[0].startswith("d")))
        return found

    async def remove_tree(self, directory: str, problems: list[str]) -> None:
        await remove_tree(self, directory, problems)

    async def delete(self, path: str) -> None:
        await self._delete(path, "rm")

    async def remove_dir(self, path: str) -> None:
        await self._delete(path, "rmdir")

    async def _delete(self, path: str, how: str) -> None:
        rc, _, err = await self._xrdfs(how, path)
        if rc != 0 and "[3011]" not in err and "no such file" not in err.lower():
            raise self._refused(f"to delete {path}", err)


class GridftpEndpointClient:
    """gsiftp:// to one endpoint through gfal2 (its GridFTP plugin) under Debian's python3 (external/gfal_ops.py, one
    process
    an operation): a file's size and adler32 (the server's CKSM), directories, deletions (which globus-url-copy cannot
    do). The credential goes in private files (X509_USER_PROXY or X509_USER_CERT/KEY), never on a command line."""

    SECONDS = 120

    def __init__(self, acc: Access, ca_file: str | None = None) -> None:
        if not Path(DEBIAN_PYTHON).exists():
            raise ExternalError(f"{acc.describe()}: {DEBIAN_PYTHON} is missing where the operator runs (Debian python3 "
                                "with python3-gfal2 and gfal2-plugin-gridftp), so gsiftp:// endpoints cannot be "
                                "prepared or cleaned up here")
        self.acc = acc
        self._ca_file = ca_file
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._env: dict[str, str] = {}

    async def __aenter__(self) -> GridftpEndpointClient:
        self._dir = tempfile.TemporaryDirectory(prefix="tpcmesh-gsiftp-")
        self._env = await asyncio.to_thread(self._prepare, Path(self._dir.name))
        return self

    def _prepare(self, d: Path) -> dict[str, str]:
        env = self.acc.x509_env(d)
        trust = write_trust_dir(self.acc, self._ca_file, d / "ca-dir", signing_policy=True)
        if trust is not None:
            env["X509_CERT_DIR"] = str(trust)
        return env

    async def __aexit__(self, *exc: object) -> None:
        if self._dir is not None:
            self._dir.cleanup()

    def url(self, path: str) -> str:
        return f"{self.acc.endpoint.url}{path}"

    async def _op(self, op: str, path: str) -> dict[str, Any]:
        """One gfal2 operation; unreachable raises ExternalError, the rest is the caller's to judge."""
        import json

        script = Path(__file__).with_name("gfal_ops.py")
        try:
            proc = await asyncio.create_subprocess_exec(
                DEBIAN_PYTHON, str(script), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env={**os.environ, **self._env}, start_new_session=True)
        except OSError as e:
            raise ExternalError(f"{self.acc.describe()}: gfal2 could not run: {e}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(json.dumps({"op": op, "url": self.url(path)}).encode()),
                                              self.SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise ExternalError(f"{self.acc.describe()} unreachable: {op} took over {self.SECONDS} s") from None
        try:
            answer: dict[str, Any] = json.loads(out)
        except ValueError:
            raise ExternalError(f"{self.acc.describe()}: gfal2 failed on {op} {path}: "
                                f"{_last_line(err.decode('utf-8', 'replace'))}") from None
        why = answer.get("error") or ""
        if not answer.get("ok") and (answer.get("code") in (111, 113, 110) or "Unable to connect" in why):
            raise ExternalError(f"{self.acc.describe()} unreachable: {why[:300]}")
        return answer

    def _refused(self, what: str, answer: Mapping[str, Any]) -> ExternalError:
        why = str(answer.get("error") or "no message")
        hint = " (its credentials were refused)" if "530" in why or "Authentication" in why else ""
        return ExternalError(f"{self.acc.describe()} refused {what}: {why[:400]}{hint}")

    async def digest(self, path: str) -> tuple[int, str | None] | None:
        st = await self._op("stat", path)
        if not st["ok"]:
            if st.get("code") == 2:
                return None
            raise self._refused(f"stat {path}", st)
        ck = await self._op("checksum", path)
        value = str(ck.get("checksum") or "") if ck["ok"] else ""
        return int(st["size"]), ("adler32:" + value.lower().zfill(8)) if value else None

    async def make_dirs(self, path: str) -> None:
        base = self.acc.endpoint.path
        if not (path + "/").startswith(base + "/"):
            raise ExternalError(f"{self.acc.describe()}: {path} is outside {base}")
        answer = await self._op("mkdir", path)
        if not answer["ok"] and answer.get("code") != 17:  # 17: it exists already
            raise self._refused(f"to make the directory {path}", answer)

    async def children(self, directory: str) -> list[tuple[str, bool]]:
        answer = await self._op("list", directory)
        if not answer["ok"]:
            if answer.get("code") == 2:
                return []
            raise self._refused(f"to list {directory}", answer)
        return [(f"{directory.rstrip('/')}/{e['name']}", bool(e["is_dir"])) for e in answer["entries"]
                if _PLAIN.match(str(e["name"])) and e["name"] not in (".", "..")]

    async def remove_tree(self, directory: str, problems: list[str]) -> None:
        await remove_tree(self, directory, problems)

    async def delete(self, path: str) -> None:
        await self._remove("unlink", path)

    async def remove_dir(self, path: str) -> None:
        await self._remove("rmdir", path)

    async def _remove(self, op: str, path: str) -> None:
        answer = await self._op(op, path)
        if not answer["ok"] and answer.get("code") != 2:
            raise self._refused(f"to delete {path}", answer)


_PLAIN = re.compile(r"^[A-Za-z0-9._-]{1,255}$")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no message")[:300]


async def missing_files(client: Client, directory: str, files: Sequence[Mapping[str, object]]) -> list[str]:
    """The set's files (name, size, checksum) not at `directory` with their size and adler32."""
    out = []
    for f in files:
        got = await client.digest(f"{directory}/{f['name']}")
        if got is None or got[0] != f["size"] or (f.get("checksum") and got[1] != f["checksum"]):
            out.append(str(f["name"]))
    return out


async def verify_upload(client: Client, directory: str, files: Sequence[Mapping[str, object]]) -> None:
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
    try:
        client = endpoint_client(acc, ca_file)
    except ExternalError as e:
        return [str(e)]
    async with client:
        try:
            await client.remove_tree(acc.endpoint.path_of(bench_dir), problems)
        except ExternalError as e:
            problems.append(str(e))
    return problems
