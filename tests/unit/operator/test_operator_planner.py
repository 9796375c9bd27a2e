"""Planner properties: no agent twice in a round, every pair once per setting, rounds = lower bound (plus the
loopback round), determinism."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpcmesh_operator.plan import siterounds
from tpcmesh_operator.plan.planner import (
    RTT,
    Setting,
    full_mesh_rounds,
    lower_bound,
    plan,
    settings_for,
    site_lower_bound,
)
from tpcmesh_operator.plan.spec import parse_spec

SPEC = parse_spec({"protocols": ["xrootd-https", "gridftp"], "streams": [8, 1]})


def names(n: int) -> list[str]:
    return [f"node-{i:03d}" for i in range(n)]


def check_rounds(p) -> None:
    for rnd in p.rounds():
        busy = Counter()
        for t in rnd:
            busy.update({t.source, t.destination})  # a loopback test is one agent's one test
        assert not busy or max(busy.values()) == 1, "an agent is in two tests of one round"


def test_lower_bound_formula() -> None:
    assert [lower_bound(n) for n in (1, 2, 3, 4, 5, 10, 11)] == [0, 2, 6, 6, 10, 18, 22]


@pytest.mark.parametrize("n", range(2, 61))  # every size, odd (a bye each round) and even
def test_full_mesh_properties(n: int) -> None:
    p = plan(names(n), SPEC)
    assert p.rounds_per_setting == lower_bound(n)
    assert p.num_rounds == 1 + lower_bound(n) * len(p.settings)  # the loopback round first
    check_rounds(p)
    assert [(t.source, t.destination) for t in p.round(0)] == [(a, a) for a in names(n)]  # all at once
    assert {t.setting for t in p.round(0)} == {Setting("iperf3", 8, loopback=True)}
    mesh = [t for t in p.tests() if not t.setting.loopback]
    per_setting = Counter((t.setting, t.source, t.destination) for t in mesh)
    assert set(per_setting.values()) == {1}
    expected = {(s, a, b) for s in settings_for(SPEC) for a in names(n) for b in names(n) if a != b}
    assert set(per_setting) == expected
    assert p.num_tests == n + len(mesh) == sum(len(r) for r in p.rounds())
    assert len({t.key for t in p.tests()}) == p.num_tests


def test_loopback_can_be_off_or_builtin() -> None:
    off = plan(names(4), parse_spec({"loopback": {"enabled": False}}))
    assert off.num_rounds == lower_bound(4) * len(off.settings) and not any(t.setting.loopback for t in off.tests())
    builtin = plan(names(4), parse_spec({"loopback": {"protocol": "builtin"}, "streams": [2, 4]}))
    assert [t.key for t in builtin.round(0)] == [f"loopback/builtin/4:{a}>{a}" for a in names(4)]
    assert plan(["solo"], SPEC).num_tests == 0  # no mesh, no loopback either


@given(st.lists(st.text("abcdefgh", min_size=1, max_size=6), min_size=2, max_size=15, unique=True), st.randoms())
@settings(max_examples=40, deadline=None)
def test_deterministic_whatever_the_input_order(agents: list[str], rnd: random.Random) -> None:
    shuffled = agents[:]
    rnd.shuffle(shuffled)
    assert plan(agents, SPEC) == plan(shuffled, SPEC)
    assert [t.key for t in plan(agents, SPEC).tests()] == [t.key for t in plan(shuffled, SPEC).tests()]


def test_rtt_first_then_protocols_and_streams() -> None:
    keys = [s.key for s in settings_for(SPEC)]
    assert keys == [RTT, "xrootd-https/8", "xrootd-https/1", "gridftp/8", "gridftp/1"]
    no_latency = parse_spec({"protocols": ["iperf3"], "streams": [1], "latency": False})
    assert [s.key for s in settings_for(no_latency)] == ["iperf3/1"]


def test_congestion_control_is_a_setting_of_its_own_for_the_movers_that_set_it() -> None:
    spec = parse_spec({"protocols": ["builtin", "iperf3", "gridftp"], "streams": [1], "latency": False,
                       "loopback": {"enabled": False},
                       "tcp": {"congestionControl": ["cubic", "bbr"]}})
    assert [s.key for s in settings_for(spec)] == ["builtin/1/cubic", "builtin/1/bbr", "iperf3/1/cubic",
                                                   "iperf3/1/bbr", "gridftp/1"]
    tests = list(plan(["a", "b"], spec).tests())
    assert {(t.setting.protocol, t.setting.congestion) for t in tests} == {
        ("builtin", "cubic"), ("builtin", "bbr"), ("iperf3", "cubic"), ("iperf3", "bbr"), ("gridftp", None)}
    assert len({t.key for t in tests}) == len(tests) == 10  # 5 settings x 2 directions, each its own key


def test_repeats_measure_each_transfer_setting_k_times_in_passes_and_rtt_once() -> None:
    spec = parse_spec({"protocols": ["builtin"], "streams": [1, 4], "repeats": 3, "loopback": {"enabled": False}})
    assert [s.key for s in settings_for(spec)] == [RTT, "builtin/1", "builtin/4", "builtin/1#1", "builtin/4#1",
                                                   "builtin/1#2", "builtin/4#2"]
    p = plan(["a", "b", "c"], spec)
    check_rounds(p)
    tests = list(p.tests())
    assert len({t.key for t in tests}) == len(tests) == 7 * 6  # every repeat of every pair has its own key
    per_cell = Counter((t.setting.protocol, t.setting.streams, t.source, t.destination) for t in tests)
    assert set(per_cell.values()) == {1, 3} and per_cell[(RTT, None, "a", "b")] == 1
    assert [s.repeat for s in settings_for(parse_spec({"protocols": ["builtin"], "streams": [1]}))] == [0, 0]
def test_optimize_gives_each_file_mover_one_setting_whose_links_are_tuned_at_run_time() -> None:
    """spec.optimize: the streams of a file mover are no longer settings; each link runs once per repeat and family
    in `<protocol>/auto` (the executor picks its streams x files); iperf3 and the loopback keep spec.streams."""
    spec = parse_spec({"protocols": ["builtin", "iperf3"], "streams": [1, 8], "optimize": True, "repeats": 2,
                       "fileSet": {"count": 4, "size": "1MB"}, "loopback": {"enabled": True, "protocol": "builtin"}})
    assert [s.key for s in settings_for(spec)] == [RTT, "builtin/auto", "iperf3/1", "iperf3/8", "builtin/auto#1",
                                                   "iperf3/1#1", "iperf3/8#1"]
    p = plan(["a", "b", "c"], spec)
    check_rounds(p)
    assert p.loopback is not None and p.loopback.streams == 8 and not p.loopback.optimized
    auto = [t for t in p.tests() if t.setting.optimized]
    assert len(auto) == 2 * 6 and all(t.setting.streams is None and t.key.startswith("builtin/auto") for t in auto)


def test_address_families_are_settings_of_their_own_and_ipv4_keys_stay() -> None:
    spec = parse_spec({"protocols": ["builtin"], "streams": [1], "loopback": {"enabled": False},
                       "addressFamilies": ["ipv4", "ipv6"]})
    assert [s.key for s in settings_for(spec)] == ["rtt", "builtin/1", "rtt/ipv6", "builtin/1/ipv6"]
    assert parse_spec({}).address_families == ("ipv4",)  # the default: IPv4 alone
    p = plan(["a", "b", "c"], spec)  # families=None: every agent has both
    assert p.num_tests == 4 * 6 and not p.family_skipped and p.num_rounds == 4 * lower_bound(3)


def test_a_pair_without_ipv6_at_one_end_is_skipped_with_a_reason_not_dropped() -> None:
    spec = parse_spec({"protocols": ["builtin"], "streams": [1, 8], "latency": False,
                       "loopback": {"enabled": False}, "addressFamilies": ["ipv4", "ipv6"]})
    families = {"a": {"ipv4", "ipv6"}, "b": {"ipv4", "ipv6"}, "c": {"ipv4", "ipv6"}, "v4only": {"ipv4"}}
    p = plan(list(families), spec, families=families)
    check_rounds(p)
    tests = list(p.tests())
    v6 = {(t.source, t.destination) for t in tests if t.setting.family == "ipv6"}
    v4 = {(t.source, t.destination) for t in tests if t.setting.family == "ipv4"}
    assert len(v4) == 12 and v6 == {(s, d) for s in "abc" for d in "abc" if s != d}
    skipped = list(p.skipped_tests())
    assert len(skipped) == 6 * 2  # 6 directed pairs touching v4only, in both IPv6 stream settings
    assert {(s, d) for _, s, d, _ in skipped} == {(x, "v4only") for x in "abc"} | {("v4only", x) for x in "abc"}
    assert all(reason == "node v4only has no IPv6 address" and st.family == "ipv6" for st, _, _, reason in skipped)
    assert p.skipped_summary() == "node v4only has no IPv6 address (12 IPv6 tests)"
    # planned = measured + skipped: nothing silently dropped
    assert p.num_tests + len(skipped) == 2 * 2 * 12
    assert len({t.key for t in tests}) == len(tests)
    assert [t.round for t in tests] == sorted(t.round for t in tests) and tests[-1].round == p.num_rounds - 1
    # an IPv6-only node is left out of IPv4 the same way
    only6 = plan(["a", "b", "c"], spec, families={"a": {"ipv6"}, "b": {"ipv4", "ipv6"}, "c": {"ipv4", "ipv6"}})
    assert {(st.family, s, d) for st, s, d, _ in only6.skipped_tests()} == {
        ("ipv4", "a", "b"), ("ipv4", "b", "a"), ("ipv4", "a", "c"), ("ipv4", "c", "a")}


@pytest.mark.parametrize("policy", ["nodeExclusive", "siteExclusive"])
def test_a_family_few_agents_have_is_planned_among_them_at_their_bound(policy) -> None:
    """10 agents, 4 with IPv6: the IPv6 setting takes the 4-agent mesh's rounds (the bound for 4), not the
    10-agent mesh's rounds emptied of the other pairs; nothing else changes."""
    spec = parse_spec({"protocols": ["builtin"], "streams": [1], "latency": False, "roundPolicy": policy,
                       "loopback": {"enabled": False}, "addressFamilies": ["ipv4", "ipv6"]})
    names = [f"n{i:02d}" for i in range(10)]
    # n00-n03 (the 10-agent circle spreads their 12 directed pairs over 10 rounds)
    families = {n: {"ipv4", "ipv6"} if i < 4 else {"ipv4"} for i, n in enumerate(names)}
    p = plan({n: {} for n in names}, spec, families=families)  # no site labels: every node a site of its own
    check_rounds(p)
    v6 = [r for f, r in p.family_rounds if f == "ipv6"][0]
    assert len(v6) == lower_bound(4) == 6 and len(p.pair_rounds) == lower_bound(10)
    assert sorted(pair for r in v6 for pair in r) == [(a, b) for a in range(4) for b in range(4) if a != b]
    assert p.num_rounds == lower_bound(10) + lower_bound(4)
    assert p.num_tests + len(p.family_skipped) == 2 * 90  # planned = measured + skipped


