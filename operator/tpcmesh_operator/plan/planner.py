"""Mesh planning. PURE: agents + spec -> the ordered tests, grouped in rounds. No I/O, no kopf, no clients.

Rules:
- In a round no agent takes part in more than one test of any kind (TPC, iperf3, RTT), so tests never disturb
  each other; the tests of a round run in parallel, rounds one after another.
- A setting is one (protocol, streams, congestion control, address family), or `rtt` (per family) for the
  latency probe. Every selected directed pair is measured once in every setting. With spec.optimize a file
  mover's streams are one `optimized` setting: the executor picks each link's streams x files (its advice).
- Address families (spec.addressFamilies): an IPv6 setting measures only the pairs whose two agents have IPv6
  (`families`, from the agents' addresses); the others are listed in Plan.family_skipped with the reason, never
  dropped silently. Such a family's rounds are planned anew among the agents that have it (same pair selection,
  maintenance and policy), so they meet the bound for those agents, not the whole mesh's rounds with holes.
- A full directed mesh of N agents uses exactly the lower bound ceil(N(N-1)/floor(N/2)) rounds per setting:
  the circle method (1-factorization of K_N, a bye for odd N) gives N-1 (N even) or N (N odd) rounds of
  unordered pairs; each is played once in each direction. Other pair selections (explicit lists, groups) are
  coloured greedily (first fit), which is within the usual bounds and deterministic.
- Round policies (spec.roundPolicy) say what else may not share a round:
  `nodeExclusive` (the default): only the rule above.
  `siteExclusive`: no two tests of a round touch the same site (spec.siteLabel of the nodes, default
  topology.kubernetes.io/zone; a node without it is a site of its own), so concurrent tests never share a site's
  uplink. A round is then a matching of the site multigraph (a test between two sites an edge between them, a
  test within a site an edge from the site to a private dummy vertex), so the fewest rounds is its chromatic
  index. Lower bound (site_lower_bound): max(Delta, ceil(Gamma)), Delta the busiest site's tests, Gamma the odd-set
  density max over odd vertex sets U of 2|E(U)| / (|U| - 1) (the fractional chromatic index); by the
  Goldberg-Seymour theorem (proved by Chen, Jing and Zang) the optimum is at most max(Delta + 1, ceil(Gamma)), so
  the bound is the optimum or one less. Equal sites: the circle method over the sites (it meets the bound); else
  the busiest-first greedy when it meets the quick bounds, otherwise the fractional edge-colouring LP by column
  generation and its integer rounding (plan/siterounds.py). Every mix of up to 8 sites of 1-6 agents plus up to 3
  agents without a site (12,007 mixes, swept once) is planned AT the bound, in at most 1.0 s (median 3 ms) on a
  loaded 2-core machine; before, the circle method and the greedy alone were above it in 760 of them, by up to
  21.6 % (six sites of 3 and one lone agent: 124 rounds for 102) or 46 rounds (six sites of 6 and one lone agent);
  the odd-set term raises the bound above the old density bounds in 128 of them. Larger near-equal mixes spend a
  bounded LP budget and may end one round above (16 sites of 2 and one of 1: 129 for 128); beyond
  siterounds.MAX_LP_EDGES (21 sites and more) the greedy stands (24 sites of 5 and one of 4: 1240 for 1230).
  `make bench-planner` shows the bound met for 1000 agents in 50 sites, equal or not.
  `serial`: one test per round (the 003 paper's one pair at a time).
- Storage (spec.storage): memory and/or disk, a setting of its own for the file movers (storage_settings: with
  both, memory->memory, disk->memory, memory->disk and disk->disk); iperf3 and the RTT probe have no storage. With
  disk, each agent's disk ceilings (fio) are measured with the loopback round, all at once (Plan.ceiling_agents).
- Loopback (spec.loopback): one round first in which every agent of the plan tests against itself (its own
  ceiling, the grid's diagonal): all at once, each agent in exactly one test.
- External endpoints (spec.externalEndpoints, external/endpoints.py) join after the mesh: each agent of the plan pulls
from
  every source endpoint and sends to every destination endpoint (never external to external), in the settings of
  the endpoint's protocol only, node-exclusive like the rest (an endpoint is in one test a round: it is another
  site's storage, not ours to load). An endpoint named like an agent's node is left out (`Plan.problems`).
- Deterministic: the same agents (in any order) and spec give the same plan.

A `Plan` is compact: the pair rounds (index pairs) are computed once and shared by every setting, and tests are
materialised per round, so 1000 agents plan in well under a second.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..protocols import TPC_PROTOCOLS
from . import siterounds
from .spec import BenchmarkSpec

RTT = "rtt"
FAMILY_NAMES = {"ipv4": "IPv4", "ipv6": "IPv6"}
CONGESTION_PROTOCOLS = ("builtin", "iperf3")  # movers that set the congestion control; the others keep the default
MEMORY_TO_MEMORY = ("memory", "memory")


@dataclass(frozen=True, order=True)
class Setting:
    protocol: str
    streams: int | None = None  # None for rtt
    loopback: bool = False  # each agent against itself
    congestion: str | None = None  # the senders' TCP congestion control (spec.tcp); None: the nodes' default
    repeat: int = 0  # which of spec.repeats measurements of the setting (0 = the first or only one)
    family: str = "ipv4"  # the IP version the test runs over (spec.addressFamilies)
    optimized: bool = False  # spec.optimize: each link's streams x files come from its advice (streams None)
    storage: tuple[str, str] = MEMORY_TO_MEMORY  # (source's, destination's): where the files are read and written

    @property
    def on_disk(self) -> bool:
        """An end reads or writes its disk path (spec.storage disk)."""
        return self.storage != MEMORY_TO_MEMORY

    @property
    def source_on_disk(self) -> bool:
        """The source reads its disk set (made cold before each test)."""
        return self.storage[0] == "disk"

    def storage_request(self) -> dict[str, str]:
        """The agent's `storage` of a transfer request and of its record: {source, destination}."""
        return {"source": self.storage[0], "destination": self.storage[1]}

    @property
    def key(self) -> str:
        key = f"{self.protocol}/auto" if self.optimized else (
            self.protocol if self.streams is None else f"{self.protocol}/{self.streams}")
        if self.congestion:
            key += f"/{self.congestion}"
        if self.family != "ipv4":  # IPv4 keys as before IPv6: a run resumed across the upgrade keeps its tests
            key += f"/{self.family}"
        if self.on_disk:  # memory to memory keys as before disk mode, for the same reason
            key += f"/{self.storage[0]}-{self.storage[1]}"
        if self.repeat:
            key += f"#{self.repeat}"
        return f"loopback/{key}" if self.loopback else key


