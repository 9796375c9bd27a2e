"""kopf handler registration, and nothing else: the work is in controller.py."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
from typing import Any

import kopf
from prometheus_client import start_http_server

from . import cluster, controller, kube
from .config import Settings
from .credentials import signer
from .credentials.tokens import incluster
from .external import cleanup as external_cleanup
from .kube import BENCHMARKS, GROUP, RUNS, VERSION
from .plan.spec import BenchmarkSpec
from .run import driver as rundriver
from .run import lossprobe

# Read once for what kopf fixes at import (timer interval) and at start-up; handlers read Settings.from_env() when
# they run, so several operators started in one process (the tests' KopfRunner) each get their own environment.
SETTINGS = Settings.from_env()


def _load_kube_config() -> None:
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))


def _ensure_peering(name: str, namespaces: list[str], logger: logging.Logger) -> None:
    """Create the KopfPeering object kopf needs for peering (best effort: the chart may create it instead)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    for ns in namespaces:
        body = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": name}}
        try:
            client.CustomObjectsApi().create_namespaced_custom_object("kopf.dev", "v1", ns, "kopfpeerings", body)
            logger.info("Created KopfPeering %s/%s", ns, name)
        except ApiException as e:
            if e.status not in (409, 403, 404):
                raise


def _check_crds(logger: logging.Logger) -> None:
    """Our kinds must be served when we start: kopf does not watch for CRDs installed later (no scanning, so the
    operator needs no cluster-wide rights on CRDs or namespaces). Failing here restarts the pod until they are."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        served = {r.name for r in client.CustomObjectsApi().get_api_resources(GROUP, VERSION).resources}
    except ApiException as e:
        served, why = set(), f"{e.status} {e.reason}"
    missing = sorted({BENCHMARKS, RUNS} - served)
    if missing:
        raise kopf.PermanentError(f"{GROUP}/{VERSION} does not serve {', '.join(missing)}: install the CRDs "
                                  f"(manifests/crds/) before the operator" + (f" ({why})" if not served else ""))
    logger.info("Found the CRDs of %s/%s: %s, %s", GROUP, VERSION, BENCHMARKS, RUNS)


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """In-cluster, else $KUBECONFIG read now (not when the kubernetes package was imported)."""
    from kubernetes import client

    _load_kube_config()
    cfg = client.Configuration.get_default_copy()
    scheme: str | None = None
    token: str | None = None
    auth: str | None = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    if auth:
        scheme, _, token = auth.partition(" ") if " " in auth else ("Bearer", "", auth)  # type: ignore[assignment]
    return kopf.ConnectionInfo(
        server=cfg.host, ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl, scheme=scheme, token=token,
        certificate_path=cfg.cert_file, private_key_path=cfg.key_file,
    )


# The agents' CA (credentials/signer.py): registered first, as before, so the CA is loaded before the others start.
if signer.SETTINGS.signer_name:

    @kopf.on.startup()  # type: ignore[arg-type]
    def start_ca(logger: logging.Logger, **_: Any) -> None:
        signer.start_ca(logger)

    @kopf.on.event("certificates.k8s.io", "v1", "certificatesigningrequests",
                   when=lambda spec, **_: spec.get("signerName") == signer.SETTINGS.signer_name)
    def csr_event(name: str, type: str | None, **_: Any) -> None:  # noqa: A002 - kopf's keyword
        if type != "DELETED":
            signer.handle_csr(name)


@kopf.on.startup()  # type: ignore[arg-type]
def configure(settings: kopf.OperatorSettings, logger: logging.Logger, **_: Any) -> None:
    _load_kube_config()
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="tpcmesh.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="tpcmesh.io")
    settings.persistence.finalizer = "tpcmesh.io/operator"
    settings.posting.level = logging.INFO
    settings.peering.name = SETTINGS.peering or "tpcmesh"
    settings.peering.standalone = not SETTINGS.peering
    settings.peering.mandatory = False
    settings.scanning.disabled = True  # named namespaces, CRDs installed first: no cluster-wide observation
    _check_crds(logger)
    try:
        logger.info("Delivering runs and measurements as cluster %s", cluster.cluster_name(Settings.from_env()))
    except cluster.ClusterNameUnknown as e:
        raise kopf.PermanentError(str(e)) from None
    if SETTINGS.peering:
        _ensure_peering(SETTINGS.peering, [n for n in SETTINGS.namespaces.split(",") if n], logger)
    if SETTINGS.metrics_port:
        start_http_server(SETTINGS.metrics_port, SETTINGS.metrics_address)
        logger.info("Started metrics on %s:%d", SETTINGS.metrics_address, SETTINGS.metrics_port)


@kopf.on.startup()  # type: ignore[arg-type]
async def start_token_issuer(logger: logging.Logger, **_: Any) -> None:
    """Token mode: serve the built-in issuer's JWKS (every replica) and sign with it (the active one), or ask the
    site's external issuer for each token."""
    s = SETTINGS
    if not s.token_issuer:
        return
    if s.token_client_dir:
        await asyncio.to_thread(incluster.use_external, s.token_issuer, s.token_client_dir, s.token_issuer_ca_file)
        return
    cfg = incluster.IssuerConfig(s.token_issuer, s.token_issuer_port, s.namespace or s.agent_namespace,
                                 s.token_keys_secret, s.token_rotate_seconds, s.token_issuer_tls_dir)
    ca = None
    if not s.token_issuer_tls_dir and signer.SETTINGS.signer_name and signer.SETTINGS.sign:
        ca = await asyncio.to_thread(signer.ensure_ca, kube.core().api_client, signer.SETTINGS)
    await asyncio.to_thread(incluster.start_once, cfg, kube.core(), ca)


