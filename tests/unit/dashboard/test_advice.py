"""Advice per link (results/stats/advice.py): levels, best and knee; the next run's setting, run after run on
synthetic links with known optima (results/stats/synthetic.py), converges within a bounded number of runs, and a
deliberately bad rule fails the same check."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from results.stats import synthetic
from results.stats.advice import (
    DECIDE_RUNS,
    KNEE_MARGIN,
    Bounds,
    BoundsError,
    Next,
    Observation,
    Setting,
    advise,
    next_settings,
)

SEEDS = range(4)


def runs(*pairs: tuple[Setting, list[float]]) -> list[Observation]:
    return [Observation(s, v) for s, values in pairs for v in values]


@pytest.mark.parametrize("link", [*synthetic.LINKS, synthetic.PLATEAU], ids=lambda link: link.name)
def test_advise_names_the_known_best_and_knee(link):
    """Every setting of the link's grid measured 20 times (noise and outliers): the best is the known optimum and
    the knee the cheapest setting within 5 % of it; on the plateau the knee is one doubling of streams below."""
    rng = np.random.default_rng(1)
    history = [Observation(s, link.measure(rng, s)) for _ in range(20) for s in link.bounds.grid()]
    advice = advise(history)
    assert advice.best == link.optimum(), advice.reason
    assert advice.knee == link.knee(KNEE_MARGIN), advice.reason
    if link is synthetic.PLATEAU:
        assert advice.knee == Setting(4, 3) != advice.best
        assert "within 5% of it" in advice.reason and "beyond 4 streams × 3 files" in advice.reason
    else:
        assert "also the knee" in advice.reason


def test_advise_gives_each_setting_its_level_cheapest_first():
    a, b, c = Setting(1, 1), Setting(4, 1), Setting(2, 4)
    advice = advise(runs((c, [9.0, 10.0, 11.0, 10.0]), (a, [2.0, 2.2, 1.8]), (b, [9.7, 9.6]), (a, [2.1])))
    assert [lv.setting for lv in advice.settings] == [a, b, c]  # 1, 4, 8 connections
    one, four, eight = advice.settings
    assert (one.runs, one.median) == (4, pytest.approx(2.05))
    assert one.level is not None and one.level.low <= one.median <= one.level.high
    assert four.level is None  # two runs: no interval, not counted for best or knee
    assert advice.best == c and advice.knee == c


def test_advise_without_enough_runs_says_so():
    assert advise([]).best is None and advise([]).reason == "no runs yet"
    advice = advise(runs((Setting(1, 1), [1.0, 1.1])))
    assert advice.best is None and "3 runs" in advice.reason
    with pytest.raises(ValueError, match="finite"):
        advise(runs((Setting(1, 1), [1.0, float("nan")])))


@pytest.mark.parametrize("link", [*synthetic.LINKS, synthetic.PLATEAU], ids=lambda link: link.name)
def test_next_settings_converges_to_the_known_optimum(link):
    """The acceptance test: from no history, the rule reaches the link's optimum (on the plateau: a setting
    within 5 % of it) within CONVERGE_WITHIN runs, keeps it, and runs it at least 80 % of the time after."""
    margin = KNEE_MARGIN if link is synthetic.PLATEAU else 0.0
    if link is not synthetic.PLATEAU:
        assert link.near_optimal(KNEE_MARGIN) == {link.optimum()}  # the optimum is unambiguous
    for seed in SEEDS:
        climb = synthetic.optimise(link, seed, margin=margin)
        assert climb.shortfall() is None, (seed, climb.shortfall())


def test_the_rule_follows_a_link_whose_optimum_moved():
    """The lan link settled on 2 streams × 4 files; then 8 streams become best (a longer path, say): the newest
    runs of each setting and the revisits carry the climb there (60 runs here; `make bench-advice` has more)."""
    lan = next(link for link in synthetic.LINKS if link.name == "lan")
    moved = dataclasses.replace(lan, best=Setting(8, 4))
    after = synthetic.follow(lan, moved, seed=0)
    assert after is not None and after <= synthetic.ADVICE_RUNS, after


def _never_explores(history: list[Observation], bounds: Bounds) -> Next:
    """Pure exploitation: the best median seen so far (the start when there is none)."""
    advice = advise(history)
    best = advice.best or bounds.start
    return Next(best, "exploit", "", best)


def _streams_only(history: list[Observation], bounds: Bounds) -> Next:
    return next_settings(history, dataclasses.replace(bounds, concurrency_max=bounds.concurrency_min))


@pytest.mark.parametrize("rule", [_never_explores, _streams_only], ids=lambda rule: rule.__name__)
def test_the_convergence_check_fails_a_bad_rule(rule):
    failed = [synthetic.optimise(link, 0, runs=80, rule=rule).shortfall() for link in synthetic.LINKS]
    assert all(failed), failed


def test_a_flat_link_stays_on_the_cheapest_setting():
    """Stop climbing when the gain is below the noise: on a link where nothing helps, the rule tries each
    neighbour, decides, and exploits the start; it still revisits a neighbour every EXPLORE_EVERY runs."""
    rng = np.random.default_rng(5)
    bounds = Bounds(1, 8, 1, 4, 1)
    history: list[Observation] = []
    chosen = []
    for _ in range(60):
        step = next_settings(history, bounds)
        chosen.append(step)
        history.append(Observation(step.setting, float(synthetic.noisy(rng, np.array([5.0]))[0])))
    assert all(n.current == bounds.start for n in chosen)
    tail = chosen[40:]
    assert [n.action for n in tail].count("revisit") == 2
    assert {n.action for n in tail} <= {"exploit", "revisit", "decide"}
    assert sum(n.setting == bounds.start for n in tail) >= 0.8 * len(tail)


def test_the_rule_step_by_step():
    bounds = Bounds(streams_min=2, streams_max=6, concurrency_min=1, concurrency_max=4, concurrency_step=2)
    start = Setting(2, 1)
    first = next_settings([], bounds)
    assert (first.setting, first.action) == (start, "start")
    assert next_settings(runs((start, [1.0])), bounds).action == "confirm"
    history = runs((start, [1.0, 1.0, 1.1]))
    assert [lv for lv in bounds.neighbours(start)] == [Setting(4, 1), Setting(2, 3)]  # upward first, clamped
    step = next_settings(history, bounds)
    assert (step.setting, step.action) == (Setting(4, 1), "explore")
    history += runs((Setting(4, 1), [2.0]))  # looks twice as good: decide with more runs
    step = next_settings(history, bounds)
    assert (step.setting, step.action) == (Setting(4, 1), "decide") and "100% better" in step.reason
    history += runs((Setting(4, 1), [2.1, 1.9]))
    step = next_settings(history, bounds)
    assert step.current == Setting(4, 1)  # three above three: better, the climb moved
    assert bounds.neighbours(Setting(4, 1))[0] == Setting(6, 1)  # x2 clamped to streams_max
    # settings outside the bounds are ignored by the rule
    assert next_settings(runs((Setting(64, 1), [99.0] * 5)), bounds).action == "start"


def test_a_gain_the_test_cannot_see_is_given_up_after_decide_runs():
    a, b = Setting(1, 1), Setting(2, 1)
    bounds = Bounds(1, 2, 1, 1, 1)
    noisy = [1.0, 1.3, 0.8, 1.2, 0.9, 1.25, 0.85, 1.1, 0.95, 1.15][:DECIDE_RUNS]
    history = runs((a, noisy), (b, [v * 1.04 for v in reversed(noisy)]))  # 4 % higher medians, same spread
    step = next_settings(history, bounds)
    assert step.current == a and step.action in ("exploit", "revisit")


def test_a_failing_setting_counts_as_zero_and_is_left():
    """A neighbour whose run failed (e.g. the agent refused streams × files, or ran out of memory) is not better:
    the rule does not try it again and again for want of a success."""
    assert Observation.of(4, 2, None, "failed") == Observation(Setting(4, 2), 0.0)
    assert Observation.of(None, None, 3.0) == Observation(Setting(1, 1), 3.0)
    assert Observation.of(4, 2, 9.0, "cancelled") is None and Observation.of(4, 2, None) is None
    bounds = Bounds(1, 2, 1, 1, 1)
    history = runs((Setting(1, 1), [1.0, 1.1, 0.9]))
    assert next_settings(history, bounds).setting == Setting(2, 1)
    history.append(Observation.of(2, 1, None, "failed"))
    assert next_settings(history, bounds).action == "exploit"


def test_no_neighbour_has_more_connections_than_allowed():
    bounds = Bounds(streams_max=64, concurrency_max=64, connections_max=64)
    assert bounds.neighbours(Setting(8, 8)) == [Setting(4, 8), Setting(8, 7)]  # 16 × 8 and 8 × 9: over 64
    assert all(s.streams * s.concurrency <= 64 for s in bounds.grid())
    assert not bounds.contains(Setting(16, 8))


@pytest.mark.parametrize(("change", "field"), [({"streams_min": 0}, "streams_min"),
                                               ({"streams_max": 101}, "streams_max"),
                                               ({"concurrency_step": 0}, "concurrency_step"),
                                               ({"streams_min": 8, "streams_max": 4}, "streams_max"),
                                               ({"concurrency_min": 5, "concurrency_max": 4}, "concurrency_max"),
                                               ({"streams_min": 4, "concurrency_min": 4, "connections_max": 15},
                                                "connections_max")])
def test_bad_bounds_name_the_field(change, field):
    with pytest.raises(BoundsError) as err:
        Bounds(**change)
    assert err.value.field == field and str(err.value).startswith(field)

