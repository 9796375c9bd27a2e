"""A run's status as bookkeeping (pure): test ids, booking a finished test and queuing its measurement, rounds,
the bounded RTT table, conditions, and the upgrade of an old status. The executor (run/executor.py) is the only
writer; the
status's shape is described in its docstring."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from .agents import Agent
from .measurements import now_iso

TEST_ID_NAMESPACE = uuid.UUID("6f0c7a52-4c8e-4d0e-9a51-0d6a2b1f3c11")
TERMINAL = ("Succeeded", "Failed")


def test_id(run_uid: str, key: str, attempt: int) -> str:
    """Deterministic per run, test and attempt: a resumed executor re-posts the same id."""
    return str(uuid.uuid5(TEST_ID_NAMESPACE, f"{run_uid}/{key}/{attempt}"))


def pair_key(source: str, destination: str) -> str:
    return f"{source}>{destination}"


MAX_RECENT_FAILURES = 20
MAX_ERROR_CHARS = 300  # in `tests` and `recentFailures`; the measurement keeps the whole error


def initial_status(agents: Sequence[Agent]) -> dict[str, Any]:
    """The status of a run that has not started a test yet (agents sorted by node: the plan's order)."""
    n = len(agents)
    return {
        "phase": "Running", "startTime": now_iso(),
        "agents": [a.to_dict() for a in sorted(agents, key=lambda a: a.node)],
        "tests": {}, "rttMs": [None] * n, "filesets": {}, "outbox": [],
        "recentFailures": [], "done": 0, "succeeded": 0, "failed": 0, "delivered": 0, "rejected": [],
        "rejectedCount": 0,
        "currentRound": 0,
    }


def loopback_entry(m: Mapping[str, Any]) -> dict[str, Any]:
    """A loopback test's result as it waits in the outbox: not a measurement (the dashboard keeps pairs of two
    nodes) but the node's `loopback_gbps`, sent in the batch's `nodes` (RunExecutor._batch)."""
    keep = ("id", "source", "destination", "protocol", "streams", "status", "error", "started_at", "finished_at")
    return {"kind": "loopback", **{k: m.get(k) for k in keep}, "loopback_gbps": m.get("throughput_gbps")}


def ceilings_entry(mid: str, node: str, answer: Mapping[str, Any]) -> dict[str, Any]:
    """A node's disk ceilings (the agent's POST /api/v1/storage/ceilings, bytes/s) as they wait in the outbox: no
    measurement but the node's `disk_read_gbps` and `disk_write_gbps`, sent in the batch's `nodes` like a loopback."""
    return {"kind": "ceilings", "id": mid, "source": node, "destination": node,
            "disk_read_gbps": round(float(answer["read_bps"]) * 8 / 1e9, 6),
            "disk_write_gbps": round(float(answer["write_bps"]) * 8 / 1e9, 6)}


def book_test(status: dict[str, Any], key: str, m: Mapping[str, Any]) -> bool:
    """Book one finished test and queue its measurement (pure). False if the key is already booked this round.
    A loopback test (source = destination) queues its figure only if it succeeded (loopback_entry)."""
    tests = status.setdefault("tests", {})
    if key in tests:
        return False
    error = (m.get("error") or None) and str(m["error"])[:MAX_ERROR_CHARS]
    tests[key] = {"status": m["status"], "id": m["id"], "gbps": m.get("throughput_gbps"), "error": error}
    status["done"] = int(status.get("done", 0)) + 1
    if m["status"] == "succeeded":
        status["succeeded"] = int(status.get("succeeded", 0)) + 1
    else:
        status["failed"] = int(status.get("failed", 0)) + 1
        recent = status.setdefault("recentFailures", [])
        recent.append({"key": key, "id": m["id"], "status": m["status"], "error": error,
                       "finishedAt": m.get("finished_at")})
        del recent[:-MAX_RECENT_FAILURES]
    if m["source"] != m["destination"]:
        status.setdefault("outbox", []).append(m)
    elif m["status"] == "succeeded":
        status.setdefault("outbox", []).append(loopback_entry(m))
    status["undelivered"] = len(status.setdefault("outbox", []))
    return True


def finish_round(status: dict[str, Any], index: int) -> None:
    """Round `index` is over (pure): the rounds before index + 1 are finished, their keys are no longer needed."""
    status["currentRound"] = index + 1
    status["tests"] = {}


def put_rtt(status: dict[str, Any], agents: Sequence[str], source: str, destination: str,
            median_ms: float | None) -> None:
    """Keep a pair's median RTT (ms, to the microsecond) in `rttMs`: one row per source, one column per
    destination, in the plan's agent order, a few bytes a pair (pure). The probe's min and max stay in the RTT
    measurement."""
    n = len(agents)
    rows = status.get("rttMs")
    if not isinstance(rows, list) or len(rows) != n:
        rows = status["rttMs"] = [None] * n
    i, j = agents.index(source), agents.index(destination)
    if rows[i] is None:
        rows[i] = [None] * n
    rows[i][j] = None if median_ms is None else round(float(median_ms), 3)


def get_rtt(status: Mapping[str, Any], agents: Sequence[str], source: str, destination: str) -> dict[str, Any] | None:
    """A pair's RTT from `rttMs` as {median_ms}, or None (pure)."""
    rows = status.get("rttMs")
    try:
        i, j = agents.index(source), agents.index(destination)
        v = rows[i][j] if isinstance(rows, list) and rows[i] is not None else None
    except (ValueError, IndexError, TypeError):
        return None
    return None if v is None else {"median_ms": v}


def migrate_status(status: dict[str, Any], agents: Sequence[str]) -> None:
    """A status written before the bounded format (an operator upgraded mid-run): `rtt` keyed by pair becomes
    `rttMs`; counts and `tests` carry over (`tests` shrinks to one round when the current round ends)."""
    old = status.pop("rtt", None)
    if isinstance(old, dict):
        for pair, probe in old.items():
            s, _, d = pair.partition(">")
            if s in agents and d in agents and isinstance(probe, Mapping):
                put_rtt(status, agents, s, d, probe.get("median_ms"))
    status.setdefault("recentFailures", [])
    for k in ("done", "succeeded", "failed"):
        status.setdefault(k, 0)


def set_condition(status: dict[str, Any], type_: str, value: bool | None, reason: str, message: str = "") -> None:
    """Set a condition (None: Unknown), its lastTransitionTime moving only when its status changes."""
    word = "Unknown" if value is None else ("True" if value else "False")
    conds = status.setdefault("conditions", [])
    for c in conds:
        if c["type"] == type_:
            if c["status"] != word:
                c["lastTransitionTime"] = now_iso()
            c.update(status=word, reason=reason, message=message)
            return
    conds.append({"type": type_, "status": word, "reason": reason, "message": message,
                  "lastTransitionTime": now_iso()})
