"""The built-in issuer inside a cluster: its keys in a Secret, its HTTPS endpoint behind the operator's Service (or,
with ``use_external``, a site's own issuer the operator asks for each token: credentials/tokens/external.py).

Every operator replica serves the discovery document and the JWKS (the Service may route a validator to any of them);
only the active one signs, so only it rotates, and it stores the rotated keyring in the Secret before signing with it.
Standby replicas reload the Secret now and then, so the JWKS they serve follows. The TLS certificate is signed by the
agents' CA (certificates mode ``csr``: the operator holds it) or mounted from a cert-manager Certificate
(``token_issuer_tls_dir``), so the agents' validators trust it through the CA bundle they already have.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .. import pki
from .external import ExternalIssuer
from .issuer import TokenIssuer
from .keyring import Keyring, dump, load
from .minting import Minter
from .server import IssuerServer

log = logging.getLogger(__name__)

KEYRING_KEY = "keyring.json"
RELOAD_SECONDS = 60.0


@dataclass(frozen=True)
class IssuerConfig:
    url: str  # the issuer as validators reach it: https://<operator service>.<namespace>.svc:<port>
    port: int
    namespace: str
    keys_secret: str
    rotate_every: int
    tls_dir: str = ""  # tls.crt + tls.key (cert-manager); empty: a certificate signed with the agents' CA

    def host_names(self) -> list[str]:
        """The names the certificate must carry: the URL's host and its shorter in-cluster forms."""
        host = urlsplit(self.url).hostname or ""
        names = [host]
        if host.endswith(".svc"):
            service = host.split(".")[0]
            names += [service, f"{service}.{self.namespace}", f"{host}.cluster.local"]
        return names


class KeySecret:
    """The keyring in a Secret: created with a fresh key when missing, replaced with optimistic concurrency."""

    def __init__(self, core: Any, namespace: str, name: str) -> None:
        self.core, self.namespace, self.name = core, namespace, name
        self.version = ""

    def load_or_create(self, now: int) -> Keyring:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        try:
            return self._read()
        except ApiException as e:
            if e.status != 404:
                raise
        keyring = Keyring.fresh(now)
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace,
                                         labels={"app.kubernetes.io/part-of": "tpcmesh"}),
            type="Opaque", data={KEYRING_KEY: base64.b64encode(dump(keyring).encode()).decode()})
        try:
            created = self.core.create_namespaced_secret(self.namespace, body)
        except ApiException as e:
            if e.status != 409:
                raise
            return self._read()  # another replica created it first: use its keys
        self.version = created.metadata.resource_version
        log.info("Created token signing keys in Secret %s/%s", self.namespace, self.name)
        return keyring

    def _read(self) -> Keyring:
        sec = self.core.read_namespaced_secret(self.name, self.namespace)
        raw = (sec.data or {}).get(KEYRING_KEY)
        if not raw:
            raise ValueError(f"Secret {self.namespace}/{self.name} has no key {KEYRING_KEY!r}: delete it and the "
                             f"operator makes a new one (tokens signed before then stop validating)")
        self.version = sec.metadata.resource_version
        return load(base64.b64decode(raw).decode())

    def changed(self) -> Keyring | None:
        """The stored keyring when another replica replaced it since the last read; None when unchanged."""
        before = self.version
        keyring = self._read()
        return keyring if self.version != before else None

    def save(self, keyring: Keyring) -> None:
        from kubernetes import client

        body = client.V1Secret(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace, resource_version=self.version,
                                         labels={"app.kubernetes.io/part-of": "tpcmesh"}),
            type="Opaque", data={KEYRING_KEY: base64.b64encode(dump(keyring).encode()).decode()})
        saved = self.core.replace_namespaced_secret(self.name, self.namespace, body)
        self.version = saved.metadata.resource_version
        log.info("Stored rotated token signing keys in Secret %s/%s (%d keys)", self.namespace, self.name,
                 len(keyring.keys))


@dataclass
class RunningIssuer:
    issuer: TokenIssuer
    server: IssuerServer
    stop_reload: threading.Event

    def stop(self) -> None:
        self.stop_reload.set()
        self.server.stop()


