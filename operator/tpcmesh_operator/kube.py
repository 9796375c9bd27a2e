"""Kubernetes edges of the run executor: the TransferRun status store and agent discovery from Ready pods.

The kubernetes client is synchronous; calls run in a thread so the operator's event loop never blocks.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .config import Settings
from .plan.spec import BenchmarkSpec
from .run.agents import DEFAULT_PORTS, Agent
from .run.outbox import MAX_STATUS_BYTES, encoded_size

log = logging.getLogger(__name__)

GROUP, VERSION = "tpcmesh.io", "v1alpha1"
BENCHMARKS, RUNS = "transferbenchmarks", "transferruns"
PORTS_ANNOTATION = "tpcmesh.io/ports"  # optional JSON {"control": 9443, ...} on an agent pod
# "true" on an agent pod whose agent listens on each of its pod IPs (the chart's agent.dualStack: it hands the agent
# status.podIPs); without it the agent serves its pod IP alone, whatever other addresses the pod has
DUAL_STACK_ANNOTATION = "tpcmesh.io/dual-stack"


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi()


def core() -> client.CoreV1Api:
    return client.CoreV1Api()


def compact(status: dict[str, Any], limit: int = MAX_STATUS_BYTES) -> dict[str, Any]:
    """Keep a status under the object size limit: drop the per-file details of waiting measurements first
    (`files` is optional in the contract; the aggregate figures stay)."""
    if encoded_size(status) <= limit:
        return status
    out = dict(status)
    out["outbox"] = [{k: v for k, v in m.items() if k != "files"} for m in status.get("outbox") or []]
    out["compacted"] = True
    return out


def status_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch (RFC 6902) that turns status `old` into `new` (pure), key by key at the top: changed keys are
    sent whole, dropped ones removed. Not a merge patch: a merge patch drops every null it carries (a file's
    `error: null` would vanish from a waiting measurement, and the dashboard requires the key). `old` None (not
    known) replaces the whole status."""
    if old is None:
        return [{"op": "add", "path": "/status", "value": dict(new)}]

    def path(key: str) -> str:
        return "/status/" + key.replace("~", "~0").replace("/", "~1")

    ops: list[dict[str, Any]] = [{"op": "remove", "path": path(k)} for k in old if k not in new]
    ops += [{"op": "add", "path": path(k), "value": v} for k, v in new.items() if k not in old or old[k] != v]
    return ops


class KubeStatusStore:
    """Loads and saves a TransferRun's status (status subresource, JSON Patch of what changed since the last load
    or save; the whole status when that is not known)."""

    def __init__(self, namespace: str, name: str, extra: Mapping[str, Any] | None = None) -> None:
        self.namespace = namespace
        self.name = name
        self.extra = dict(extra or {})
        self._last: dict[str, Any] | None = None

    async def load(self) -> dict[str, Any] | None:
        obj: Any = await asyncio.to_thread(custom().get_namespaced_custom_object, GROUP, VERSION, self.namespace, RUNS,
                                      self.name)
        status = dict(obj.get("status") or {})
        self._last = None if obj.get("status") is None else json.loads(json.dumps(status))  # a copy
        status.pop("kopf", None)
        return status if status.get("agents") is not None or status.get("phase") else None

    async def save(self, status: dict[str, Any]) -> None:
        body = json.loads(json.dumps(compact({**status, **self.extra})))
        if body.get("compacted") and not (self._last or {}).get("compacted"):
            log.warning("Compacted the status of TransferRun %s/%s (over %d bytes): left out the per-file details "
                        "of its %d waiting measurements, kept their totals", self.namespace, self.name,
                        MAX_STATUS_BYTES, len(body.get("outbox") or []))
        if self._last is not None:
            body = {**{k: v for k, v in self._last.items() if k == "kopf"}, **body}
        ops = status_patch(self._last, body)
        if ops:
            await asyncio.to_thread(custom().patch_namespaced_custom_object_status, GROUP, VERSION, self.namespace,
                                    RUNS, self.name, ops, _content_type="application/json-patch+json")
        self._last = body