def test_small_meshes() -> None:
    assert full_mesh_rounds(0) == [] and full_mesh_rounds(1) == []
    assert sorted(p for r in full_mesh_rounds(2) for p in r) == [(0, 1), (1, 0)]
    assert plan(["solo"], SPEC).num_tests == 0


def test_explicit_pairs_and_missing_agents() -> None:
    spec = parse_spec({"pairs": {"mode": "explicit", "explicit": [
        {"source": "a", "destination": "b"}, {"source": "b", "destination": "a"},
        {"source": "a", "destination": "c"}, {"source": "a", "destination": "zz"}]}})
    p = plan(["a", "b", "c", "d"], spec)
    check_rounds(p)
    assert sorted({(t.source, t.destination) for t in p.tests() if not t.setting.loopback}) == [
        ("a", "b"), ("a", "c"), ("b", "a")]
    assert [t.source for t in p.round(0)] == ["a", "b", "c"]  # loopback: the agents in a pair (not d)
    assert p.rounds_per_setting == 3  # a is in all three pairs
    assert p.skipped == (("a", "zz", "no Ready agent on node zz"),)


@given(st.integers(1, 8), st.integers(1, 8), st.sampled_from(["both", "aToB", "bToA"]))
@settings(max_examples=40, deadline=None)
def test_groups(na: int, nb: int, direction: str) -> None:
    labels = {f"a{i}": {"site": "A"} for i in range(na)} | {f"b{i}": {"site": "B"} for i in range(nb)}
    spec = parse_spec({"pairs": {"mode": "groups", "groupA": {"matchLabels": {"site": "A"}},
                                 "groupB": {"matchLabels": {"site": "B"}}, "direction": direction}})
    p = plan(labels, spec)
    check_rounds(p)
    assert {t.source for t in p.round(0)} == set(labels)  # every agent is in a pair
    pairs = Counter((t.source, t.destination) for t in p.tests() if t.setting.protocol == RTT)
    assert set(pairs.values()) == {1}
    want = set()
    for a in range(na):
        for b in range(nb):
            if direction in ("both", "aToB"):
                want.add((f"a{a}", f"b{b}"))
            if direction in ("both", "bToA"):
                want.add((f"b{b}", f"a{a}"))
    assert set(pairs) == want
    # each agent's test count is a lower bound on the rounds; greedy stays within twice that
    degree = max(na, nb) * (2 if direction == "both" else 1)
    assert degree <= p.rounds_per_setting <= 2 * degree


