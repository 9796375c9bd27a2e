"""The cluster's name in the archive (federation): TPCMESH_OPERATOR_CLUSTER_NAME (the chart's cluster.name), else
the UID of the kube-system namespace, which is the cluster's for its lifetime and needs nothing but `get` on that
one namespace. Read once at start-up and kept (per API server, so several operators in one test process each
keep their own)."""

from __future__ import annotations

import asyncio

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .config import Settings

IDENTITY_NAMESPACE = "kube-system"
_uids: dict[str, str] = {}


class ClusterNameUnknown(RuntimeError):
    """The kube-system namespace could not be read, and no cluster name is set."""


def _kube_system_uid() -> str:
    host = client.Configuration.get_default_copy().host
    if host not in _uids:
        try:
            ns = client.CoreV1Api().read_namespace(IDENTITY_NAMESPACE)
        except ApiException as e:
            raise ClusterNameUnknown(
                f"cannot read namespace {IDENTITY_NAMESPACE} for the cluster's name ({e.status} {e.reason}): give "
                f"the chart's cluster.name (TPCMESH_OPERATOR_CLUSTER_NAME), or let the operator get that namespace "
                f"(the chart's ClusterRole does when cluster.name is empty)") from None
        uid = ns.metadata.uid if ns.metadata is not None else None
        if not uid:
            raise ClusterNameUnknown(f"namespace {IDENTITY_NAMESPACE} has no UID: give the chart's cluster.name")
        _uids[host] = str(uid)
    return _uids[host]


def cluster_name(settings: Settings) -> str:
    """The name to deliver runs and measurements as (blocking: a call to the API server the first time)."""
    return settings.cluster_name or _kube_system_uid()


async def cluster_name_async(settings: Settings) -> str:
    return settings.cluster_name or await asyncio.to_thread(_kube_system_uid)
