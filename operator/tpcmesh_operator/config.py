"""Operator settings: one typed object from the environment (`TPCMESH_OPERATOR_<NAME>`), failing fast."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

from .run.outbox import MAX_STATUS_BYTES, STATUS_BUDGET_BYTES


class SettingsError(ValueError):
    pass


@dataclass(frozen=True)
class Settings:
    namespaces: str = ""  # comma-separated; empty: cluster-wide
    agent_namespace: str = ""  # where agent pods live; empty: the benchmark's namespace
    # The operator's own namespace: its Secrets (the CA, the token signing keys) and the CA bundle it reads itself;
    # empty: agent_namespace (the chart sets both; they differ when the agents run apart, e.g. for Pod Security).
    namespace: str = ""
    agent_selector: str = "app.kubernetes.io/name=tpcmesh,app.kubernetes.io/component=agent"
    agent_token_file: str = "/var/run/tpcmesh/agent-token/token"
    ca_file: str = "/var/run/tpcmesh/ca/ca.crt"
    timer_interval: float = 30.0  # seconds between schedule checks
    loss_probe_interval: float = 30.0  # seconds between the loss probe's passes (spec.lossProbe: configure, collect)
    poll_interval: float = 2.0  # seconds between polls of a running test
    unreachable_grace: float = 30.0
    delivery_max_seconds: float = 60.0
    deletion_delivery_seconds: float = 60.0  # a deleted run's last try to deliver its outbox
    cleanup_retry_seconds: float = 30.0  # between attempts to remove a deleted benchmark's files from an endpoint
    status_budget_bytes: int = STATUS_BUDGET_BYTES  # a run's status; no test starts while it might not fit
    metrics_port: int = 8080  # 0: no metrics server
    metrics_address: str = "0.0.0.0"
    peering: str = "tpcmesh"  # kopf peering name (one active operator); empty: standalone
    # Where benchmarks without spec.results deliver (the chart sets its own dashboard); empty: they must name one.
    results_url: str = ""
    results_token_file: str = ""  # the token for results_url, re-read after a 401
    # The built-in token issuer (credentials/tokens/incluster.py): its URL as the agents reach it (the chart: the
    # operator's
    # Service); empty: no issuer here, benchmarks default to x509.
    token_issuer: str = ""
    token_issuer_port: int = 8443
    token_keys_secret: str = "tpcmesh-token-keys"  # in namespace
    token_issuer_tls_dir: str = ""  # tls.crt/tls.key (cert-manager); empty: signed with the agents' CA
    token_rotate_seconds: int = 24 * 3600
    # An external issuer instead (credentials/tokens/external.py): token_issuer is then the site's issuer, this
    # directory holds
    # the operator's OAuth client credentials (files client_id, client_secret), and token_issuer_ca_file the CA of
    # the issuer's HTTPS endpoint when no public CA signed it.
    token_client_dir: str = ""
    token_issuer_ca_file: str = ""
    # The cluster every run and measurement is delivered as (federation: one dashboard, several clusters); empty:
    # the UID of the kube-system namespace, read at start-up (cluster.py).
    cluster_name: str = ""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        values: dict[str, object] = {}
        for f in fields(cls):
            key = "TPCMESH_OPERATOR_" + f.name.upper()
            if key not in env:
                continue
            raw = env[key]
            try:
                values[f.name] = float(raw) if f.type == "float" else int(raw) if f.type == "int" else raw
            except ValueError:
                raise SettingsError(f"{key}: expected a {f.type}, got {raw!r}") from None
        s = cls(**values)  # type: ignore[arg-type]
        if s.timer_interval <= 0 or s.poll_interval <= 0 or s.loss_probe_interval <= 0:
            raise SettingsError("TPCMESH_OPERATOR_TIMER_INTERVAL, _POLL_INTERVAL and _LOSS_PROBE_INTERVAL must be "
                                "positive")
        if not 0 < s.status_budget_bytes < MAX_STATUS_BYTES:
            raise SettingsError(f"TPCMESH_OPERATOR_STATUS_BUDGET_BYTES: {s.status_budget_bytes} must be positive and "
                                f"below {MAX_STATUS_BYTES}, where a status starts to lose its per-file details")
        if s.token_issuer and not (s.token_issuer.startswith("https://") and not s.token_issuer.endswith("/")):
            raise SettingsError(f"TPCMESH_OPERATOR_TOKEN_ISSUER: expected https://host[:port] without a trailing "
                                f"slash, got {s.token_issuer!r}")
        if s.token_issuer and not (s.namespace or s.agent_namespace):
            raise SettingsError("TPCMESH_OPERATOR_TOKEN_ISSUER needs TPCMESH_OPERATOR_NAMESPACE (where the signing "
                                "keys' Secret lives; TPCMESH_OPERATOR_AGENT_NAMESPACE when it is unset)")
        if s.results_url and not s.results_url.startswith(("http://", "https://")):
            raise SettingsError(f"TPCMESH_OPERATOR_RESULTS_URL: expected an http(s) URL, got {s.results_url!r}")
        return s

    def agent_token(self) -> str:
        p = Path(self.agent_token_file)
        try:
            return p.read_text().strip()
        except OSError as e:
            raise SettingsError(f"TPCMESH_OPERATOR_AGENT_TOKEN_FILE: cannot read {p}: {e.strerror}") from None

    def ca(self) -> str | None:
        return self.ca_file if self.ca_file and Path(self.ca_file).exists() else None

    def results_token(self) -> str | None:
        """The default results endpoint's token; None when there is no file (yet): delivery then waits for it."""
        if not self.results_token_file:
            return None
        try:
            return Path(self.results_token_file).read_text().strip() or None
        except OSError:
            return None