# --- round policies ------------------------------------------------------------------------------------------

ZONE = "topology.kubernetes.io/zone"


def sited(sizes: list[int], label: str = ZONE) -> dict[str, dict[str, str]]:
    """Agents in sites of the given sizes: site-00 has sizes[0] agents, ..."""
    return {f"s{s:02d}-n{i:03d}": {label: f"site-{s:02d}"} for s, n in enumerate(sizes) for i in range(n)}


def pairs_and_check_sites(p, labels, label: str = ZONE) -> Counter:
    """Every round: no site in two tests (a node without the label is a site of its own); returns the pairs run."""
    done: Counter = Counter()
    for rnd in list(p.rounds())[p.loopback_rounds:]:
        busy: Counter = Counter()
        for t in rnd:
            busy.update({labels[t.source].get(label) or t.source, labels[t.destination].get(label) or t.destination})
            done[(t.source, t.destination, t.setting)] += 1
        assert not busy or max(busy.values()) == 1, f"a site is in two tests of round {rnd[0].round}"
    return done


def site_spec(**extra) -> object:
    return parse_spec({"protocols": ["builtin"], "streams": [1], "latency": {"enabled": False},
                       "roundPolicy": "siteExclusive", **extra})


@pytest.mark.parametrize("sizes", [[4] * 6, [3] * 5, [1] * 7, [2] * 2, [5]])
def test_site_exclusive_meets_the_bound_for_equal_sites(sizes: list[int]) -> None:
    labels = sited(sizes)
    p = plan(labels, site_spec(loopback={"enabled": False}))
    done = pairs_and_check_sites(p, labels)
    n = len(labels)
    assert len(done) == n * (n - 1) and all(v == 1 for v in done.values())  # every directed pair once
    site_of = [int(a[1:3]) for a in p.agents]
    all_pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    assert p.rounds_per_setting == site_lower_bound(site_of, all_pairs)