@dataclass(frozen=True)
class Test:
    __test__ = False  # not a pytest class

    round: int
    setting: Setting
    source: str
    destination: str

    @property
    def key(self) -> str:
        """Stable identity within a run, e.g. `xrootd-https/8:node-a>node-b`."""
        return f"{self.setting.key}:{self.source}>{self.destination}"


@dataclass(frozen=True)
class Plan:
    agents: tuple[str, ...]
    settings: tuple[Setting, ...]
    pair_rounds: tuple[tuple[tuple[int, int], ...], ...]
    skipped: tuple[tuple[str, str, str], ...] = field(default=())  # (source, destination, reason)
    loopback: Setting | None = None  # round 0 tests each of loopback_agents against itself
    loopback_agents: tuple[int, ...] = ()
    externals: tuple[str, ...] = ()  # external endpoints' names: index len(agents) + i in external_rounds
    external_rounds: tuple[tuple[int, tuple[tuple[int, int], ...]], ...] = ()  # (settings index, pairs), last
    problems: tuple[str, ...] = ()  # what the plan left out and why (for an Event)
    # families whose agents do not all have them: their own rounds (pair_rounds less the pairs lacking it), and
    # the pairs left out of them: (source, destination, family, reason)
    family_rounds: tuple[tuple[str, tuple[tuple[tuple[int, int], ...], ...]], ...] = ()
    family_skipped: tuple[tuple[str, str, str, str], ...] = ()
    # spec.storage disk: the agents whose disk path's ceilings (fio) are measured, all at once, before round 0
    ceiling_agents: tuple[int, ...] = ()

    @property
    def rounds_per_setting(self) -> int:
        return len(self.pair_rounds)

    def rounds_of(self, setting: Setting) -> tuple[tuple[tuple[int, int], ...], ...]:
        """The pair rounds a setting is measured in (its family's)."""
        for family, rounds in self.family_rounds:
            if family == setting.family:
                return rounds
        return self.pair_rounds

    @property
    def loopback_rounds(self) -> int:
        return 1 if self.loopback is not None and self.loopback_agents else 0

    @property
    def mesh_rounds(self) -> int:
        return self.loopback_rounds + sum(len(self.rounds_of(s)) for s in self.settings)

    @property
    def num_rounds(self) -> int:
        return self.mesh_rounds + len(self.external_rounds)

    @property
    def num_pairs(self) -> int:
        return sum(len(r) for r in self.pair_rounds)

    @property
    def num_tests(self) -> int:
        return (len(self.loopback_agents) * self.loopback_rounds
                + sum(len(p) for s in self.settings for r in [self.rounds_of(s)] for p in r)
                + sum(len(pairs) for _, pairs in self.external_rounds))

    def is_external(self, name: str) -> bool:
        return name in self.externals

    def skipped_summary(self) -> str:
        """The family skips in a line: which node lacks which family, and how many tests that leaves out."""
        lacking: dict[tuple[str, str], int] = {}
        for setting, _, _, reason in self.skipped_tests():
            lacking[(setting.family, reason)] = lacking.get((setting.family, reason), 0) + 1
        return "; ".join(f"{reason} ({n} {FAMILY_NAMES[family]} tests)"
                         for (family, reason), n in sorted(lacking.items()))

    def skipped_tests(self) -> Iterator[tuple[Setting, str, str, str]]:
        """(setting, source, destination, reason) of every test the plan leaves out of a setting's family."""
        for s, d, family, reason in self.family_skipped:
            for setting in self.settings:
                if setting.family == family:
                    yield setting, s, d, reason

    def round(self, index: int) -> list[Test]:
        if not 0 <= index < self.num_rounds:
            raise IndexError(index)
        names = self.agents
        if index < self.loopback_rounds:
            assert self.loopback is not None
            return [Test(index, self.loopback, names[a], names[a]) for a in self.loopback_agents]
        if index >= self.mesh_rounds:
            si, pairs = self.external_rounds[index - self.mesh_rounds]
            everyone = names + self.externals
            return [Test(index, self.settings[si], everyone[s], everyone[d]) for s, d in pairs]
        i = index - self.loopback_rounds
        for setting in self.settings:  # a handful of settings: a walk is as quick as an offset table
            rounds = self.rounds_of(setting)
            if i < len(rounds):
                return [Test(index, setting, names[s], names[d]) for s, d in rounds[i]]
            i -= len(rounds)
        raise AssertionError("unreachable: index checked against num_rounds")

    def rounds(self) -> Iterator[list[Test]]:
        for i in range(self.num_rounds):
            yield self.round(i)

    def tests(self) -> Iterator[Test]:
        for r in self.rounds():
            yield from r


