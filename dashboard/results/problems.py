"""Problem rules: the grid summarised into problems a person acts on, like MaDDash's reports (madalert). Pure:
cells and nodes in, findings out; results.analysis stores them and keeps acknowledgements.

Rules, in order; a cell explained by an earlier finding is not used again by a later rule:
- ``silent``: a node with no result in the benchmark's last SILENT_RUNS runs (its agent is gone or cannot test).
- ``node``: every test from a node (or to it, or both) is bad in a setting while the rest of the mesh is not:
  the node's NIC, uplink or host (sending or receiving side) — only when the cells' diagnoses (results.diagnosis)
  point at the node itself, or say nothing:
  - ``tuning``: every one of those cells is receive-window-limited (to the node) or send-buffer-limited (from it):
    one problem naming the setting and its figure (the first cell's fix), not the node; every one held by the
    *other* ends' window (tests to a far node waiting on the senders' send buffers): one problem naming those
    ends' setting, not the node;
  - ``storage`` (disk mode): every one is held by the node's disk, read from it (``source-storage``) or written
    to it (``destination-storage``): one problem naming the disk, not the NIC;
  - every one sits at the pair's path capacity or a window (network-capacity): the path allows no more, no problem
    (and no later rule uses those cells);
  - the node problem when its own evidence says so: at least half of the cells bound by its CPU or loopback
    (``source-cpu`` from it, ``destination-cpu`` to it), its disk, or by loss on every path through it (its NIC,
    uplink);
    or when none of the cells is explained (not diagnosed, or ``unknown``), as before the diagnosis. Cells that
    other limits explain (a protocol, the other ends' windows) with too little of the node's own evidence raise no
    node problem: a healthy far-away node is not sent to look at its NIC.
- ``site-pair``: every test between two sites (both directions) is degraded while each site does fine otherwise:
  the path between the sites.
- ``one-direction``: a pair is bad one way and fine the other: asymmetric path, or one host's send/receive tuning.
Bad is critical or failed; degraded adds warning. Cells in maintenance are never used.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

GRID_KINDS = ("silent", "node", "tuning", "storage", "site-pair", "one-direction")
LOSS_KINDS = ("loss", "loss-onset", "loss-node", "loss-site")  # the loss mesh's (results.loss.rules)
KINDS = GRID_KINDS + LOSS_KINDS
# diagnoses that clear a node: its cells ran into the path or a window setting, not into the node's NIC or host
WINDOW_LIMITS = {"destination": "receive-window", "source": "send-buffer"}
# disk mode: the node's disk path at its read (sending) or write (receiving) side
STORAGE_LIMITS = {"source": "source-storage", "destination": "destination-storage"}
OTHER_SIDE = {"destination": "source", "source": "destination"}
# diagnoses that are the node's own evidence, per side: its CPU or loopback, and loss on its paths (NIC, uplink)
UNEXPLAINED = frozenset({"", "unknown"})  # not diagnosed, or no bound binds (often for want of figures)
NODE_EVIDENCE = {side: {f"{side}-cpu", STORAGE_LIMITS[side], "loss"} for side in ("source", "destination")}
PATH_LIMIT = "network-capacity"
BAD = frozenset({"critical", "failed"})
DEGRADED = BAD | {"warning"}
SILENT_RUNS = 2
MIN_PEERS = 2  # a node rule needs this many pairs from (to) the node; fewer prove nothing about the node


Ref = tuple[str | int, ...]  # a cell: Cell.ref
Setting = tuple[str, int, str]  # (protocol, streams, Cell.setting): the cells a rule compares


@dataclass(frozen=True)
class Cell:
    source: str
    destination: str
    protocol: str
    streams: int
    state: str
    # the rest of the cell's setting: the address family unless IPv4, the congestion control unless the default,
    # the auth mode where the protocol has one, the storage unless memory ("ipv6 bbr", "token", "x509", "disk")
    setting: str = ""
    # the measurement's binding limit and its fix (results.diagnosis); "": not diagnosed
    limit: str = ""
    fix: str = ""

    @property
    def ref(self) -> Ref:
        """(source, destination, protocol, streams[, setting]): the setting only when there is one, so a problem
        of an IPv4, default cell keeps the fingerprint (and acknowledgement) it had before IPv6."""
        base = (self.source, self.destination, self.protocol, self.streams)
        return (*base, self.setting) if self.setting else base


@dataclass(frozen=True)
class Finding:
    key: str
    kind: str
    severity: str
    summary: str
    cells: tuple[Ref, ...]

    @property
    def fingerprint(self) -> str:
        """Changes when the severity or the cells do (what an acknowledgement was given for)."""
        return hashlib.sha256(json.dumps([self.severity, sorted(self.cells)]).encode()).hexdigest()


def _settings(cells: Iterable[Cell]) -> str:
    names = sorted({f"{c.protocol}" + (f" ×{c.streams}" if c.streams else "") + (f" {c.setting}" if c.setting else "")
                    for c in cells})
    return ", ".join(names)


def find(cells: Iterable[Cell], sites: Mapping[str, str], runs_without_result: Mapping[str, int]) -> list[Finding]:
    """The problems in one benchmark's latest grid. ``cells``: every setting's cells (maintenance ones left out);
    ``sites``: node -> site ("" when unknown); ``runs_without_result``: node -> how many of the newest runs had no
    measurement of it."""
    cells = [c for c in cells if c.state != "maintenance"]
    explained: set[Ref] = set()
    out: list[Finding] = []

    def add(finding: Finding) -> None:
        out.append(finding)
        explained.update(finding.cells)

    for node, runs in sorted(runs_without_result.items()):
        if runs >= SILENT_RUNS:
            mine = tuple(sorted(c.ref for c in cells if node in (c.source, c.destination)))
            add(Finding(f"silent:{node}", "silent", "critical",
                        f"{node} has no result in the last {runs} runs: is its agent running and Ready?", mine))

    by_setting: dict[Setting, list[Cell]] = defaultdict(list)
    for c in cells:
        by_setting[(c.protocol, c.streams, c.setting)].append(c)
    for finding in _node_findings(by_setting, explained):
        add(finding)
    for finding in _site_pair_findings(by_setting, sites, explained):
        add(finding)
    for finding in _one_direction_findings(by_setting, explained):
        add(finding)
    return out


def _node_findings(by_setting: Mapping[Setting, list[Cell]], explained: set) -> list[Finding]:
    found: dict[tuple[str, str], list[Cell]] = defaultdict(list)  # (node, side) -> its bad cells, every setting
    for group in by_setting.values():
        group = [c for c in group if c.ref not in explained]
        good = [c for c in group if c.state not in BAD]
        good_with: dict[str, int] = defaultdict(int)  # node -> good cells it is an end of
        for c in good:
            good_with[c.source] += 1
            good_with[c.destination] += 1
        for side in ("source", "destination"):
            ends: dict[str, list[Cell]] = defaultdict(list)
            for c in group:
                ends[getattr(c, side)].append(c)
            for node, mine in ends.items():
                # the rest of the mesh must have good cells without this node, or the thresholds are the problem
                rest_ok = len(good) > good_with[node]
                if len(mine) >= MIN_PEERS and all(c.state in BAD for c in mine) and rest_ok:
                    found[(node, side)].extend(mine)
    out = []
    for (node, side), mine in sorted(found.items()):
        limits = {c.limit for c in mine}
        theirs = WINDOW_LIMITS[OTHER_SIDE[side]]
        if limits == {WINDOW_LIMITS[side]}:
            out.append(_tuning_finding(node, side, mine))
        elif limits == {theirs}:
            out.append(_far_node_finding(node, side, mine))
        elif limits == {STORAGE_LIMITS[side]}:
            out.append(_storage_finding(node, side, mine))
            found[(node, side)] = []  # explained: the node's disk, not its NIC or uplink
            explained.update(c.ref for c in mine)
            continue
        if limits <= {WINDOW_LIMITS[side], theirs, PATH_LIMIT} and "" not in limits:
            found[(node, side)] = []  # explained: not the node's NIC, uplink or host; nor a later rule's
            explained.update(c.ref for c in mine)
        elif limits - UNEXPLAINED and 2 * sum(c.limit in NODE_EVIDENCE[side] for c in mine) < len(mine):
            found[(node, side)] = []  # some explained elsewhere, and mostly not the node's own evidence
    for node in sorted({n for n, side in found if found[(n, side)]}):
        sent, received = found.get((node, "source"), []), found.get((node, "destination"), [])
        if sent and received:
            what, where = "from and to", "the node itself (NIC, uplink, host)"
        elif sent:
            what, where = "from", "its sending side (NIC, uplink, TCP send tuning)"
        else:
            what, where = "to", "its receiving side (NIC, uplink, disk or TCP receive tuning)"
        mine = sent + received
        named = sorted({c.limit for c in mine if c.limit})
        why = f"; their limits: {', '.join(named)}" if named else ""
        out.append(Finding(f"node:{node}", "node", "critical",
                           f"every test {what} {node} is critical or failed ({len(mine)} cells; {_settings(mine)}"
                           f"{why}): look at {where}", tuple(sorted({c.ref for c in mine}))))
    return out


def _tuning_finding(node: str, side: str, mine: list[Cell]) -> Finding:
    """Every bad test to (from) ``node`` waited on its receive window (send buffer): the setting, not the node."""
    limit = WINDOW_LIMITS[side]
    what = "to" if side == "destination" else "from"
    fix = next((c.fix for c in mine if c.fix), f"raise the {limit.replace('-', ' ')} on {node}")
    return Finding(f"tuning:{node}:{limit}", "tuning", "warning",
                   f"every slow test {what} {node} is {limit}-limited ({len(mine)} cells; {_settings(mine)}): {fix}",
                   tuple(sorted({c.ref for c in mine})))


def _storage_finding(node: str, side: str, mine: list[Cell]) -> Finding:
    """Every bad test from (to) ``node`` was held by its disk's read (write) rate in disk mode: the storage, not the
    network; its memory-to-memory tests are fine or not in this finding."""
    action, what = ("reads", "from") if side == "source" else ("writes", "to")
    fix = next((c.fix for c in mine if c.fix), f"look at {node}'s disk path (its fio ceiling, the filesystem, the "
                                                f"device's other load)")
    return Finding(f"storage:{node}:{STORAGE_LIMITS[side]}", "storage", "warning",
                   f"every slow disk test {what} {node} is held by the disk it {action} ({len(mine)} cells; "
                   f"{_settings(mine)}): the storage, not the network: {fix}", tuple(sorted({c.ref for c in mine})))


def _far_node_finding(node: str, side: str, mine: list[Cell]) -> Finding:
    """Every bad test to (from) ``node`` waited on the other ends' send buffers (receive windows): the path to the
    node is long for their settings, which are fine on shorter paths. Their setting, not the node."""
    limit = WINDOW_LIMITS[OTHER_SIDE[side]]
    ends = "senders'" if side == "destination" else "receivers'"
    what = "to" if side == "destination" else "from"
    fix = next((c.fix for c in mine if c.fix), f"raise the {limit.replace('-', ' ')} on the other ends")
    return Finding(f"tuning:{node}:peers-{limit}", "tuning", "warning",
                   f"every slow test {what} {node} is {limit}-limited at the {ends} end ({len(mine)} cells; "
                   f"{_settings(mine)}): the path to {node} is long for their window: {fix}",
                   tuple(sorted({c.ref for c in mine})))


def _site_pair_findings(by_setting: Mapping[Setting, list[Cell]], sites: Mapping[str, str],
                        explained: set) -> list[Finding]:
    between: dict[tuple[str, str], list[Cell]] = defaultdict(list)
    healthy: dict[str, bool] = defaultdict(bool)  # site -> has a good cell not crossing to a degraded site pair
    for group in by_setting.values():
        for c in group:
            if c.ref in explained:
                continue
            a, b = sites.get(c.source, ""), sites.get(c.destination, "")
            if not a or not b:
                continue
            if a == b:
                healthy[a] |= c.state not in DEGRADED
            else:
                between[(min(a, b), max(a, b))].append(c)
    def both_ways_degraded(key: tuple[str, str], mine: list[Cell]) -> bool:
        from_sites = {sites[c.source] for c in mine}
        return set(key) <= from_sites and all(c.state in DEGRADED for c in mine)

    bad_pairs = {k: v for k, v in between.items() if both_ways_degraded(k, v)}
    for (a, b), mine in between.items():
        if (a, b) not in bad_pairs:
            ok = any(c.state not in DEGRADED for c in mine)
            healthy[a] |= ok
            healthy[b] |= ok
    out = []
    for (a, b), mine in sorted(bad_pairs.items()):
        if not (healthy[a] and healthy[b]):
            continue  # a site bad everywhere is not a path problem between two sites
        severity = "critical" if all(c.state in BAD for c in mine) else "warning"
        out.append(Finding(f"site-pair:{a}|{b}", "site-pair", severity,
                           f"every test between sites {a} and {b} is degraded ({len(mine)} cells, both directions; "
                           f"{_settings(mine)}) while both sites do fine otherwise: look at the path between them",
                           tuple(sorted(c.ref for c in mine))))
    return out


def _one_direction_findings(by_setting: Mapping[Setting, list[Cell]], explained: set) -> list[Finding]:
    out = []
    for group in by_setting.values():
        state = {(c.source, c.destination): c for c in group if c.ref not in explained}
        for (s, d), c in sorted(state.items()):
            back = state.get((d, s))
            if c.state in BAD and back is not None and back.state == "ok":
                key = f"one-direction:{s}|{d}|{c.protocol}|{c.streams}" + (f"|{c.setting}" if c.setting else "")
                out.append(Finding(key, "one-direction", "warning",
                                   f"{s} → {d} is {c.state} but {d} → {s} is fine ({_settings([c])}): one direction "
                                   f"only: an asymmetric path, or {s}'s sending or {d}'s receiving tuning",
                                   (c.ref,)))
    return out