def mixed(sizes: list[int], unlabelled: int) -> tuple[dict[str, dict[str, str]], list[int], list[tuple[int, int]]]:
    """Sites of the given sizes plus agents without a site: labels, each agent's site index, the full mesh."""
    labels = {**sited(sizes), **{f"lone-{i}": {} for i in range(unlabelled)}}
    agents = sorted(labels)
    sites = {s: k for k, s in enumerate(sorted({labels[a].get(ZONE) or a for a in labels}))}
    site_of = [sites[labels[a].get(ZONE) or a] for a in agents]
    n = len(agents)
    return labels, site_of, [(i, j) for i in range(n) for j in range(n) if i != j]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=8), st.integers(0, 3))
def test_site_exclusive_any_sites(sizes: list[int], unlabelled: int) -> None:
    """Unequal sites and nodes without a site: still no site twice in a round, every pair once, never below the
    bound, and at most one round above it (Goldberg-Seymour: the optimum is the bound or one more). Over every mix
    this test can draw (12,007 mixes, enumerated once) the planner meets the bound exactly; the greedy before the LP
    was above it in 760 of them, by up to 21.6 % (test_site_exclusive_worst_mix_of_the_greedy)."""
    labels, site_of, all_pairs = mixed(sizes, unlabelled)
    p = plan(labels, site_spec())
    done = pairs_and_check_sites(p, labels)
    n = len(labels)
    assert len(done) == n * (n - 1) and all(v == 1 for v in done.values())
    bound = site_lower_bound(site_of, all_pairs)
    assert bound <= p.rounds_per_setting <= bound + 1


