#!/usr/bin/env python
"""make bench-changes: change detection (results/stats/changes.py) on seeded synthetic histories; writes the
figures into BENCHMARKS.md between <!-- bench-changes:start --> and <!-- bench-changes:end -->. The unit test
tests/unit/dashboard/test_changes.py holds the same figures to the goals."""

from __future__ import annotations

import sys
import time

from section import publish  # first: it puts the repository on the path

# isort: split
from results.stats import changes, synthetic


def main() -> int:
    t0 = time.perf_counter()
    f = synthetic.measure()
    seconds = time.perf_counter() - t0
    ok = f.detection_rate >= 0.95 and f.false_per_100_runs < 1
    body = "\n".join([
        "## Change detection (`make bench-changes`)",
        "",
        f"`results/stats/changes.py`: binary segmentation (ruptures) of log values, L1 cost, segments ≥ "
        f"{changes.MIN_RUNS} runs, penalty {changes.BETA} × noise × ln n, a change only if the medians differ by ≥ "
        f"{(changes.MIN_RATIO - 1) * 100:.0f} %, run online on the newest {changes.WINDOW} runs as each run arrives. "
        f"Synthetic histories (`results/stats/synthetic.py`, seeded): log-normal run-to-run noise of CV "
        f"{synthetic.NOISE_CV:.0%} and {synthetic.OUTLIER_RATE:.0%} of the runs dropped to 20-60 % of their level.",
        "",
        "| case | histories | runs | result |",
        "|---|---:|---:|---|",
        f"| a step of 20 % (×0.8 or ×1.2) after 25 runs | {f.steps} | {f.steps * 29:,} | found within "
        f"{synthetic.DETECT_WITHIN} runs in **{f.detection_rate:.1%}**, median {f.median_delay:.0f} runs after it |",
        f"| noise and outliers only | {f.noise_runs // 110} | {f.noise_runs:,} | **{f.false_per_100_runs:.2f}** "
        "false changes per 100 runs |",
        f"| a trend of −1 %/run (−45 % in 60 runs) | 5 | {f.trend_runs} | {f.trend_changes} changes "
        f"({100 * f.trend_changes / f.trend_runs:.1f} per 100 runs; 10.0 before the drift check): a break that "
        "a straight line fits about as well is no step, the rest of a slide still shows as a few steps |",
        "",
        f"Goals: ≥ 95 % of 20 % steps within 3 runs, < 1 false change per 100 runs: **{'met' if ok else 'NOT met'}**. "
        f"{seconds:.1f} s for the {f.steps * 29 + f.noise_runs + f.trend_runs:,} runs.",
    ])
    return publish("bench-changes", body, ok)


if __name__ == "__main__":
    sys.exit(main())