@kopf.on.cleanup()
def stop_token_issuer(**_: Any) -> None:
    incluster.stop()


@kopf.on.create(GROUP, VERSION, BENCHMARKS)
@kopf.on.update(GROUP, VERSION, BENCHMARKS, field="spec")
@kopf.on.resume(GROUP, VERSION, BENCHMARKS)
def benchmark_changed(spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, name: str,
                      **_: Any) -> None:
    out = controller.reconcile_benchmark(dict(spec), dict(meta), dict(status), dt.datetime.now(dt.UTC))
    patch.status.update(out)
    ready = next(c for c in out["conditions"] if c["type"] == "Ready")
    if ready["reason"] == "InvalidSpec":
        raise kopf.PermanentError(ready["message"])


@kopf.timer(GROUP, VERSION, BENCHMARKS, interval=SETTINGS.timer_interval, initial_delay=1.0, idle=None)  # type: ignore[arg-type]
async def benchmark_timer(body: kopf.Body, name: str, namespace: str, patch: kopf.Patch, **_: Any) -> None:
    def event(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message)

    async def agents(spec: BenchmarkSpec) -> frozenset[str]:
        found = await kube.agent_directory(spec, namespace, Settings.from_env()).agents()
        return frozenset(a.node for a in found)

    out = await controller.tick_benchmark(name, namespace, dict(body), dt.datetime.now(dt.UTC),
                                          lambda m: kopf.adopt(m, owner=body), event, agents,
                                          [n for n in Settings.from_env().namespaces.split(",") if n])
    patch.status.update(out)


def _probing(spec: kopf.Spec, **_: Any) -> bool:
    return bool((spec.get("lossProbe") or {}).get("enabled"))


def _benchmark_events(body: kopf.Body) -> rundriver.EventFn:
    def event(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message[:1000])
    return event


# spec.lossProbe: every benchmark with the probe on, in memory (kopf fills it before any handler runs), so a pass
# merges the probes of every benchmark that shares an agent.
@kopf.index(GROUP, VERSION, BENCHMARKS, when=_probing)  # type: ignore[arg-type]
def loss_probes(namespace: str, name: str, spec: kopf.Spec, **_: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(namespace, name): dict(spec)}


def _probing_benchmarks(index: kopf.Index[tuple[str, str], dict[str, Any]]) -> list[lossprobe.Benchmark]:
    return [lossprobe.Benchmark(ns, name, spec) for (ns, name), store in index.items() for spec in store]


@kopf.timer(GROUP, VERSION, BENCHMARKS, interval=SETTINGS.loss_probe_interval, initial_delay=2.0,  # type: ignore[arg-type]
            idle=None, when=_probing)
async def loss_probe_timer(body: kopf.Body, spec: kopf.Spec, name: str, namespace: str, patch: kopf.Patch,
                           loss_probes: kopf.Index[tuple[str, str], dict[str, Any]], **_: Any) -> None:
    patch.status["lossProbe"] = await lossprobe.kube_pass(
        lossprobe.Benchmark(namespace, name, dict(spec)), _probing_benchmarks(loss_probes), Settings.from_env(),
        _benchmark_events(body))