def test_site_exclusive_worst_mix_of_the_greedy() -> None:
    """Six sites of 3 and one lone agent: the busiest-first greedy took 124 rounds; the bound is 102 (Delta = 102:
    5 x 18 tests to the other sites of 3, 6 to the lone agent, 6 within), the odd set of all 7 sites is as dense
    (2 x 306 / 6 = 102), and the LP's schedule meets it."""
    labels, site_of, all_pairs = mixed([3] * 6, 1)
    assert site_lower_bound(site_of, all_pairs) == 102
    p = plan(labels, site_spec(loopback={"enabled": False}))
    pairs_and_check_sites(p, labels)
    assert p.rounds_per_setting == 102


def brute_force_gamma(graph: siterounds.SiteGraph) -> int:
    """ceil(Gamma) over every odd vertex set, dummies as vertices of their own (no shortcut)."""
    vertices = sorted({x for e in graph.edges for x in e})
    best = 0
    for k in range(3, len(vertices) + 1, 2):
        for u in itertools.combinations(vertices, k):
            inside = set(u)
            edges = sum(m for (a, b), m in zip(graph.edges, graph.demand, strict=True) if a in inside and b in inside)
            best = max(best, -(-2 * edges // (k - 1)))
    return best


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=5), st.integers(0, 2), st.randoms(use_true_random=False))
def test_site_lower_bound_is_the_odd_set_bound(sizes: list[int], unlabelled: int, rnd: random.Random) -> None:
    """site_lower_bound = max(Delta, ceil(Gamma)), Gamma over every odd vertex set of the site multigraph with the
    dummies (brute force), on full meshes and on random subsets of their pairs; the candidate sites' enumeration
    and the minimum odd cut over all sites agree with it."""
    _, site_of, all_pairs = mixed(sizes, unlabelled)
    for pairs in (all_pairs, [p for p in all_pairs if rnd.random() < 0.6]):
        graph = siterounds.SiteGraph.of(site_of, pairs)
        want = max(graph.max_degree, brute_force_gamma(graph))
        assert site_lower_bound(site_of, pairs) == want
        assert max(graph.max_degree, siterounds.odd_set_bound(graph)) == want
        assert siterounds.odd_set_cut_bound(graph, graph.sites) == want


def test_site_lower_bound_above_the_old_density_bounds() -> None:
    """Three sites of 4 and a lone agent: Delta = 84 (2 x 32 tests to the other sites of 4, 8 to the lone agent, 12
    within) and the density bounds over all four sites say 69 and 60, but the three sites of 4 are a triangle: a
    round holds at most one of the 96 tests among them, so 96 rounds (2 x 96 / (3 - 1)), and the plan takes 96."""
    labels, site_of, all_pairs = mixed([4, 4, 4], 1)
    assert site_lower_bound(site_of, all_pairs) == 96
    p = plan(labels, site_spec(loopback={"enabled": False}))
    pairs_and_check_sites(p, labels)
    assert p.rounds_per_setting == 96