def _tls_files(cfg: IssuerConfig, ca: pki.KeyPair | None, workdir: Path) -> tuple[Path, Path]:
    if cfg.tls_dir:
        return Path(cfg.tls_dir) / "tls.crt", Path(cfg.tls_dir) / "tls.key"
    if ca is None:
        raise ValueError("the token issuer needs a TLS certificate: the operator holds no CA (certificates mode is "
                         "not csr) and TPCMESH_OPERATOR_TOKEN_ISSUER_TLS_DIR is empty")
    pair = pki.issue_host_cert(ca, cfg.host_names()[0], cfg.host_names()[1:], lifetime=dt.timedelta(days=365))
    cert, key = workdir / "issuer.crt", workdir / "issuer.key"
    pair.write(cert, key)
    return cert, key


def start(cfg: IssuerConfig, core: Any, ca: pki.KeyPair | None) -> RunningIssuer:
    """Load (or create) the keys, serve the JWKS on ``cfg.port`` and keep standby copies in step."""
    store = KeySecret(core, cfg.namespace, cfg.keys_secret)
    keyring = store.load_or_create(int(time.time()))
    issuer = TokenIssuer(cfg.url, keyring=keyring, rotate_every=cfg.rotate_every, on_rotate=store.save)
    workdir = Path(tempfile.mkdtemp(prefix="tpcmesh-issuer-"))
    cert, key = _tls_files(cfg, ca, workdir)
    server = IssuerServer("0.0.0.0", cfg.port, cert, key).serve(issuer)
    stop = threading.Event()

    def reload() -> None:
        while not stop.wait(RELOAD_SECONDS):
            try:
                if (newer := store.changed()) is not None:
                    issuer.adopt(newer)
                    log.info("Reloaded token signing keys from Secret %s/%s", cfg.namespace, cfg.keys_secret)
            except Exception as e:  # noqa: BLE001 - keep serving the keys we have; say why the reload failed
                log.warning("Could not reload token signing keys from Secret %s/%s: %s", cfg.namespace,
                            cfg.keys_secret, e)

    threading.Thread(target=reload, name="tpcmesh-issuer-keys", daemon=True).start()
    log.info("Token issuer %s serves its keys (kid %s) on port %d", cfg.url, issuer.active_kid(), server.port)
    return RunningIssuer(issuer, server, stop)


_RUNNING: dict[str, RunningIssuer] = {}
_EXTERNAL: dict[str, ExternalIssuer] = {}


def current() -> Minter | None:
    """What mints this operator's tokens: the built-in issuer it runs, a site's external issuer, or None (token
    mode is off here)."""
    running = _RUNNING.get("issuer")
    return running.issuer if running else _EXTERNAL.get("issuer")


def use_external(url: str, client_dir: str, ca_file: str = "") -> ExternalIssuer:
    """Token mode with a site's own issuer: the operator asks it for each token (client credentials from
    ``client_dir``: files client_id and client_secret, the chart's Secret mounted)."""
    if "issuer" not in _EXTERNAL:
        d = Path(client_dir)
        try:
            client_id, secret = ((d / n).read_text().strip() for n in ("client_id", "client_secret"))
        except OSError as e:
            raise ValueError(f"token client credentials for {url}: {e} (the Secret named by the chart's "
                             f"tokens.external.clientSecret needs keys client_id and client_secret)") from None
        _EXTERNAL["issuer"] = ExternalIssuer(url, client_id, secret, ca_file or None)
        log.info("Token mode with the external issuer %s (client %s)", url, client_id)
    return _EXTERNAL["issuer"]


def start_once(cfg: IssuerConfig, core: Any, ca: pki.KeyPair | None) -> TokenIssuer:
    if "issuer" not in _RUNNING:
        _RUNNING["issuer"] = start(cfg, core, ca)
    return _RUNNING["issuer"].issuer


def stop() -> None:
    if (running := _RUNNING.pop("issuer", None)) is not None:
        running.stop()
    if (external := _EXTERNAL.pop("issuer", None)) is not None:
        external.close()
