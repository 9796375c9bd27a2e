"""Tests against external endpoints (spec.externalEndpoints) in a run: what the agents are asked to do.

- External SOURCE -> agent: the destination agent pulls as usual, from the endpoint's copy of the set
  (`source.path` = `<path>/<namespace>.<benchmark>/sets`), forwarding the site's token as the read token; its own
  landing takes the create token minted for it (token mode) or its certificate (x509).
- Agent -> external DESTINATION: the source agent sends the COPY to the endpoint, asking it to pull from the
  agent's public instance (`remote_destination`), with the site's token for the COPY and a read token minted for
  the agent's instance (token mode); the copy lands in `<path>/<namespace>.<benchmark>/incoming/` and is removed
  once its adler32 is read.
- root:// endpoints (xrootd-root): the destination agent pulls with xrdcp and the site's token (a plain pull:
  the token is not delegated to its local TPC instance); into the endpoint, the source agent runs
  ``xrdcp --tpc first`` from its public root:// instance (the endpoint pulls, as FTS drives root TPC).
- gsiftp:// endpoints (gridftp): the site's X509 proxy (or certificate and key) goes to the agent (`x509`); both
  ways are GridFTP third-party copies between the endpoint's server and the agent's (globus-url-copy with the site's
  credential for the endpoint, the agent's host certificate for its own server; both servers' adler32 compared):
  into the destination agent's incoming area, or from the source agent's copy of the set into the endpoint; the
  operator removes the copies afterwards (globus-url-copy cannot delete; the operator's gfal2 can).
- Before the first test from a source endpoint, the operator uploads the set there once: the same third-party copy
  from an agent into `.../sets/<set>/`, then it checks every file's size and adler32 itself (`external_io`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..credentials.tokens.minting import Minter, pull_tokens
from ..plan.planner import Test
from ..plan.spec import BenchmarkSpec
from ..run.agents import Agent
from ..run.measurements import planned_setting
from .access import Access, http_url
from .endpoints import ExternalEndpoint


def bench_dir(namespace: str, name: str) -> str:
    """The benchmark's directory below an endpoint's path (Kubernetes names: plain, no '/')."""
    return f"{namespace}.{name}"


def base_request(spec: BenchmarkSpec, test: Test, tid: str) -> dict[str, Any]:
    streams, concurrency = planned_setting(spec, test)  # spec.optimize does not tune external endpoints
    return {"test_id": tid, "protocol": test.setting.protocol, "file_set": spec.file_set.request(),
            "concurrency": concurrency, "streams": streams, "timeout_seconds": spec.timeout_seconds}


def pull_from_external(spec: BenchmarkSpec, test: Test, tid: str, acc: Access, directory: str, dst: Agent,
                       issuer: Minter | None, auth: str) -> dict[str, Any]:
    """The request to the destination agent of an external source's test."""
    ep = acc.endpoint
    create = None
    if auth == "token" and issuer is not None and ep.scheme != "root":  # root://: the agent's client writes itself
        create = pull_tokens(issuer, dst, dst, test.setting.protocol, spec.timeout_seconds)["create"]
    request = {**base_request(spec, test, tid), "source": {"host": ep.host, "port": ep.port, "path": directory},
               "destination": spec.destination}
    if ep.scheme == "gsiftp":
        request["x509"] = acc.x509()
    elif acc.token or create:
        request["tokens"] = {"read": acc.token, "create": create}
    return request


def push_to_external(spec: BenchmarkSpec, test: Test | None, tid: str, acc: Access, directory: str, src: Agent,
                     issuer: Minter | None, auth: str, streams: int = 1, remove: bool = True) -> dict[str, Any]:
    """The request to the source agent of a test into an external destination (or of the set's upload, `test`
    None): the endpoint pulls from the agent's public instance into `directory`."""
    protocol = acc.endpoint.protocol
    if test is not None:
        planned, concurrency = planned_setting(spec, test)
        streams = planned or streams
    else:
        concurrency = spec.concurrency
    request: dict[str, Any] = {
        "test_id": tid, "protocol": protocol, "file_set": spec.file_set.request(), "concurrency": concurrency,
        "streams": streams, "timeout_seconds": spec.timeout_seconds,
        "source": {"host": src.address, "port": src.port(protocol)},
        "remote_destination": {"url": remote_url(acc.endpoint, directory), "token": acc.token,
                               # globus-url-copy cannot delete: the operator removes gsiftp copies (run/executor.py)
                               "remove": remove and acc.endpoint.scheme != "gsiftp"},
    }
    if acc.endpoint.scheme == "gsiftp":
        request["x509"] = acc.x509()
        request["remote_destination"]["token"] = None
    if auth == "token" and issuer is not None and protocol == "xrootd-https":  # root://: the public instance is open
        read = pull_tokens(issuer, src, src, protocol, spec.timeout_seconds)["read"]
        request["tokens"] = {"read": read, "create": None}
    return request


def remote_url(endpoint: ExternalEndpoint, directory: str) -> str:
    """The URL an agent copies into: https:// for davs/https, root://host:port//<dir> for root, gsiftp://host:port<dir>
    for gsiftp."""
    if endpoint.scheme == "root":
        return f"{endpoint.url}/{directory}"
    if endpoint.scheme == "gsiftp":
        return f"{endpoint.url}{directory}"
    return http_url(endpoint, directory)


EXTERNAL_LABEL = "tpcmesh.io/external"  # on an ingest batch's node: an external endpoint, not an agent's node


def external_node(endpoint: ExternalEndpoint) -> dict[str, Any]:
    """An external endpoint as a node of the ingest batch: flagged by its label (the grid marks it), its URL and
    path for people, its host as the site (another site's storage)."""
    return {"name": endpoint.name, "address": endpoint.host,
            "labels": {EXTERNAL_LABEL: "true", f"{EXTERNAL_LABEL}-url": endpoint.url,
                       f"{EXTERNAL_LABEL}-role": endpoint.role},
            "site": endpoint.host, "nic_speed_gbps": None, "external": True}


def name_endpoint(acc_or_name: str, error: str) -> str:
    """A failed external test's reason, naming the endpoint first (the agent's own words follow)."""
    return error if error.startswith(acc_or_name) else f"{acc_or_name}: {error}"


def set_files(manifest: Mapping[str, Any] | None) -> Sequence[Mapping[str, Any]]:
    """The set's files {name, size, checksum} as an agent's POST /api/v1/filesets answered."""
    return list((manifest or {}).get("files") or [])
