"""Finished summaries, kept until a collector acknowledges them (the agent's side of "nothing lost").

Each summary gets an increasing id. A collector (the operator, or anything holding the control API's token) reads
the oldest unacknowledged ones in batches (``batch``), stores them, then acknowledges everything up to the last id
it stored (``ack``); what it does not acknowledge is handed out again on the next read, so a collector that dies
between the two re-reads the same batch (the archive must take a summary twice without harm: its key is node,
peer and period). The outbox is bounded: past ``capacity`` summaries the oldest are dropped and counted.
"""

from __future__ import annotations

from collections import deque

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
