"""A cell's day in figures, and several days as one (pure: no database). results.rollups stores a day's figures
(DailyRollup); selectors combine days for a span that reaches before the raw horizon.

Combining is exact for the count, the failures and the mean (each day's mean weighted by its succeeded
measurements). The median of several days is approximated by the weighted median of the days' medians (each
weighted by its succeeded measurements): both it and the true median of all the values lie between the smallest and
the largest daily median, so they differ by at most that spread. (The true one does: at least half of each day's
values are at most the largest daily median, so at least half of all are; the interpolated middle of an even count
stays under it as well. The same holds from below.) A span of one day is exact."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

QUANTILES = {"p10": 0.1, "median": 0.5, "p90": 0.9}
FIGURES = ("count", "failures", "succeeded", "mean", "median", "p10", "p90", "last_at", "last_status")


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated as PostgreSQL's percentile_cont."""
    h = (len(ordered) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


def summarise(items: Iterable[tuple[datetime, float | None, str]]) -> dict[str, Any]:
    """One day's FIGURES from its (finished_at, value, status) rows; the figures are of the succeeded values."""
    items = list(items)
    values = sorted(v for _, v, s in items if s == "succeeded" and v is not None)
    last = max(items, key=lambda x: x[0])
    out: dict[str, Any] = {"count": len(items), "failures": sum(s != "succeeded" for _, _, s in items),
                           "succeeded": len(values), "mean": statistics.fmean(values) if values else None}
    out.update({name: percentile(values, q) if values else None for name, q in QUANTILES.items()})
    return {**out, "last_at": last[0], "last_status": last[2]}


def weighted_median(pieces: Iterable[tuple[float, int]]) -> float | None:
    """The lower weighted median of (value, weight) pairs; None without weight."""
    ordered = sorted((v, w) for v, w in pieces if w > 0)
    total = sum(w for _, w in ordered)
    seen = 0
    for value, weight in ordered:
        seen += weight
        if 2 * seen >= total:
            return value
    return None


def combine(days: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several days' figures (each as summarise gives them) as one span's count, failures, succeeded, mean,
    median, last_at and last_status (p10/p90 are not combined: None)."""
    succeeded = sum(d["succeeded"] for d in days)
    last = max(days, key=lambda d: d["last_at"])
    mean = sum(d["mean"] * d["succeeded"] for d in days if d["succeeded"]) / succeeded if succeeded else None
    return {"count": sum(d["count"] for d in days), "failures": sum(d["failures"] for d in days),
            "succeeded": succeeded, "mean": mean,
            "median": weighted_median((d["median"], d["succeeded"]) for d in days if d["succeeded"]),
            "p10": None, "p90": None, "last_at": last["last_at"], "last_status": last["last_status"]}
