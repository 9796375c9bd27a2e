#!/usr/bin/env python
"""make bench-advice: the advice's rule (results/stats/advice.py, next_settings) run after run on the synthetic
links of results/stats/synthetic.py, SEEDS histories each: how many runs until it stands on the known optimum,
how well it holds it, how often it runs it. Writes BENCHMARKS.md between <!-- bench-advice:start --> and
<!-- bench-advice:end -->. The unit test tests/unit/dashboard/test_advice.py holds 4 of the seeds to the goals."""

from __future__ import annotations

import dataclasses
import sys
import time

import numpy as np
from section import publish  # first: it puts the repository on the path

# isort: split
from results.stats import advice, synthetic

SEEDS = 20


def main() -> int:
    t0 = time.perf_counter()
    rows, failures = [], []
    for link in (*synthetic.LINKS, synthetic.PLATEAU):
        margin = advice.KNEE_MARGIN if link is synthetic.PLATEAU else 0.0
        climbs = [synthetic.optimise(link, seed, margin=margin) for seed in range(SEEDS)]
        failures += [c.shortfall() for c in climbs if c.shortfall()]
        reached = [c.reached_at + 1 for c in climbs if c.reached_at is not None]  # runs made, counting that one
        b = link.bounds
        target = (str(link.optimum()) if margin == 0 else
                  f"within 5 %: {', '.join(str(s) for s in sorted(link.near_optimal(margin), key=lambda s: s.cost))}")
        rows.append(
            f"| {link.name} | streams {b.streams_min}–{b.streams_max}, files {b.concurrency_min}–"
            f"{b.concurrency_max} step {b.concurrency_step} ({len(b.grid())} settings) | {target} | "
            f"{np.median(reached):.0f} | {max(reached)} | {np.mean([c.held for c in climbs]):.1%} | "
            f"{np.mean([c.ran_good for c in climbs]):.1%} |")
    lan = synthetic.LINKS[0]
    moved = dataclasses.replace(lan, best=advice.Setting(8, 4))
    followed = [synthetic.follow(lan, moved, seed) for seed in range(SEEDS)]
    took = sorted(f for f in followed if f is not None)
    seconds = time.perf_counter() - t0
    ok = not failures
    body = "\n".join([
        "## Advice per link: the optimize rule on synthetic links (`make bench-advice`)",
        "",
        f"`results/stats/advice.py` `next_settings`: a hill climb from the lowest setting (streams ×2/÷2, files "
        f"±step), a move needs {advice.MIN_RUNS}+ runs each, a median gain > {advice.MIN_GAIN:.0%} and a one-sided "
        f"Mann-Whitney p < {advice.ALPHA}; an undecided gain is measured up to {advice.DECIDE_RUNS} runs each, then "
        f"given up as below the noise; a settled link revisits a neighbour every {advice.EXPLORE_EVERY} runs. "
        f"Synthetic links (`results/stats/synthetic.py`): a peak per axis, noise CV {synthetic.NOISE_CV:.0%} and "
        f"{synthetic.OUTLIER_RATE:.0%} outliers; {SEEDS} seeded histories of {synthetic.ADVICE_RUNS} runs per link, "
        "from no history.",
        "",
        "| link | bounds | target | runs to reach it (median) | (max) | runs holding it after | runs running it "
        "after |",
        "|---|---|---|---:|---:|---:|---:|",
        *rows,
        "",
        f"A link that changes: {lan.name} settled for {synthetic.FOLLOW_AFTER} runs, then its optimum moves from "
        f"{lan.optimum()} to {moved.optimum()}: the climb stands on the new one after {np.median(took):.0f} runs "
        f"(median, max {max(took)}; {len(took)} of {SEEDS} histories within {synthetic.ADVICE_RUNS} runs), carried "
        f"by each setting's newest {advice.LEVEL_RUNS} runs and the revisits alone (the rule does not look for "
        "step changes).",
        "",
        f"Goal (each history): reached within {synthetic.CONVERGE_WITHIN} runs, held in ≥ {synthetic.HOLD:.0%} of the "
        f"runs after, run in ≥ {synthetic.EXPLOIT:.0%}: **{'met' if ok else 'NOT met'}**"
        + ("" if ok else f" ({len(failures)} histories: {'; '.join(failures[:3])})")
        + f". {seconds:.1f} s.",
    ])
    return publish("bench-advice", body, ok)


if __name__ == "__main__":
    sys.exit(main())
