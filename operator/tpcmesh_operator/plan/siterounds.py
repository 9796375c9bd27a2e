"""Site-exclusive rounds as an edge colouring of the site multigraph. PURE: no I/O.

The model: every site is a vertex; a test between two sites is an edge between them (a site pair with 18 tests
is an edge of multiplicity 18); a test within one site occupies that site only, so it is an edge from the site to
a private dummy vertex of its own (its tests cannot share a round, and neither can they share one with the
site's other tests). A round in which no site is in two tests is exactly a matching of this multigraph, so the
fewest rounds is its chromatic index chi'.

Lower bound (``lower_bound``): chi' >= chi'_f = max(Delta, Gamma) (Edmonds' matching polytope: the fractional
chromatic index), with Delta the busiest site's tests and Gamma = max over vertex sets U of odd size >= 3 of
2|E(U)| / (|U| - 1) (a round holds at most (|U| - 1) / 2 of the edges inside U). The bound is
max(Delta, ceil(Gamma)). By the Goldberg-Seymour theorem (proved by Chen, Jing and Zang) chi' <= max(Delta + 1,
ceil(Gamma)): the optimum is the bound or one more. Only a few sites can be in an odd set denser than Delta
(odd_set_candidates); up to ``ENUMERATED_SITES`` of them Gamma is enumerated over their odd sets, beyond by
Padberg and Rao's minimum odd cut (odd_set_cut_bound). Both are exact, in integers.

The schedule (``colour``): the fractional edge-colouring LP over matchings (min sum x_M subject to every edge
covered by its demand), solved by column generation (HiGHS through highspy, one model warm-started as columns
join; pricing = maximum-weight matchings under the duals: a few greedy ones, edge-disjoint, and networkx's exact
one, whose weight gives the Farley lower bound, so the first LP stops once its ceiling is proven). Its integer
rounding: diving (fix each matching's whole multiplicity, solve the LP of the rest again with a few new columns,
until nothing is left); when that
ends above the lower bound, the integer program over all the generated matchings (HiGHS branch and bound with a
node limit, so the result does not depend on the machine's speed) and the better of the two. Each matching with
its multiplicity is a block of rounds. Demands are large (two sites of 3 agents share 18 tests), so few matchings
carry most of the rounds. The work is bounded, deterministically (never by a clock): LP_WORK (LP solves x edges)
per schedule, after which a greedy matching sequence finishes what the dive left (_greedy_finish), and site graphs
beyond MAX_LP_EDGES edges are not coloured here at all (the planner keeps its fast schedule for them).

Measured over all 12,007 mixes of up to 8 sites of 1-6 agents plus up to 3 agents without a site: every one at
the bound (plan/planner.py's docstring has the figures).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

ENUMERATED_SITES = 16  # up to this many sites Gamma is enumerated over the 2^S site sets
MAX_LP_EDGES = 250  # larger site graphs (21 sites and more) keep the fast schedule: the LP would take long
LP_WORK = 30000  # LP solves x site graph edges one schedule may take (a deterministic budget); then the rest of
# the demands goes greedily (_greedy_finish): 300 solves for 100 edges (about 13 sites), 75 for 400
DIVE_SOLVES = 5  # LP solves of each residual LP in the dive (its optimum matters less than the first one's)
MILP_EDGES = 150  # the integer program only for site graphs up to this many edges (its nodes grow with them)
MILP_NODE_LIMIT = 500  # branch-and-bound nodes of the integer program (deterministic, unlike a time limit)
GREEDY_COLUMNS = 8  # improving greedy matchings added per LP solve
_EPS = 1e-9


def _ceil(value: float) -> int:
    """ceil of an LP value, a value within 1e-7 relative above an integer taken as that integer (chi'_f is a
    fraction whose denominator is below the vertex count)."""
    return math.ceil(value * (1 - 1e-7))


def _degrees(edges: Sequence[tuple[int, int]], demand: Sequence[int]) -> dict[int, int]:
    deg: dict[int, int] = {}
    for (u, v), k in zip(edges, demand, strict=True):
        if k:
            deg[u] = deg.get(u, 0) + k
            deg[v] = deg.get(v, 0) + k
    return deg


@dataclass(frozen=True)
class SiteGraph:
    """The site multigraph: ``edges[i] = (u, v)``, u < v, with ``demand[i]`` tests; vertex ``n + s`` is site
    s's dummy (its intra-site tests)."""

    n: int  # sites 0..n-1
    edges: tuple[tuple[int, int], ...]
    demand: tuple[int, ...]

    @classmethod
    def of(cls, site_of: Sequence[int], pairs: Iterable[tuple[int, int]]) -> SiteGraph:
        n = max(site_of, default=-1) + 1
        count: dict[tuple[int, int], int] = {}
        for s, d in pairs:
            a, b = site_of[s], site_of[d]
            key = (min(a, b), max(a, b)) if a != b else (a, n + a)
            count[key] = count.get(key, 0) + 1
        edges = tuple(sorted(count))
        return cls(n, edges, tuple(count[e] for e in edges))

    def degrees(self) -> dict[int, int]:
        return _degrees(self.edges, self.demand)

    @property
    def max_degree(self) -> int:
        return max(self.degrees().values(), default=0)

    @property
    def sites(self) -> list[int]:
        """The sites with a test."""
        return sorted({u for u, _ in self.edges} | {v for _, v in self.edges if v < self.n})


