"""The run's outbox in the TransferRun status: measurements the dashboard has not acknowledged. Pure code.

`status["outbox"]` holds them until a batch is acknowledged; `settle` removes what a delivery attempt settled.
Measurements the dashboard refuses (its reason names their fields) leave the outbox for `status["rejected"]`:
the latest MAX_REJECTED with the dashboard's reason and the whole record (the executor also logs every one in full
at WARNING, posts an Event and counts them), `rejectedCount` counts them all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .delivery import Outcome

MAX_REJECTED = 20
MAX_REASON_CHARS = 1000
# A run's status is one Kubernetes object (etcd refuses ~1.5 MiB): above MAX_STATUS_BYTES kube.compact drops the
# per-file details of waiting measurements; no new test starts while its measurement might take the status past
# the budget (DeliveryBacklog), which must stay below that.
MAX_STATUS_BYTES = 1_000_000
STATUS_BUDGET_BYTES = 800_000


def encoded_size(obj: Any) -> int:
    """Bytes of `obj` as the API server stores it (compact JSON)."""
    return len(json.dumps(obj, separators=(",", ":")).encode())


def settle(status: dict[str, Any], outcome: Outcome, now: str) -> None:
    """Take what `outcome` settled out of the outbox: acknowledged ones are delivered, refused ones rejected."""
    acked = {m["id"] for m in outcome.acknowledged}
    refused = {m["id"] for m, _ in outcome.rejected}
    status["outbox"] = [m for m in status.get("outbox") or [] if m["id"] not in acked and m["id"] not in refused]
    status["undelivered"] = len(status["outbox"])
    status["delivered"] = int(status.get("delivered", 0)) + len(acked)
    if refused:
        kept = status.setdefault("rejected", [])
        kept.extend({"reason": reason[:MAX_REASON_CHARS], "rejectedAt": now, "measurement": dict(m)}
                    for m, reason in outcome.rejected)
        del kept[:-MAX_REJECTED]
        status["rejectedCount"] = int(status.get("rejectedCount", 0)) + len(refused)


def migrate(status: dict[str, Any]) -> None:
    """A status from before the rejected list: `rejected` was a count of measurements dropped without a trace."""
    old = status.get("rejected")
    if not isinstance(old, list):
        status["rejected"] = []
        status["rejectedCount"] = int(status.get("rejectedCount", 0)) + (old if isinstance(old, int) else 0)
    status.setdefault("rejectedCount", 0)


def describe(m: Mapping[str, Any]) -> str:
    """A measurement in a few words, for Events and log lines."""
    streams = f"/{m['streams']}" if m.get("streams") else ""
    return f"{m.get('protocol')}{streams} {m.get('source')}>{m.get('destination')} ({m.get('id')})"