def _ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or not pod.status or not pod.status.pod_ip:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def _ports(pod: Any) -> dict[str, int]:
    ports = dict(DEFAULT_PORTS)
    raw = (pod.metadata.annotations or {}).get(PORTS_ANNOTATION)
    if raw:
        try:
            ports.update({k: int(v) for k, v in json.loads(raw).items()})
        except (ValueError, AttributeError):
            log.warning("Pod %s has an invalid %s annotation: %r", pod.metadata.name, PORTS_ANNOTATION, raw)
    return ports


def agent_addresses(pod: Any) -> tuple[str, str | None]:
    """An agent pod's address and, dual stack, its IPv6 address besides (the agent's own rule, its pod_ips
    setting): with the DUAL_STACK_ANNOTATION and pod IPs of both families, the IPv4 one and the IPv6 one; else its
    pod IP alone."""
    if (pod.metadata.annotations or {}).get(DUAL_STACK_ANNOTATION) != "true":
        return pod.status.pod_ip, None
    by_family: dict[int, str] = {}
    for entry in pod.status.pod_ips or []:
        try:
            ip = ipaddress.ip_address(entry.ip)
        except ValueError:
            continue
        by_family.setdefault(ip.version, str(ip))
    if len(by_family) < 2:
        return pod.status.pod_ip, None
    return by_family[4], by_family[6]


def selector_string(match_labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


class KubeAgentDirectory:
    """The Ready agent pods matching the selector; address = pod IP (node IP with hostNetwork), dual stack also the
    IPv6 one (agent_addresses); node labels."""

    def __init__(self, namespace: str, pod_selector: str, node_selector: Mapping[str, str] | None = None) -> None:
        self.namespace = namespace
        self.pod_selector = pod_selector
        self.node_selector = dict(node_selector or {})

    async def agents(self) -> Sequence[Agent]:
        return await asyncio.to_thread(self._agents)

    def _agents(self) -> list[Agent]:
        api = core()
        pods: list[Any] = api.list_namespaced_pod(self.namespace, label_selector=self.pod_selector).items
        nodes: dict[str, Any] = {n.metadata.name: n for n in api.list_node().items}  # type: ignore[union-attr,misc]
        out: dict[str, Agent] = {}
        for pod in sorted(pods, key=lambda p: p.metadata.name):
            node_name = pod.spec.node_name
            if not _ready(pod) or not node_name or node_name in out:
                continue
            node = nodes.get(node_name)
            labels = dict(node.metadata.labels or {}) if node else {}
            if any(labels.get(k) != v for k, v in self.node_selector.items()):
                continue
            notes = {k: v for k, v in ((node.metadata.annotations or {}) if node else {}).items()
                     if k.startswith("tpcmesh.io/maintenance-")}
            address, address6 = agent_addresses(pod)
            out[node_name] = Agent(node=node_name, address=address, ports=_ports(pod), labels=labels,
                                   name=pod.metadata.name, annotations=notes, address6=address6)
        return list(out.values())


def agent_directory(spec: BenchmarkSpec, namespace: str, settings: Settings) -> KubeAgentDirectory:
    """Where a benchmark (in `namespace`) finds its agents: its selectors, else the operator's."""
    return KubeAgentDirectory(settings.agent_namespace or namespace,
                              selector_string(spec.agent_selector) if spec.agent_selector else settings.agent_selector,
                              spec.node_selector)


async def read_secret_key(namespace: str, name: str, key: str) -> str:
    try:
        s = await asyncio.to_thread(core().read_namespaced_secret, name, namespace)
    except ApiException as e:
        raise LookupError(f"Secret {namespace}/{name}: {e.reason}") from None
    data = (s.data or {}).get(key)
    if data is None:
        raise LookupError(f"Secret {namespace}/{name} has no key {key!r}")
    return base64.b64decode(data).decode().strip()


class KubeSecretCredentials:
    """external_io.CredentialSource over a namespace's Secrets (an external endpoint's `credentials`)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    async def read(self, secret: str) -> dict[str, str]:
        from .external.access import ExternalError

        try:
            s = await asyncio.to_thread(core().read_namespaced_secret, secret, self.namespace)
        except ApiException as e:
            raise ExternalError(f"Secret {self.namespace}/{secret}: {e.reason}") from None
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in (s.data or {}).items()}