def odd_set_candidates(graph: SiteGraph) -> list[int]:
    """The sites an odd set U with ceil(2|E(U)| / (|U| - 1)) > Delta can hold. Such a U has
    2|E(U)| = Delta |U| - D(U) - d(U), D(U) the sum of its vertices' deficiencies Delta - degree and d(U) the edges
    leaving it, so it needs D(U) + d(U) < Delta: a site whose deficiency plus the two smallest other deficiencies
    (dummies' too) reach Delta is in no such set."""
    deg = graph.degrees()
    delta = max(deg.values(), default=0)
    smallest = sorted((delta - d, v) for v, d in deg.items())[:3]
    out = []
    for s in graph.sites:
        others = [d for d, v in smallest if v != s][:2]
        if len(others) == 2 and delta - deg[s] + sum(others) < delta:
            out.append(s)
    return out


def odd_set_bound(graph: SiteGraph, sites: Sequence[int] | None = None) -> int:
    """ceil(Gamma) over the odd vertex sets within ``sites`` (default: all; 2^len(sites) sets, so a few tens) and
    their dummies, by enumeration; 0 if no odd set of 3 or more vertices has an edge. A set U of sites W and dummies
    T (of sites in W: another dummy adds a vertex and no edge) with |W| + |T| odd: for a given |T| = t the best
    dummies are W's t busiest ones, so each W is tried with its 0, 1, 2, ... busiest dummies."""
    import numpy as np

    sites = graph.sites if sites is None else sorted(sites)
    k = len(sites)
    pos = {s: i for i, s in enumerate(sites)}
    masks = np.arange(1 << k, dtype=np.int64)
    inner = np.zeros(1 << k, dtype=np.int64)  # edges between the sites of the mask
    size = np.zeros(1 << k, dtype=np.int64)
    intra = [0] * k
    for i in range(k):
        size += (masks >> i) & 1
    for (u, v), m in zip(graph.edges, graph.demand, strict=True):
        if u not in pos or (v < graph.n and v not in pos):
            continue
        if v >= graph.n:
            intra[pos[u]] = m
            continue
        both = ((masks >> pos[u]) & 1) & ((masks >> pos[v]) & 1)
        inner += both * m

    def consider(edges: np.ndarray, vertices: np.ndarray) -> int:
        ok = (vertices % 2 == 1) & (vertices >= 3)
        if not ok.any():
            return 0
        return int((-(-2 * edges[ok] // (vertices[ok] - 1))).max())

    best = consider(inner, size)
    dummies = np.zeros(1 << k, dtype=np.int64)
    extra = np.zeros(1 << k, dtype=np.int64)
    for i in sorted(range(k), key=lambda i: -intra[i]):  # add each set's busiest dummies first
        if not intra[i]:
            break
        member = (masks >> i) & 1
        dummies += member
        extra += member * intra[i]
        best = max(best, consider(inner + extra, size + dummies))
    return best


def lower_bound(graph: SiteGraph) -> int:
    """max(Delta, ceil(Gamma)): enumeration over the odd sets of the candidate sites (odd_set_candidates) when there
    are at most ENUMERATED_SITES of them, the minimum odd cut beyond."""
    delta = graph.max_degree
    if not graph.edges:
        return 0
    candidates = odd_set_candidates(graph)
    if len(candidates) <= ENUMERATED_SITES:
        return max(delta, odd_set_bound(graph, candidates))
    return max(delta, odd_set_cut_bound(graph, candidates))


def odd_set_cut_bound(graph: SiteGraph, sites: Sequence[int]) -> int:
    """max(Delta, ceil(Gamma)) over the odd sets within ``sites`` and their dummies, for many sites: Padberg and
    Rao's minimum odd cut. For an integer lam >= Delta, an odd set W has 2|E(W)| > lam (|W| - 1) exactly when
    d(W) + sum over W of (lam - degree) < lam; with a vertex z joined to every v by lam - degree(v) (degree within
    the kept vertices: edges to the others count as leaving W) that sum is the cut of W in the new graph, and the
    smallest cut with an odd side (z's other side) is one of the Gomory-Hu tree's cuts. Start from Delta; each
    violated set found raises lam to its own ceil(2|E(W)| / (|W| - 1)); none left: lam is
    the bound. Integer capacities: no rounding to trust."""
    import networkx as nx

    keep = set(sites)
    keep |= {graph.n + s for s in sites if (s, graph.n + s) in set(graph.edges)}
    kept = [(u, v, m) for (u, v), m in zip(graph.edges, graph.demand, strict=True) if u in keep and v in keep]
    within = dict.fromkeys(keep, 0)
    for u, v, m in kept:
        within[u] += m
        within[v] += m
    lam = graph.max_degree
    if len(keep) < 3:  # no odd set of three or more: Delta is the bound (and Gomory-Hu needs a graph)
        return lam
    z = -1
    while True:
        g = nx.Graph()
        g.add_nodes_from(sorted(keep))
        g.add_weighted_edges_from(kept, weight="capacity")
        g.add_weighted_edges_from(((v, z, lam - within[v]) for v in sorted(keep)), weight="capacity")
        tree = nx.gomory_hu_tree(g)
        raised = lam
        for a, b, cut in sorted(tree.edges(data="weight")):
            if cut >= lam:
                continue
            t = tree.copy()
            t.remove_edge(a, b)
            side = nx.node_connected_component(t, a)
            w = (set(t) - side) if z in side else side
            if len(w) % 2 == 1 and len(w) >= 3:
                inner = sum(m for u, v, m in kept if u in w and v in w)
                raised = max(raised, -(-2 * inner // (len(w) - 1)))
        if raised == lam:
            return lam
        lam = raised


def circle_matchings(graph: SiteGraph) -> list[frozenset[int]]:
    """The circle method's rounds over the sites as matchings of the graph (a pair without tests left out, the
    site with the bye at its own tests): the columns the LP starts from, optimal for equal sites."""
    index = {e: i for i, e in enumerate(graph.edges)}
    sites = graph.sites
    ring = sites + [-1] * (len(sites) % 2)
    m = len(ring)
    out = []
    for r in range(m - 1):
        order = [ring[0]] + ring[1:][r:] + ring[1:][:r]
        col = set()
        for i in range(m // 2):
            a, b = order[i], order[m - 1 - i]
            if a < 0 or b < 0:
                alone = max(a, b)
                col.add(index.get((alone, graph.n + alone), -1))
            else:
                col.add(index.get((min(a, b), max(a, b)), -1))
        col.discard(-1)
        out.append(frozenset(col))
    return out


class _ColumnGeneration:
    """The fractional edge-colouring LP over matchings (columns: frozensets of edge indices), one HiGHS model
    that gains columns (each solve warm-starts from the last basis)."""

    def __init__(self, graph: SiteGraph, start: Iterable[frozenset[int]]) -> None:
        import highspy

        self.graph = graph
        self.columns: list[frozenset[int]] = []
        self.known: set[frozenset[int]] = set()
        self.highs = highspy.Highs()
        for option, value in (("output_flag", False), ("threads", 1), ("random_seed", 0), ("presolve", "off")):
            self.highs.setOptionValue(option, value)
        m = len(graph.edges)
        self.demand = list(graph.demand)
        self.highs.addRows(m, [float(d) for d in graph.demand], [highspy.kHighsInf] * m, 0, [], [], [])
        for col in start:
            self._add(col)
        for i in range(m):  # each edge alone: the LP is always feasible
            self._add(frozenset((i,)))
        self.x: list[float] = []
        self.duals: list[float] = []
        self.value = 0.0
        self.certificate = 0.0  # a lower bound on chi'_f from the duals and the exact pricing (Farley)
        self.proven = 0  # ceil(chi'_f) once the LP's value and the lower bounds meet
        self.solves = 0  # LP solves so far (against budget)
        self.budget = max(30, LP_WORK // max(1, m))

    def _add(self, col: frozenset[int]) -> bool:
        if not col or col in self.known:
            return False
        self.known.add(col)
        self.columns.append(col)
        rows = sorted(col)
        self.highs.addCol(1.0, 0.0, float("inf"), len(rows), rows, [1.0] * len(rows))
        return True

    def _lp(self) -> None:
        import highspy

        self.solves += 1
        self.highs.run()
        if self.highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"site schedule LP: {self.highs.modelStatusToString(self.highs.getModelStatus())}")
        sol = self.highs.getSolution()
        self.x = list(sol.col_value)
        self.duals = [max(0.0, y) for y in sol.row_dual]
        self.value = self.highs.getInfo().objective_function_value

    def _greedy_matching(self, skip: Collection[int] = ()) -> tuple[frozenset[int], float]:
        used: set[int] = set()
        chosen = []
        weight = 0.0
        for i in sorted(range(len(self.graph.edges)), key=lambda i: (-self.duals[i], i)):
            if self.duals[i] <= _EPS:
                break
            if i in skip:
                continue
            u, v = self.graph.edges[i]
            if u not in used and v not in used:
                used |= {u, v}
                chosen.append(i)
                weight += self.duals[i]
        return frozenset(chosen), weight

    def _exact_matching(self) -> tuple[frozenset[int], float]:
        import networkx as nx

        g = nx.Graph()
        index = {}
        for i, (u, v) in enumerate(self.graph.edges):
            if self.duals[i] > _EPS:
                g.add_edge(u, v, weight=self.duals[i])
                index[(u, v)] = i
        chosen = frozenset(index[(min(u, v), max(u, v))] for u, v in nx.max_weight_matching(g))
        return chosen, sum(self.duals[i] for i in chosen)

    def solve(self, known: int = 0, prove: bool = True, limit: int = 1 << 30) -> _ColumnGeneration:
        """Column generation until no matching prices out or the LP's ceiling is proven. Each LP solve adds up to
        GREEDY_COLUMNS improving greedy matchings (each avoiding the edges of the ones before: varied columns cut
        the degenerate tail short) and the exact maximum-weight matching, whose weight gives the Farley bound
        sum(demand x dual) / (heaviest matching) <= chi'_f; with Delta (and ``known``, a lower bound from elsewhere)
        it certifies ceil(LP) once they meet. ``prove`` False: the exact matching only when the greedy finds no
        improving one (the dive's residual LPs, whose bound no one reads); ``limit``: LP solves of this call."""
        delta = max(known, *_degrees(self.graph.edges, self.demand).values(), 0)
        for _ in range(limit):
            self._lp()
            added = False
            taken: set[int] = set()
            for _ in range(GREEDY_COLUMNS):
                col, weight = self._greedy_matching(taken)
                if weight <= 1 + 1e-7 or not self._add(col):
                    break
                added = True
                taken |= col
            if added and not prove:
                continue
            col, weight = self._exact_matching()
            farley = sum(d * y for d, y in zip(self.demand, self.duals, strict=True)) / max(1.0, weight)
            self.certificate = max(self.certificate, farley)
            if _ceil(self.value) <= max(delta, self.certified_ceiling()):
                self.proven = _ceil(self.value)
                break
            if not (weight > 1 + 1e-7 and self._add(col)) and not added:
                break
            if self.solves >= self.budget:
                break
        self.x += [0.0] * (len(self.columns) - len(self.x))  # columns added after the last solve: not used
        return self

    def certified_ceiling(self) -> int:
        """ceil(chi'_f) from the dual certificate (a value within 1e-7 relative above an integer is that integer:
        chi'_f is a fraction whose denominator is below the vertex count), or from the LP's value when a known
        lower bound meets it."""
        return max(_ceil(self.certificate), self.proven)

    def integer(self, node_limit: int = MILP_NODE_LIMIT) -> list[tuple[frozenset[int], int]] | None:
        """Integer multiplicities of the generated matchings covering every demand: the fewest rounds HiGHS's
        branch and bound finds within its node limit (it stops within one round of its own bound); None if it
        finds none."""
        import highspy
        import numpy as np

        n = len(self.columns)
        h = self.highs
        h.changeColsIntegrality(n, list(range(n)), np.full(n, int(highspy.HighsVarType.kInteger), dtype=np.uint8))
        for option, value in (("mip_max_nodes", node_limit), ("mip_abs_gap", 1 - 1e-6)):
            h.setOptionValue(option, value)
        h.setOptionValue("presolve", "on")
        h.run()
        x = [round(v) for v in h.getSolution().col_value] if h.getInfo().primal_solution_status == 2 else []
        h.changeColsIntegrality(n, list(range(n)),
                                np.full(n, int(highspy.HighsVarType.kContinuous), dtype=np.uint8))
        h.setOptionValue("presolve", "off")
        if not x or not self._covers(x):
            return None
        return [(col, k) for col, k in zip(self.columns, x, strict=True) if k > 0]

    def _covers(self, x: Sequence[int]) -> bool:
        got = [0] * len(self.graph.edges)
        for col, k in zip(self.columns, x, strict=True):
            for i in col:
                got[i] += k
        return all(g >= d for g, d in zip(got, self.demand, strict=True))

    def set_demand(self, demand: Sequence[int]) -> None:
        self.certificate = 0.0
        self.proven = 0
        for i, (old, new) in enumerate(zip(self.demand, demand, strict=True)):
            if old != new:
                self.highs.changeRowBounds(i, float(new), float("inf"))
        self.demand = list(demand)


def _dive(cg: _ColumnGeneration, known: int = 0) -> list[tuple[frozenset[int], int]]:
    """Diving over the LP: fix every matching's whole part of its LP multiplicity (at least one copy of the
    largest), take the fixed rounds off the demands, solve the LP of what is left anew (more columns generated for
    the residual graph), until nothing is left. ``known``: a lower bound of the whole graph (the first LP)."""
    demand = list(cg.graph.demand)
    fixed: dict[frozenset[int], int] = {}
    while any(demand):
        if cg.solves >= cg.budget:
            _greedy_finish(cg.graph, demand, fixed)
            break
        cg.set_demand(demand)
        cg.solve(known, prove=True) if not fixed else cg.solve(prove=False, limit=DIVE_SOLVES)
        whole = [math.floor(v + 1e-9) for v in cg.x]
        if not any(whole):  # every multiplicity below 1: one copy of the largest (rounding up more costs rounds)
            whole[max(range(len(whole)), key=lambda j: (cg.x[j], -j))] = 1
        for col, k in zip(cg.columns, whole, strict=True):
            col = frozenset(i for i in col if demand[i])
            if k <= 0 or not col:
                continue
            k = min(k, max(demand[i] for i in col))
            fixed[col] = fixed.get(col, 0) + k
            for i in col:
                demand[i] = max(0, demand[i] - k)
    cg.set_demand(cg.graph.demand)
    return list(fixed.items())


def _greedy_finish(graph: SiteGraph, demand: list[int], fixed: dict[frozenset[int], int]) -> None:
    """The rest of the demands when the LP budget is spent: repeatedly a greedy matching, busiest vertices first
    (their residual tests), for as many rounds as its thinnest edge lasts."""
    while any(demand):
        deg = _degrees(graph.edges, demand)
        used: set[int] = set()
        col = []
        for i in sorted((i for i, d in enumerate(demand) if d),
                        key=lambda i: (-max(deg[graph.edges[i][0]], deg[graph.edges[i][1]]),
                                       -min(deg[graph.edges[i][0]], deg[graph.edges[i][1]]), i)):
            u, v = graph.edges[i]
            if u not in used and v not in used:
                used |= {u, v}
                col.append(i)
        k = min(demand[i] for i in col)
        fixed[frozenset(col)] = fixed.get(frozenset(col), 0) + k
        for i in col:
            demand[i] -= k


def _rounds(blocks: Sequence[tuple[frozenset[int], int]]) -> int:
    return sum(k for _, k in blocks)


def colour(graph: SiteGraph, start: Iterable[frozenset[int]]) -> list[tuple[frozenset[int], int]] | None:
    """Matchings (edge index sets) with multiplicities covering every edge's demand, or None when the graph is
    beyond MAX_LP_EDGES. ``start``: matchings to begin with (a fast schedule's rounds)."""
    if len(graph.edges) > MAX_LP_EDGES:
        return None
    target = lower_bound(graph)
    cg = _ColumnGeneration(graph, start)
    best = _dive(cg, target)
    if _rounds(best) > target and len(graph.edges) <= MILP_EDGES:
        solved = cg.integer()
        if solved is not None and _rounds(solved) < _rounds(best):
            best = solved
    return best
