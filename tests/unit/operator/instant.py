"""In-process stand-ins for the operator's unit tests: agents whose transfers finish at once (records shaped like
the agent's, checked against the contract in test_operator_status_budget.py), and a status store that encodes the
status as the API server stores it and refuses, like etcd, one that is too large."""

from __future__ import annotations

import json

from tpcmesh_operator.run.measurements import now_iso

ETCD_LIMIT = 1_572_864  # etcd's default request limit (1.5 MiB)


class InstantAgents:
    """The six calls of the agents' control API, answered at once."""

    async def prepare_fileset(self, agent, request, timeout=0.0) -> dict:
        return {"name": "11x1000000000", "files": 11}

    async def start_transfer(self, agent, request) -> dict:
        t = now_iso()
        files = [{"name": f"file-{i:04d}.dat", "size": 10**9, "bytes": 10**9, "started_at": t, "finished_at": t,
                  "seconds": 1.21, "error": None, "checksum_ok": True} for i in range(11)]
        return {"test_id": request["test_id"], "protocol": request["protocol"], "streams": request["streams"],
                "concurrency": request["concurrency"], "status": "succeeded", "error": None,
                "file_size": 10**9, "file_count": 11, "total_bytes": 11 * 10**9, "wall_seconds": 1.3,
                "mean_transfer_seconds": 1.21, "throughput_gbps": 72.7, "aggregate_gbps": 67.7, "peak_gbps": 80.1,
                "checksum": "ok", "destination_kind": "store", "started_at": t, "finished_at": t, "files": files}

    async def get_transfer(self, agent, test_id, wait=0.0) -> dict:
        raise AssertionError("every transfer finished when it started")

    async def cancel_transfer(self, agent, test_id) -> None:
        return None

    async def probe_rtt(self, agent, host, port, count) -> dict:
        return {"min_ms": 11.9, "median_ms": 12.3, "max_ms": 14.0, "error": None}

    async def probe_path(self, agent, host) -> dict:
        hops = [{"ttl": i, "address": f"203.0.113.{i}", "rtt_ms": 0.5 * i} for i in range(1, 12)]
        return {"hops": hops, "pmtu": 1500, "reached": True, "interface": "eth0", "interface_mtu": 9000, "error": None}


class EtcdSizedStore:
    """Keeps the status as the API server stores it (compact JSON) and, like etcd, refuses one that is too large."""

    def __init__(self) -> None:
        self.encoded: str | None = None
        self.largest = 0

    async def load(self) -> dict | None:
        return json.loads(self.encoded) if self.encoded else None

    async def save(self, status: dict) -> None:
        encoded = json.dumps(status, separators=(",", ":"))
        size = len(encoded.encode())
        assert size < ETCD_LIMIT, f"etcd: request is too large ({size} bytes)"
        self.largest = max(self.largest, size)
        self.encoded = encoded

    @property
    def status(self) -> dict:
        return json.loads(self.encoded or "{}")
