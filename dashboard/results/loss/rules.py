"""Problem rules on the loss mesh (pure: periods in, findings out; results.analysis stores them with the grid's).

Each directed pair's recent periods, oldest first, as (period start, sent, lost). A period is lossy at
LOSS_PERCENT or more; a pair's trailing run of lossy periods is its loss stretch.
- ``loss``: the stretch is PERSISTENT_PERIODS long or longer (persistent loss on a pair).
- ``loss-onset``: the stretch is ONSET_PERIODS or longer and the CLEAN_SPAN before it was clean (below
  CLEAN_PERCENT over periods covering most of that span): a change, named with the time the loss began; the same
  problem (its key) as ``loss`` for the pair, so it keeps its first sighting when it turns persistent.
- ``loss-site`` / ``loss-node``: every pair between a site (node) and the rest of the mesh that has periods is
  lossy (at least MIN_PATHS of them) while the rest of the mesh has clean pairs: one problem for the site
  (node) instead of one per pair. A site with one node is left to the node rule.
A healthy pair (no trailing lossy period) raises nothing. Severity: critical at CRITICAL_PERCENT, else warning.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from results.problems import Finding

LOSS_PERCENT = 0.1  # a period losing this share of its packets is lossy
PERSISTENT_PERIODS = 5  # lossy periods in a row: persistent loss (5 minutes at the agents' default period)
ONSET_PERIODS = 2  # lossy periods in a row after a clean span: an onset
CLEAN_SPAN = timedelta(hours=1)
CLEAN_PERCENT = 0.01  # the span before an onset lost less than this
CLEAN_COVERAGE = 0.75  # ... over periods covering at least this share of it
CRITICAL_PERCENT = 1.0
MIN_PATHS = 2  # a node or site rule needs this many lossy pairs; fewer prove nothing about the node
LOOKBACK = CLEAN_SPAN + timedelta(minutes=30)  # how far back the rules read a lossy pair's periods
# a pair is looked at when one of its periods that started this recently lost: summaries reach the archive a
# period, the reply timeout and the collector's round after their period began
RECENT = timedelta(minutes=10)

Period = tuple[datetime, int, int]  # (start, sent, lost)
Pair = tuple[str, str, int]  # (source, destination, family)


def _percent(sent: int, lost: int) -> float:
    return 100 * lost / sent if sent else 0.0


def _lossy(p: Period) -> bool:
    return p[1] > 0 and _percent(p[1], p[2]) >= LOSS_PERCENT


def stretch(periods: Sequence[Period]) -> list[Period]:
    """The trailing lossy periods (oldest first)."""
    n = 0
    for p in reversed(periods):
        if not _lossy(p):
            break
        n += 1
    return list(periods[len(periods) - n:])


def clean_before(periods: Sequence[Period], start: datetime, period_s: float) -> bool:
    """Whether the CLEAN_SPAN before ``start`` was clean and measured (enough periods to say so)."""
    span = [p for p in periods if start - CLEAN_SPAN <= p[0] < start]
    sent, lost = sum(p[1] for p in span), sum(p[2] for p in span)
    covered = len(span) * period_s >= CLEAN_COVERAGE * CLEAN_SPAN.total_seconds()
    return covered and _percent(sent, lost) < CLEAN_PERCENT


def _ref(pair: Pair) -> tuple[str, str, str, int]:
    return (pair[0], pair[1], "loss", pair[2])


def _severity(percent: float) -> str:
    return "critical" if percent >= CRITICAL_PERCENT else "warning"


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M UTC")


def pair_finding(pair: Pair, periods: Sequence[Period], period_s: float = 60.0) -> Finding | None:
    run = stretch(periods)
    if len(run) < ONSET_PERIODS:
        return None
    sent, lost = sum(p[1] for p in run), sum(p[2] for p in run)
    pct = _percent(sent, lost)
    src, dst, family = pair
    where = f"{src} → {dst}" + (" (IPv6)" if family == 6 else "")
    key = f"loss:{src}|{dst}|{family}"
    if clean_before(periods, run[0][0], period_s):
        return Finding(key, "loss-onset", _severity(pct),
                       f"{where} began losing packets at {_fmt(run[0][0])}: {pct:.3g} % over {len(run)} periods "
                       f"after a clean hour (below {CLEAN_PERCENT} %)", (_ref(pair),))
    if len(run) >= PERSISTENT_PERIODS:
        return Finding(key, "loss", _severity(pct),
                       f"{where} loses {pct:.3g} % of its test packets, {LOSS_PERCENT} % or more in each of its "
                       f"last {len(run)} periods (since {_fmt(run[0][0])})", (_ref(pair),))
    return None


def _grouped(kind: str, group: str, pairs: Mapping[Pair, Finding], lossy_pct: Mapping[Pair, float],
             between: list[Pair]) -> Finding:
    pct = sum(lossy_pct[p] for p in between) / len(between)
    severity = "critical" if any(pairs[p].severity == "critical" for p in between) else "warning"
    what = "site" if kind == "loss-site" else "node"
    return Finding(f"{kind}:{group}", kind, severity,
                   f"every path to and from {what} {group} loses packets ({len(between)} directed pairs, "
                   f"{pct:.3g} % on average) while the rest of the mesh does not: look at {group}'s "
                   f"{'uplink or WAN link' if what == 'site' else 'NIC, uplink or host'}",
                   tuple(sorted(_ref(p) for p in between)))


def find(periods: Mapping[Pair, Sequence[Period]], measured: Iterable[Pair], sites: Mapping[str, str],
         period_s: float = 60.0) -> list[Finding]:
    """The loss problems of a mesh. ``periods``: the recent periods of each pair that lost in its newest ones
    (pairs not given are clean); ``measured``: every pair with a recent summary (clean ones too: what makes a
    node's or site's loss its own); ``sites``: node -> site ("" unknown)."""
    found = {pair: f for pair, ps in periods.items() if (f := pair_finding(pair, ps, period_s)) is not None}
    pct = {pair: _percent(sum(p[1] for p in stretch(periods[pair])), sum(p[2] for p in stretch(periods[pair])))
           for pair in found}
    measured = set(measured) | set(found)
    explained: set[Pair] = set()
    out: list[Finding] = []

    def group_rule(kind: str, member: Mapping[str, str]) -> None:
        """member: node -> its group; a group is lossy when every measured pair crossing its border is."""
        crossing: dict[str, list[Pair]] = defaultdict(list)
        for pair in measured:
            a, b = member.get(pair[0], ""), member.get(pair[1], "")
            if a and b and a != b:
                crossing[a].append(pair)
                crossing[b].append(pair)
        for group, pairs in sorted(crossing.items()):
            pairs = [p for p in pairs if p not in explained]
            lossy = [p for p in pairs if p in found]
            rest_clean = any(p not in found and member.get(p[0]) != group and member.get(p[1]) != group
                             for p in measured)
            if len(lossy) >= MIN_PATHS and len(lossy) == len(pairs) and rest_clean:
                out.append(_grouped(kind, group, found, pct, lossy))
                explained.update(lossy)

    nodes_of: dict[str, set[str]] = defaultdict(set)
    for node, site in sites.items():
        if site:
            nodes_of[site].add(node)
    group_rule("loss-site", {n: s for n, s in sites.items() if s and len(nodes_of[s]) > 1})
    group_rule("loss-node", {n: n for pair in measured for n in pair[:2]})
    out.extend(f for pair, f in sorted(found.items()) if pair not in explained)
    return out
