"""Paths: the route each probe test traced (the rtt measurement's `path`), stored at ingest, and path changes (a hop
list that differs from the pair's previous one) as Change rows of metric "path".

A hop that did not answer (null) matches any address: routers that rate-limit their ICMP answers would otherwise
make a change of every run. A path with no hops (the probe failed) is stored with its error and compared with
nothing. Compared with the pair's newest earlier path at ingest; a batch that arrives after a later run's does not
re-judge that later path."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import OuterRef, Subquery
from django.utils import timezone

from results.models import Change, Path

MAX_PACKET = 65535  # IP packets stop at 65,535 bytes: a loopback's 65,536-byte MTU is not a reduced path


def same_route(before: Sequence[str | None], after: Sequence[str | None]) -> bool:
    """Equal hop lists, where a hop that did not answer on either side matches."""
    return len(before) == len(after) and all(a is None or b is None or a == b
                                             for a, b in zip(before, after, strict=True))


def pmtu_reduced(pmtu: int | None, interface_mtu: int | None) -> bool | None:
    if pmtu is None or interface_mtu is None:
        return None
    return pmtu < min(interface_mtu, MAX_PACKET)


def path_row(measurement_id: str, benchmark_id: int, source_id: int, destination_id: int, at: datetime,
             path: Mapping[str, Any]) -> Path:
    hops = list(path.get("hops") or [])
    return Path(measurement_id=measurement_id, benchmark_id=benchmark_id, source_id=source_id,
                destination_id=destination_id, at=at, hops=hops, hop_count=len(hops),
                reached=bool(path.get("reached")), pmtu=path.get("pmtu"), interface_mtu=path.get("interface_mtu"),
                pmtu_reduced=pmtu_reduced(path.get("pmtu"), path.get("interface_mtu")),
                error=(path.get("error") or None))


def store(rows: list[Path]) -> list[Change]:
    """Insert the new paths, mark each against the pair's newest earlier path with hops, and add a Change for each
    that differs. One query finds every previous path (a correlated subquery on the pair's index)."""
    if not rows:
        return []
    Path.objects.bulk_create(rows, batch_size=1000)
    earlier = Path.objects.filter(benchmark_id=OuterRef("benchmark_id"), source_id=OuterRef("source_id"),
                                  destination_id=OuterRef("destination_id"), at__lt=OuterRef("at"),
                                  hop_count__gt=0).order_by("-at")
    fresh = (Path.objects.filter(measurement_id__in=[r.measurement_id for r in rows], hop_count__gt=0)
             .annotate(prev_hops=Subquery(earlier.values("hops")[:1]),
                       prev_count=Subquery(earlier.values("hop_count")[:1]))
             .only("id", "measurement_id", "benchmark_id", "source_id", "destination_id", "at", "hops", "hop_count",
                   "reached"))
    now = timezone.now()
    marked, found = [], []
    for p in fresh:
        if p.prev_hops is None:
            continue
        before = json.loads(p.prev_hops) if isinstance(p.prev_hops, str) else p.prev_hops
        p.changed = not same_route(before, p.hops)
        marked.append(p)
        if p.changed:
            found.append(Change(benchmark_id=p.benchmark_id, source_id=p.source_id, destination_id=p.destination_id,
                                protocol="rtt", streams=0, metric="path", measurement_id=p.measurement_id, at=p.at,
                                before=float(p.prev_count), after=float(p.hop_count),
                                worse=p.hop_count > p.prev_count or not p.reached, detected_at=now,
                                runs_to_detect=1))
    Path.objects.bulk_update(marked, ["changed"], batch_size=1000)
    Change.objects.bulk_create(found, ignore_conflicts=True)
    return found
