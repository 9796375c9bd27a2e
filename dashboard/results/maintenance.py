"""Maintenance windows: which nodes and pairs are in maintenance now, for the grid's colour, the problem rules
and the operator (which leaves them out of runs)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from results.models import Maintenance

PAIR_SHIFT = 1 << 32  # a pair of node ids as one integer (source * PAIR_SHIFT + destination), for SQL arrays


def active(now: datetime | None = None) -> QuerySet[Maintenance]:
    now = now or timezone.now()
    return Maintenance.objects.filter(starts_at__lte=now, ends_at__gt=now)


@dataclass(frozen=True)
class Overlay:
    """Node ids and pairs (both directions, as source * PAIR_SHIFT + destination) in maintenance."""

    nodes: frozenset[int] = frozenset()
    pairs: frozenset[int] = frozenset()

    def covers(self, source_id: int, destination_id: int) -> bool:
        return (source_id in self.nodes or destination_id in self.nodes
                or source_id * PAIR_SHIFT + destination_id in self.pairs)


def overlay(now: datetime | None = None) -> Overlay:
    nodes: set[int] = set()
    pairs: set[int] = set()
    for m in active(now).only("node_id", "source_id", "destination_id"):
        if m.node_id is not None:
            nodes.add(m.node_id)
        else:
            for a, b in ((m.source_id, m.destination_id), (m.destination_id, m.source_id)):
                pairs.add(a * PAIR_SHIFT + b)
    return Overlay(frozenset(nodes), frozenset(pairs))


def covering(node_names: list[str], now: datetime | None = None) -> QuerySet[Maintenance]:
    """The active windows on any of these nodes, as a node or as an end of a pair."""
    return active(now).filter(Q(node__name__in=node_names) | Q(source__name__in=node_names)
                              | Q(destination__name__in=node_names))
