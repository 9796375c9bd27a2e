"""Finished summaries, kept until a collector acknowledges them (the agent's side of "nothing lost").

Each summary gets an increasing id. A collector (the operator, or anything holding the control API's token) reads
the oldest unacknowledged ones in batches (``batch``), stores them, then acknowledges everything up to the last id
it stored (``ack``); what it does not acknowledge is handed out again on the next read, so a collector that dies
between the two re-reads the same batch (the archive must take a summary twice without harm: its key is node,
peer and period). The outbox is bounded: past ``capacity`` summaries the oldest are dropped and counted.

It lives in memory; the agent saves it to a file in its data directory when it stops and loads it when it starts
(``save``/``load``), so a restarted agent (an upgrade, a crash-looping sidecar) keeps what was not collected. A
killed agent loses what came after its last save.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from pathlib import Path

from ..atomic import write_atomically

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 20_000  # about 1 KiB of JSON each: ~20 MiB; 3 h 20 min of 100 peers' minutes
MAX_BATCH = 1_000


class Outbox:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity {capacity} must be at least 1")
        self.capacity = capacity
        self._items: deque[dict] = deque()
        self._next_id = 1
        self.dropped = 0
        self.acknowledged = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, summary: dict) -> int:
        item = {"id": self._next_id, **summary}
        self._next_id += 1
        self._items.append(item)
        while len(self._items) > self.capacity:
            self._items.popleft()
            self.dropped += 1
        return item["id"]

    def batch(self, limit: int = 500) -> list[dict]:
        """The oldest unacknowledged summaries, at most ``limit`` (1..MAX_BATCH)."""
        limit = max(1, min(limit, MAX_BATCH))
        return [self._items[i] for i in range(min(limit, len(self._items)))]

    def ack(self, through: int) -> int:
        """Forget every summary with an id up to ``through``; how many were forgotten."""
        n = 0
        while self._items and self._items[0]["id"] <= through:
            self._items.popleft()
            n += 1
        self.acknowledged += n
        return n

    def status(self) -> dict:
        return {"pending": len(self._items), "capacity": self.capacity, "dropped": self.dropped,
                "acknowledged": self.acknowledged, "next_id": self._next_id}

    def save(self, path: Path) -> None:
        """Write the pending summaries (JSON) to ``path`` in one rename."""
        data = {"next_id": self._next_id, "dropped": self.dropped, "summaries": list(self._items)}
        write_atomically(path, json.dumps(data).encode(), mode=0o600)

    def load(self, path: Path) -> int:
        """Take the summaries saved in ``path`` (before any new one), then remove the file; how many were taken.
        A missing file is nothing to load; an unreadable one is logged and left for a person to look at."""
        try:
            data = json.loads(path.read_text())
            items = [x for x in data["summaries"] if isinstance(x, dict) and isinstance(x.get("id"), int)]
            next_id = int(data["next_id"])
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("Saved loss summaries %s could not be read (%s); starting with none", path, e)
            return 0
        self._items = deque(items[-self.capacity:])
        self.dropped += int(data.get("dropped", 0)) + max(0, len(items) - self.capacity)
        self._next_id = max(next_id, max((x["id"] for x in items), default=0) + 1)
        path.unlink(missing_ok=True)
        return len(self._items)
