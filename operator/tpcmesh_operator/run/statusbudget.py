"""The status byte budget (pure): a run's status is one Kubernetes object, so a test starts only when its
measurement fits next to what waits for delivery (see the executor's docstring, SIZE)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..plan.spec import BenchmarkSpec
from .outbox import encoded_size as status_size_bytes


def min_test_bytes(spec: BenchmarkSpec) -> int:
    """What one test adds to the status at least: its measurement (with a row per file) and its `tests` entry."""
    files = spec.file_set.count if spec.file_set.count is not None else 10  # a dataset has up to 10 files
    return 1000 + 200 * files


class Room:
    """Bytes of the status: what it holds (`measure`, `booked`), what the tests in flight will add (`reserve`,
    `release`), against the budget. Pure bookkeeping, no I/O."""

    def __init__(self, budget: int, min_test: int) -> None:
        self.budget = budget
        self.min_test = min_test
        self.base_bytes = 0  # the status without its outbox
        self.outbox_bytes = 0
        self.outbox_items = 0
        self.reserved = 0
        self.largest = 0  # the largest measurement seen

    def measure(self, status: Mapping[str, Any], outbox: bool = True) -> None:
        """Measure the status (without the outbox when `outbox` is False: it is counted as it grows)."""
        self.base_bytes = status_size_bytes({k: v for k, v in status.items() if k != "outbox"})
        if outbox:
            sizes = [status_size_bytes(m) + 1 for m in status.get("outbox") or []]
            self.outbox_bytes, self.outbox_items = sum(sizes), len(sizes)
            self.largest = max([self.largest, *sizes])

    def booked(self, entry: Mapping[str, Any] | None) -> None:
        """A test was booked; `entry` is what it added to the outbox (None: nothing, e.g. a failed loopback)."""
        self.base_bytes += 300  # its `tests` entry (and maybe a recentFailures one); measured again each round
        if entry is not None:
            size = status_size_bytes(entry) + 1
            self.outbox_bytes += size
            self.outbox_items += 1
            self.largest = max(self.largest, size)

    def need(self) -> int:
        return max(self.min_test, self.largest + 300)

    def reserve(self, need: int) -> bool:
        """Room for one more test? With nothing waiting and nothing in flight there always is (a run must move)."""
        if self.base_bytes + self.outbox_bytes + self.reserved + need > self.budget and (
                self.outbox_items or self.reserved):
            return False
        self.reserved += need
        return True

    def release(self, need: int) -> None:
        self.reserved -= need
