"""Nodes and pairs in maintenance, which a run leaves out (pure: annotations and the dashboard's answer in, the
run's exclusions out).

Two sources, either enough: a node's annotations, set with kubectl by whoever works on it,

    kubectl annotate node dtn-b tpcmesh.io/maintenance-until=2026-12-01T18:00:00Z \
        tpcmesh.io/maintenance-reason="NIC swap"

and the dashboard's windows (GET /api/v1/maintenance/?active=true; a node, or a pair in both directions).
A window has ended when its until time has passed; an annotation whose time does not parse is named in the
run's status and ignored (a typo must not stop a node from being measured forever).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

UNTIL = "tpcmesh.io/maintenance-until"
REASON = "tpcmesh.io/maintenance-reason"


@dataclass(frozen=True)
class Window:
    node: str | None  # a node, or
    pair: tuple[str, str] | None  # a pair (both directions)
    reason: str
    until: str  # RFC 3339
    origin: str  # "annotation" or "dashboard"

    def to_dict(self) -> dict[str, Any]:
        what = {"node": self.node} if self.node else {"pair": list(self.pair or ())}
        return {**what, "reason": self.reason, "until": self.until, "origin": self.origin}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Window:
        pair = d.get("pair")
        return cls(d.get("node"), (pair[0], pair[1]) if pair else None, d.get("reason", ""), d.get("until", ""),
                   d.get("origin", ""))


def _time(value: str) -> datetime:
    t = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    if t.tzinfo is None:
        raise ValueError("no UTC offset")
    return t


def from_annotations(node: str, annotations: Mapping[str, str] | None, now: datetime) -> Window | str | None:
    """The node's window while it lasts; an error text for an until time that does not parse; else None."""
    until = (annotations or {}).get(UNTIL)
    if not until:
        return None
    try:
        end = _time(until)
    except ValueError:
        return (f"node {node}: annotation {UNTIL}={until!r} is not an RFC 3339 time with an offset "
                "(e.g. 2026-12-01T18:00:00Z); the node is measured")
    if end <= now:
        return None
    return Window(node, None, (annotations or {}).get(REASON, "") or "(no reason given)", until, "annotation")


def from_dashboard(items: Iterable[Mapping[str, Any]], now: datetime) -> list[Window]:
    """Active windows from the dashboard's maintenance list (its `results`)."""
    out = []
    for w in items:
        try:
            if _time(w["ends_at"]) <= now or _time(w["starts_at"]) > now:
                continue
        except (KeyError, TypeError, ValueError):
            continue
        pair = (w["source"], w["destination"]) if w.get("source") and w.get("destination") else None
        if w.get("node") or pair:
            out.append(Window(w.get("node"), pair, w.get("reason", ""), w["ends_at"], "dashboard"))
    return out


def excluded(windows: Iterable[Window], nodes: Iterable[str]) -> tuple[set[str], set[tuple[str, str]]]:
    """The nodes to leave out, and the ordered pairs (both directions of each pair window) among the rest."""
    windows = list(windows)
    names = set(nodes)
    out_nodes = {w.node for w in windows if w.node and w.node in names}
    out_pairs = set()
    for w in windows:
        if w.pair and not (set(w.pair) & out_nodes) and set(w.pair) <= names:
            a, b = w.pair
            out_pairs |= {(a, b), (b, a)}
    return out_nodes, out_pairs


def now_utc() -> datetime:
    return datetime.now(UTC)
