"""Builders of contract-valid ingest batches for the dashboard's tests and benchmark."""

from __future__ import annotations

import copy
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def measurement(
    source: str,
    destination: str,
    *,
    protocol: str = "xrootd-https",
    streams: int | None = 1,
    concurrency: int = 1,
    gbps: float | None = 35.0,
    rtt_ms: float | None = None,
    finished: datetime | None = None,
    status: str = "succeeded",
    error: str | None = None,
    files: int = 0,
    id: str | None = None,
) -> dict[str, Any]:
    finished = finished or datetime.now(UTC)
    started = finished - timedelta(seconds=10)
    m: dict[str, Any] = {
        "id": id or str(uuid.uuid4()),
        "source": source,
        "destination": destination,
        "protocol": protocol,
        "streams": None if protocol == "rtt" else streams,
        "concurrency": concurrency,
        "status": status,
        "error": error,
        "started_at": iso(started),
        "finished_at": iso(finished),
    }
    if protocol == "rtt":
        m.update(rtt_ms=rtt_ms if rtt_ms is not None else 1.0, rtt_min_ms=0.5, rtt_max_ms=2.0)
    else:
        m.update(file_size=1_000_000, file_count=files or 1, total_bytes=1_000_000 * (files or 1),
                 throughput_gbps=gbps, aggregate_gbps=gbps, rtt_ms=rtt_ms, checksum="ok", destination_kind="store")
        m["files"] = [
            {"name": f"f{i:03d}", "size": 1_000_000, "bytes": 1_000_000, "started_at": iso(started),
             "finished_at": iso(started + timedelta(seconds=1 + i)), "seconds": 1.0 + i, "error": None,
             "checksum_ok": True}
            for i in range(files)
        ]
    return m


def batch(measurements: list[dict[str, Any]], *, namespace: str = "mesh", name: str = "nightly",
          run: str | None = None, nodes: list[dict[str, Any]] | None = None,
          thresholds: dict[str, Any] | None = None, cluster: str | None = None) -> dict[str, Any]:
    run = run or f"run-{uuid.uuid4().hex[:8]}"
    body: dict[str, Any] = {
        "benchmark": {"namespace": namespace, "name": name, "uid": f"uid-{namespace}-{name}", "spec": {}},
        "run": {"uid": f"uid-{run}", "name": run, "state": "Succeeded", "counts": {}},
        "measurements": measurements,
    }
    if nodes is not None:
        body["nodes"] = nodes
    if thresholds is not None:
        body["benchmark"]["thresholds"] = thresholds
    if cluster is not None:
        body["cluster"] = cluster
    return body


def ingest(body: dict[str, Any]) -> Any:
    """Store a batch as the ingest API does (its serializer's validation, then services.ingest), without HTTP."""
    # imported here: the lab and cluster tests build batches with this module but have no Django
    from results import services
    from results.api.serializers import IngestBatchIn

    s = IngestBatchIn(data=body)
    assert s.is_valid(), s.errors
    return services.ingest(s.validated_data)


def post_batch(client: Any, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a batch to the ingest API with the write token ``key`` (asserting 200); the answer."""
    r = client.post("/api/v1/ingest/", json.dumps(body), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {key}")
    assert r.status_code == 200, r.content
    return r.json()


def page_table(client: Any, path: str, table_id: str) -> str:
    """The HTML of the table ``id=table_id`` on the page at ``path`` (asserting the page answers 200)."""
    page = client.get(path)
    assert page.status_code == 200, page.content[:500]
    html = page.content.decode()
    table = html[html.index(f'id="{table_id}"'):]
    return table[:table.index("</table>")]


# one end's host telemetry as an agent reports it (tpcmesh_agent.hosttelemetry), cut to what the limit model reads
HOST_END = {"cpu": {"busiest_core_pct": 30.0, "busiest_core_softirq_pct": 2.0},
            "limits": {"tcp_rmem_max_bytes": 64_000_000, "tcp_wmem_max_bytes": 64_000_000, "rmem_max_bytes": 212_992,
                       "wmem_max_bytes": 212_992, "congestion_control": "cubic", "mtu": 9000, "kernel": "6.18.0",
                       "tcp_adv_win_scale": 1}}


def host_end(buffer: int) -> dict[str, Any]:
    """HOST_END with TCP buffers (tcp_rmem and tcp_wmem maxima) of `buffer` bytes."""
    end = copy.deepcopy(HOST_END)
    end["limits"].update(tcp_rmem_max_bytes=buffer, tcp_wmem_max_bytes=buffer)
    return end


def loss_summary(node: str, peer: str, start: datetime, *, sent: int = 600, lost: int = 0, rtt_ms: float = 10.0,
                 one_way_ms: float | None = 5.0, trusted: bool = True, jitter_ms: float = 0.05, family: int = 4,
                 period_s: float = 60.0) -> dict[str, Any]:
    """One period's summary as the agent's TWAMP-light sender makes it (agent/tpcmesh_agent/twamp/sender.py)."""
    ipdv = {"mean_abs": jitter_ms, "median_abs": jitter_ms, "p95_abs": 3 * jitter_ms, "pairs": max(0, sent - lost - 1)}
    way = {"min": one_way_ms * 0.9, "median": one_way_ms} if one_way_ms is not None else None
    return {
        "node": node, "peer": peer, "peer_address": "10.0.0.2", "peer_port": 863, "family": family,
        "period_start": iso(start), "period_end": iso(start + timedelta(seconds=period_s)), "period_s": period_s,
        "partial": False, "rate_pps": 10.0, "packet_bytes": 64, "dscp": 0, "send_errors": 0, "mismatched": 0,
        "sent": sent, "received": sent - lost, "lost": lost, "loss_percent": round(100 * lost / sent, 6) if sent
        else None, "duplicates": 0, "reordered": 0, "unexpected": 0,
        "rtt_ms": {"min": rtt_ms * 0.9, "median": rtt_ms, "p95": rtt_ms * 1.2, "max": rtt_ms * 1.5},
        "one_way_ms": {"forward": way, "backward": way, "trusted": trusted,
                       "untrusted_reason": None if trusted else "the reflector's clock is not synchronised",
                       "clock_error_ms": 0.2 if trusted else None},
        "ipdv_ms": {"forward": ipdv, "backward": ipdv, "round_trip": ipdv}, "ttl_min": 64,
        "clock": {"synchronized": trusted, "esterror_ms": 0.1},
    }