def lower_bound(n: int) -> int:
    """Minimum rounds for a full directed mesh of n agents when each agent is in at most one test per round."""
    if n < 2:
        return 0
    half = n // 2
    return -(-n * (n - 1) // half)


def storage_settings(spec: BenchmarkSpec) -> tuple[tuple[str, str], ...]:
    """The (source, destination) storages a file mover is measured in (spec.storage): [memory] memory to memory,
    [disk] disk to disk, both: the four ends' combinations, so each end's storage tax shows beside the papers'
    figure (memory to memory first, disk to disk last)."""
    if spec.storage == ("memory",):
        return (MEMORY_TO_MEMORY,)
    if spec.storage == ("disk",):
        return (("disk", "disk"),)
    return (MEMORY_TO_MEMORY, ("disk", "memory"), ("memory", "disk"), ("disk", "disk"))


CEILING_JOBS_MAX = 256  # the agent's limit of fio jobs (agent ceilings.MAX_CONCURRENCY)
CEILING_BYTES = (2**20, 2**30)  # bytes each fio job writes and reads: the file size, within these bounds
CEILING_DATASET_BYTES = 256 * 2**20  # a dataset's files vary in size: this much per job
CEILING_SECONDS = 60  # at most, per phase (write, then read)


def ceilings_request(spec: BenchmarkSpec) -> dict[str, int]:
    """The body of the agents' POST /api/v1/storage/ceilings (fio, sequential 1 MiB blocks, O_DIRECT): a job per
    file in flight (spec.concurrency), each writing then reading about a file's size."""
    size = spec.file_set.size or CEILING_DATASET_BYTES
    return {"concurrency": min(spec.concurrency, CEILING_JOBS_MAX),
            "size": max(CEILING_BYTES[0], min(size, CEILING_BYTES[1])),
            "runtime_seconds": min(CEILING_SECONDS, spec.timeout_seconds)}


def settings_for(spec: BenchmarkSpec) -> tuple[Setting, ...]:
    """Per address family: RTT first (it is quick and its result goes with every measurement of the pair), then
    storage x protocol x streams x congestion control; with spec.repeats = K, K passes over those settings one
    after another (repeat 0, 1, ...), so a setting's repeats are spread over the run rather than back to back (a
    passing disturbance hits one of them). With spec.optimize a file mover has one setting, `optimized` (key
    `<protocol>/auto`): each link's streams x files are chosen when its test starts (run/executor.py, the advice).
    Storage (storage_settings) applies to the file movers; iperf3 moves no file and is measured once."""
    out = []
    for f in spec.address_families:
        out += [Setting(RTT, family=f)] if spec.latency else []
        out += [Setting(p, s, congestion=c, repeat=r, family=f, optimized=s is None, storage=st)
                for r in range(spec.repeats)
                for st in storage_settings(spec) for p in spec.protocols
                if p in TPC_PROTOCOLS or st == MEMORY_TO_MEMORY
                for s in ((None,) if spec.optimize is not None and p in TPC_PROTOCOLS else spec.streams)
                for c in (spec.congestion_control if p in CONGESTION_PROTOCOLS and spec.congestion_control
                          else (None,))]
    return tuple(out)


def _family_rounds(names: Sequence[str], rounds: Sequence[Sequence[tuple[int, int]]], spec: BenchmarkSpec,
                   families: Mapping[str, Collection[str]] | None,
                   rounds_among: Callable[[Sequence[int]], list[list[tuple[int, int]]]]):
    """Per family some agents lack: its rounds, planned anew among the agents that have it (so a family of a few
    agents takes their rounds, not the whole mesh's with holes), and the pairs of the full plan it leaves out,
    each with a reason."""
    out_rounds, skipped = [], []
    for family in spec.address_families:
        lacking = {i for i, n in enumerate(names) if families is not None and family not in families.get(n, ())}
        if not lacking:
            continue
        for r in rounds:
            for s, d in r:
                if s in lacking or d in lacking:
                    who = names[s] if s in lacking else names[d]
                    skipped.append((names[s], names[d], family, f"node {who} has no {FAMILY_NAMES[family]} address"))
        members = [i for i in range(len(names)) if i not in lacking]
        out_rounds.append((family, tuple(tuple(r) for r in rounds_among(members))))
    return tuple(out_rounds), tuple(skipped)


def _selected_rounds(members: Sequence[int], names: Sequence[str], labels: Mapping[str, Mapping[str, str]],
                     spec: BenchmarkSpec, explicit: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """The node-exclusive rounds of the pairs spec.pairs selects among `members` (agent indices): the circle
    method for a full mesh, first-fit colouring otherwise."""
    if spec.pairs.mode == "fullMesh":
        return [[(members[a], members[b]) for a, b in r] for r in full_mesh_rounds(len(members))]
    among = set(members)
    if spec.pairs.mode == "explicit":
        return color_pairs(sorted(p for p in explicit if p[0] in among and p[1] in among))
    a = [i for i in members if _matches(labels[names[i]], spec.pairs.group_a)]
    b = [i for i in members if _matches(labels[names[i]], spec.pairs.group_b)]
    pairs_set: set[tuple[int, int]] = set()
    for x in a:
        for y in b:
            if x == y:
                continue
            if spec.pairs.direction in ("both", "aToB"):
                pairs_set.add((x, y))
            if spec.pairs.direction in ("both", "bToA"):
                pairs_set.add((y, x))
    # interleave by offset so the greedy colouring spreads load (deterministic)
    return color_pairs(sorted(pairs_set, key=lambda p: ((p[1] - p[0]) % max(len(names), 1), p)))


def _policy_rounds(rounds: list[list[tuple[int, int]]], members: Sequence[int], spec: BenchmarkSpec,
                   excluded: Collection[tuple[int, int]], site_of: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Node-exclusive rounds among `members` less the excluded pairs, reshaped by spec.roundPolicy."""
    if excluded:
        rounds = [kept for r in rounds if (kept := [p for p in r if p not in excluded])]
    if spec.round_policy == "serial":
        return serial_rounds(p for r in rounds for p in r)
    if spec.round_policy == "siteExclusive":
        # the node-exclusive order is kept within each site pair: directions alternate, agents take turns; the
        # schedule sees only the members' sites (a site none of them is in is no site of this mesh)
        local = {m: i for i, m in enumerate(members)}
        sites = {site_of[m]: None for m in members}
        renumber = {site: i for i, site in enumerate(sites)}
        scheduled = site_exclusive_rounds([renumber[site_of[m]] for m in members],
                                          [(local[a], local[b]) for r in rounds for a, b in r])
        return [[(members[a], members[b]) for a, b in r] for r in scheduled]
    return rounds


def full_mesh_rounds(n: int) -> list[list[tuple[int, int]]]:
    """Directed full mesh on indices 0..n-1 in exactly lower_bound(n) rounds (circle method, both directions)."""
    if n < 2:
        return []
    m = n + (n % 2)  # odd: add a bye (index n)
    rest = list(range(1, m))
    half_rounds: list[list[tuple[int, int]]] = []
    for r in range(m - 1):
        ring = [0] + rest[r:] + rest[:r]
        pairs = []
        for i in range(m // 2):
            a, b = ring[i], ring[m - 1 - i]
            if a == n or b == n:
                continue
            # alternate orientation so each agent sends and receives about equally in the first half
            pairs.append((a, b) if (i + r) % 2 == 0 else (b, a))
        half_rounds.append(pairs)
    return half_rounds + [[(b, a) for a, b in rnd] for rnd in half_rounds]


def color_pairs(pairs: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Greedy first-fit: each pair goes into the first round where neither agent is busy."""
    busy: dict[int, set[int]] = {}
    rounds: list[list[tuple[int, int]]] = []
    for s, d in pairs:
        bs, bd = busy.setdefault(s, set()), busy.setdefault(d, set())
        r = 0
        while r in bs or r in bd:
            r += 1
        if r == len(rounds):
            rounds.append([])
        rounds[r].append((s, d))
        bs.add(r)
        bd.add(r)
    return rounds


def serial_rounds(pairs: Iterable[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    return [[p] for p in pairs]


def _simple_site_bound(site_of: Sequence[int], pairs: Sequence[tuple[int, int]]) -> int:
    """Quick lower bounds (all implied by site_lower_bound's): the busiest site's tests, ceil(inter-site tests /
    floor(S/2)) and ceil((2 x inter-site + intra-site tests) / S) (a round holds at most one test per site)."""
    touching: dict[int, int] = {}
    inter = intra = 0
    for s, d in pairs:
        a, b = site_of[s], site_of[d]
        touching[a] = touching.get(a, 0) + 1
        if a != b:
            touching[b] = touching.get(b, 0) + 1
            inter += 1
        else:
            intra += 1
    if not touching:
        return 0
    n = len(set(site_of))
    bounds = [max(touching.values()), -(-(2 * inter + intra) // n)]
    if inter:
        bounds.append(-(-inter // (n // 2)))
    return max(bounds)


def site_lower_bound(site_of: Sequence[int], pairs: Iterable[tuple[int, int]]) -> int:
    """The fewest rounds in which ``pairs`` (agent indices) can run when each site is in at most one test a round,
    as far as a bound can tell: max(Delta, ceil(Gamma)) of the site multigraph (plan/siterounds.py: Delta the busiest
    site's tests, Gamma the odd-set density max over odd vertex sets U of 2|E(U)| / (|U| - 1), an intra-site test
    an edge to the site's private dummy vertex). The optimum is this bound or one more (Goldberg-Seymour)."""
    pairs = list(pairs)
    return max(_simple_site_bound(site_of, pairs), siterounds.lower_bound(siterounds.SiteGraph.of(site_of, pairs)))


def _split_by_site(site_of: Sequence[int], pairs: Sequence[tuple[int, int]]):
    """Queues (popped from the end, so in the given order) of the pairs between two sites and within one."""
    between: dict[tuple[int, int], list[tuple[int, int]]] = {}
    within: dict[int, list[tuple[int, int]]] = {}
    for s, d in pairs:
        a, b = site_of[s], site_of[d]
        if a == b:
            within.setdefault(a, []).append((s, d))
        else:
            between.setdefault((min(a, b), max(a, b)), []).append((s, d))
    for queue in (*between.values(), *within.values()):
        queue.reverse()
    return between, within


def _circle_schedule(site_of: Sequence[int], pairs: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """The circle method over sites: each of its matchings runs until its busiest site pair is done, free sites
    (the bye, pairs done early) run their own pairs meanwhile; the rest of the intra-site pairs last. Optimal for
    equal sites."""
    between, within = _split_by_site(site_of, pairs)
    sites = sorted(set(site_of))
    rounds: list[list[tuple[int, int]]] = []
    for matching in full_mesh_rounds(len(sites))[: max(len(sites) - 1 + len(sites) % 2, 0)]:
        queues = [between[key] for i, j in matching
                  if (key := (min(sites[i], sites[j]), max(sites[i], sites[j]))) in between]
        while any(queues):
            rnd = [q.pop() for q in queues if q]
            busy = {site_of[x] for p in rnd for x in p}
            rnd += [within[site].pop() for site in sites if site not in busy and within.get(site)]
            rounds.append(rnd)
    while any(within.values()):
        rounds.append([within[site].pop() for site in sorted(within) if within[site]])
    return rounds


def _busiest_first_schedule(site_of: Sequence[int], pairs: Sequence[tuple[int, int]],
                            stretch: int = 16) -> list[list[tuple[int, int]]]:
    """Greedy for unequal sites: the site with the most tests left picks first, pairing with the free site it has
    the most tests left with (else runs one of its own pairs); a matching is kept for up to ``stretch`` rounds."""
    between, within = _split_by_site(site_of, pairs)
    left: dict[int, int] = {}
    partners: dict[int, set[int]] = {}
    for (a, b), q in between.items():
        left[a] = left.get(a, 0) + len(q)
        left[b] = left.get(b, 0) + len(q)
        partners.setdefault(a, set()).add(b)
        partners.setdefault(b, set()).add(a)
    for a, q in within.items():
        left[a] = left.get(a, 0) + len(q)
    rounds: list[list[tuple[int, int]]] = []
    while any(left.values()):
        busy: set[int] = set()
        slots: list[list[tuple[int, int]]] = []
        for a in sorted((x for x in left if left[x]), key=lambda x: (-left[x], x)):
            if a in busy:
                continue
            free = [b for b in partners.get(a, ()) if b not in busy]
            if free:
                b = max(free, key=lambda x: (len(between[(min(a, x), max(a, x))]), left[x], -x))
                slots.append(between[(min(a, b), max(a, b))])
                busy |= {a, b}
            elif within.get(a):
                slots.append(within[a])
                busy.add(a)
        for _ in range(min(stretch, *(len(q) for q in slots))):
            rnd = [q.pop() for q in slots]
            for s, d in rnd:
                for site in {site_of[s], site_of[d]}:
                    left[site] -= 1
            rounds.append(rnd)
        for key in [k for k, q in between.items() if not q]:
            del between[key]
            partners[key[0]].discard(key[1])
            partners[key[1]].discard(key[0])
    return rounds


def _colour_schedule(site_of: Sequence[int], pairs: Sequence[tuple[int, int]],
                     start: Sequence[Sequence[tuple[int, int]]]) -> list[list[tuple[int, int]]] | None:
    """The site multigraph's edge colouring (siterounds.colour, begun from the rounds ``start``) turned into
    agent tests: each of its matchings is a block of rounds, each round taking the next test of every site pair
    (or site) of the matching, in the node-exclusive order. None when the graph is too large for the LP."""
    graph = siterounds.SiteGraph.of(site_of, pairs)
    edge = {e: i for i, e in enumerate(graph.edges)}
    n = graph.n

    def key(s: int, d: int) -> int:
        a, b = site_of[s], site_of[d]
        return edge[(min(a, b), max(a, b)) if a != b else (a, n + a)]

    blocks = siterounds.colour(graph, [frozenset(key(s, d) for s, d in r) for r in start])
    if blocks is None:
        return None
    between, within = _split_by_site(site_of, pairs)
    queues = [within[u] if v >= n else between[(u, v)] for u, v in graph.edges]
    rounds: list[list[tuple[int, int]]] = []
    for col, k in sorted(blocks, key=lambda b: (-b[1], sorted(b[0]))):
        for _ in range(k):
            rnd = [queues[i].pop() for i in sorted(col) if queues[i]]
            if rnd:
                rounds.append(rnd)
    return None if any(queues) else rounds


def site_exclusive_rounds(site_of: Sequence[int], pairs: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Rounds in which no two tests share a site: the circle method over the sites (optimal for equal sites) or
    the busiest-first greedy when either meets the quick bounds (_simple_site_bound: then it is optimal); else the
    site multigraph's edge colouring by the fractional colouring LP and its integer rounding (siterounds.colour),
    and the shortest of the three. The colouring meets site_lower_bound or stays within one round of it on the
    mixes swept (module docstring); a site graph beyond siterounds.MAX_LP_EDGES edges keeps the shorter of the
    circle and the greedy."""
    pairs = list(pairs)
    quick = _simple_site_bound(site_of, pairs)
    circle = _circle_schedule(site_of, pairs)
    if len(circle) == quick:
        return circle
    greedy = _busiest_first_schedule(site_of, pairs)
    best = greedy if len(greedy) < len(circle) else circle
    if len(best) == quick:
        return best
    coloured = _colour_schedule(site_of, pairs, best)
    return coloured if coloured is not None and len(coloured) < len(best) else best


def _site_indices(names: Sequence[str], labels: Mapping[str, Mapping[str, str]], site_label: str) -> list[int]:
    """Each agent's site as a small integer; an agent without the label is a site of its own."""
    ids: dict[tuple[bool, str], int] = {}
    out = []
    for n in names:
        site = labels[n].get(site_label)
        key = (True, site) if site else (False, n)
        out.append(ids.setdefault(key, len(ids)))
    return out


def _matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def plan(
    agents: Iterable[str] | Mapping[str, Mapping[str, str]],
    spec: BenchmarkSpec,
    exclude_pairs: Collection[tuple[str, str]] = (),
    families: Mapping[str, Collection[str]] | None = None,
) -> Plan:
    """Plan a run. `agents`: node names, or node name -> labels (needed for `pairs.mode: groups`).
    `exclude_pairs`: (source, destination) pairs left out (in maintenance). `families`: node name -> the address
    families its agent has (ipv4, ipv6); None: every agent has every family."""
    labels: Mapping[str, Mapping[str, str]] = agents if isinstance(agents, Mapping) else {a: {} for a in agents}
    names = tuple(sorted(set(labels)))
    index = {n: i for i, n in enumerate(names)}
    settings = settings_for(spec)
    skipped: list[tuple[str, str, str]] = []
    mode = spec.pairs.mode
    explicit: list[tuple[int, int]] = []
    if mode == "explicit":
        for s, d in spec.pairs.explicit:
            missing = [x for x in (s, d) if x not in index]
            if missing:
                skipped.append((s, d, f"no Ready agent on node {missing[0]}"))
            else:
                explicit.append((index[s], index[d]))
    excluded = {(index[s], index[d]) for s, d in exclude_pairs if s in index and d in index}
    site_of = _site_indices(names, labels, spec.site_label) if spec.round_policy == "siteExclusive" else []

    def rounds_among(members: Sequence[int]) -> list[list[tuple[int, int]]]:
        return _policy_rounds(_selected_rounds(members, names, labels, spec, explicit), members, spec, excluded,
                              site_of)

    rounds = rounds_among(list(range(len(names))))
    loopback = None
    if spec.loopback.enabled:
        loopback = Setting(spec.loopback.protocol, max(spec.streams), loopback=True)
    involved = range(len(names)) if mode == "fullMesh" else sorted({i for r in rounds for p in r for i in p})
    externals, external_rounds, problems = _external_rounds(spec, names, labels, settings)
    family_rounds, family_skipped = _family_rounds(names, rounds, spec, families, rounds_among)
    return Plan(
        agents=names,
        settings=settings,
        pair_rounds=tuple(tuple(r) for r in rounds),
        skipped=tuple(skipped),
        loopback=loopback,
        loopback_agents=tuple(involved) if loopback is not None and rounds else (),
        ceiling_agents=tuple(involved) if spec.uses_disk and rounds else (),
        externals=externals,
        external_rounds=external_rounds,
        problems=problems,
        family_rounds=family_rounds,
        family_skipped=family_skipped,
    )


def _external_rounds(spec: BenchmarkSpec, names: Sequence[str], labels: Mapping[str, Mapping[str, str]],
                     settings: Sequence[Setting]):
    """The external endpoints' names, their rounds ((settings index, index pairs), setting by setting) and the
    endpoints left out with why."""
    problems = []
    kept = []
    for e in spec.external_endpoints:
        if e.name in labels:
            problems.append(f"external endpoint {e.name} is left out: an agent's node has the same name (rename "
                            f"the endpoint)")
        else:
            kept.append(e)
    if kept and all(s.on_disk for s in settings if s.protocol in TPC_PROTOCOLS):
        problems.append(f"external endpoints {', '.join(e.name for e in kept)} are left out: they are measured "
                        f"memory to memory only, and spec.storage has no memory")
    n = len(names)
    out: list[tuple[int, tuple[tuple[int, int], ...]]] = []
    site_of = _site_indices(names, labels, spec.site_label) if spec.round_policy == "siteExclusive" else []
    site_of += [max(site_of, default=-1) + 1 + k for k in range(len(kept))]
    for si, setting in enumerate(settings):
        pairs = []
        for k, e in enumerate(kept):
            if e.protocol != setting.protocol or setting.on_disk:  # disk mode: between agents only
                continue
            for a in range(n):
                if e.is_source:
                    pairs.append((n + k, a))
                if e.is_destination:
                    pairs.append((a, n + k))
        if spec.round_policy == "serial":
            rounds = serial_rounds(pairs)
        elif spec.round_policy == "siteExclusive":
            rounds = site_exclusive_rounds(site_of, pairs)
        else:
            rounds = color_pairs(pairs)
        out += [(si, tuple(r)) for r in rounds]
    return tuple(e.name for e in kept), tuple(out), tuple(problems)