def test_site_lower_bound_by_minimum_odd_cut_beyond_the_enumeration() -> None:
    """17 sites, all of them candidates of a dense odd set: the bound comes from the minimum odd cut (Padberg-Rao),
    and it is the enumeration's over all 17 sites (2^17 sets): 128 = 2 x 1024 / 16 (every site at once), above
    Delta = 126."""
    _, site_of, all_pairs = mixed([2] * 16 + [1], 0)
    graph = siterounds.SiteGraph.of(site_of, all_pairs)
    assert len(siterounds.odd_set_candidates(graph)) > siterounds.ENUMERATED_SITES
    assert graph.max_degree == 126
    assert site_lower_bound(site_of, all_pairs) == max(126, siterounds.odd_set_bound(graph)) == 128


def test_site_exclusive_many_near_equal_sites() -> None:
    """Sixteen sites of 2 and one of 1 (17 sites): the circle method and the greedy miss the bound (128, the odd set
    of all 17 sites), the LP's budget runs out in the dive and a greedy finishes the rest: within one round. Beyond
    siterounds.MAX_LP_EDGES (25 sites here) the greedy stands alone, within 1 % of the bound."""
    labels, site_of, all_pairs = mixed([2] * 16 + [1], 0)
    p = plan(labels, site_spec(loopback={"enabled": False}))
    pairs_and_check_sites(p, labels)
    assert 128 <= p.rounds_per_setting <= 129
    labels, site_of, all_pairs = mixed([5] * 24 + [4], 0)
    p = plan(labels, site_spec(loopback={"enabled": False}))
    done = pairs_and_check_sites(p, labels)
    assert len(done) == len(all_pairs)
    bound = site_lower_bound(site_of, all_pairs)
    assert bound <= p.rounds_per_setting <= 1.01 * bound


def test_site_exclusive_lp_plan_is_deterministic() -> None:
    """The LP's schedule does not depend on the agents' order (or the run): resumed runs re-plan the same rounds."""
    labels, _, _ = mixed([2] * 8, 2)
    p1 = plan(labels, site_spec())
    p2 = plan(dict(reversed(list(labels.items()))), site_spec())
    assert p1.pair_rounds == p2.pair_rounds


def test_site_label_is_the_benchmarks_choice() -> None:
    labels = sited([2, 2], label="example.org/site")
    nodes_only = plan(labels, site_spec())  # the zone label is absent: every node a site of its own
    by_site = plan(labels, site_spec(siteLabel="example.org/site"))
    assert nodes_only.rounds_per_setting == lower_bound(4) == 6
    # two sites of two: 8 tests between them one at a time, each site's 2 inner ones beside the other's
    assert by_site.rounds_per_setting == 10
    pairs_and_check_sites(by_site, labels, "example.org/site")


def test_serial_runs_one_test_at_a_time() -> None:
    p = plan(names(5), parse_spec({"protocols": ["gridftp"], "streams": [8, 1], "roundPolicy": "serial"}))
    assert p.rounds_per_setting == 20 and all(len(r) == 1 for r in p.pair_rounds)
    assert len({(t.source, t.destination, t.setting) for t in p.tests()}) == p.num_tests
    assert len(p.round(0)) == 5  # the loopback round stays one round: each node against itself, no network


def test_round_policy_in_the_spec() -> None:
    from tpcmesh_operator.plan.spec import SpecError, to_dict

    spec = parse_spec({"roundPolicy": "siteExclusive", "siteLabel": "example.org/site"})
    assert parse_spec(to_dict(spec)) == spec
    assert parse_spec({}).round_policy == "nodeExclusive" and parse_spec({}).site_label == ZONE
    with pytest.raises(SpecError, match=r"spec.roundPolicy: must be one of nodeExclusive, siteExclusive, serial"):
        parse_spec({"roundPolicy": "parallel"})


def test_the_odd_cut_bound_of_a_graph_without_tests_is_zero() -> None:
    """A random subset of pairs may be empty (hypothesis found it in CI): no vertex, no odd set, no Gomory-Hu tree."""
    for site_of, pairs in (([0, 1, 2], []), ([0, 0, 1], [(0, 2)])):
        graph = siterounds.SiteGraph.of(site_of, pairs)
        assert siterounds.odd_set_cut_bound(graph, graph.sites) == graph.max_degree