async def _release_loss_probe(body: kopf.Body, spec: kopf.Spec, name: str, namespace: str,
                              index: kopf.Index[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    return await lossprobe.kube_pass(lossprobe.Benchmark(namespace, name, dict(spec)), _probing_benchmarks(index),
                                     Settings.from_env(), _benchmark_events(body), release=True)


def _not_probing(spec: kopf.Spec, **_: Any) -> bool:
    return not _probing(spec)


# Turned off (enabled false, or lossProbe removed): its agents keep only the other benchmarks' probes, if any.
@kopf.on.update(GROUP, VERSION, BENCHMARKS, field="spec.lossProbe.enabled", old=True,  # type: ignore[arg-type]
                when=_not_probing)
async def loss_probe_disabled(body: kopf.Body, spec: kopf.Spec, name: str, namespace: str, patch: kopf.Patch,
                              loss_probes: kopf.Index[tuple[str, str], dict[str, Any]], **_: Any) -> None:
    patch.status["lossProbe"] = await _release_loss_probe(body, spec, name, namespace, loss_probes)


@kopf.on.delete(GROUP, VERSION, BENCHMARKS, when=_probing)  # type: ignore[arg-type]
async def loss_probe_deleted(body: kopf.Body, spec: kopf.Spec, name: str, namespace: str,
                             loss_probes: kopf.Index[tuple[str, str], dict[str, Any]], **_: Any) -> None:
    await _release_loss_probe(body, spec, name, namespace, loss_probes)


def _has_uploads(spec: kopf.Spec, **_: Any) -> bool:
    return external_cleanup.needs_cleanup(dict(spec))


# Only for benchmarks with external source endpoints: what the operator uploaded there goes with them (kopf's
# finalizer, which the timer already puts on every benchmark, holds the deletion until this returns).
@kopf.on.delete(GROUP, VERSION, BENCHMARKS, when=_has_uploads)  # type: ignore[arg-type]
async def benchmark_deleted(body: kopf.Body, spec: kopf.Spec, name: str, namespace: str, retry: int,
                            patch: kopf.Patch, **_: Any) -> None:
    def event(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message)

    problems = await external_cleanup.clean_up(dict(spec), namespace, name, kube.KubeSecretCredentials(namespace),
                                               event)
    if problems and retry + 1 < external_cleanup.ATTEMPTS:
        patch.status["conditions"] = [*[c for c in (body.get("status") or {}).get("conditions") or []
                                        if c.get("type") != "ExternalCleanup"],
                                      {"type": "ExternalCleanup", "status": "False", "reason": "CleanupFailed",
                                       "message": "; ".join(problems)[:1000]}]
        raise kopf.TemporaryError(f"external cleanup failed (attempt {retry + 1} of "
                                  f"{external_cleanup.ATTEMPTS}): {'; '.join(problems)}"[:1000],
                                  delay=Settings.from_env().cleanup_retry_seconds)


def _run_events(body: kopf.Body) -> rundriver.EventFn:
    def event(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message[:1000])
    return event


# On deletion the daemon gets a minute to cancel its tests and book them before kopf cancels it.
@kopf.daemon(GROUP, VERSION, RUNS, cancellation_backoff=60.0, cancellation_timeout=10.0)  # type: ignore[arg-type]
async def run_daemon(body: kopf.Body, name: str, namespace: str, uid: str, stopped: kopf.DaemonStopped,
                     **_: Any) -> None:
    def deleted() -> bool:
        return bool(stopped.reason and kopf.DaemonStoppingReason.RESOURCE_DELETED in stopped.reason)

    await rundriver.drive_run(name, namespace, uid, body, Settings.from_env(), _run_events(body),
                              rundriver.Stopped(stopped, deleted))


# No finalizer of its own: a run with an outbox has a daemon, whose finalizer kopf keeps until this is done too.
@kopf.on.delete(GROUP, VERSION, RUNS, optional=True)  # type: ignore[arg-type]
async def run_deleted(body: kopf.Body, name: str, namespace: str, uid: str, **_: Any) -> None:
    await rundriver.deliver_deleted_run(name, namespace, uid, body, Settings.from_env(), _run_events(body))
