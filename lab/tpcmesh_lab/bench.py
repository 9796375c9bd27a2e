"""`python -m tpcmesh_lab.bench planner`: planning time and rounds vs the lower bound, into BENCHMARKS.md."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections import Counter
from pathlib import Path

from tpcmesh_operator.plan.planner import (
    _busiest_first_schedule,
    _circle_schedule,
    lower_bound,
    plan,
    site_lower_bound,
)
from tpcmesh_operator.plan.spec import DEFAULT_SITE_LABEL, parse_spec

from .report import utc_minute, write_section

SECTION = "bench-planner"


def measure(n: int, spec_raw: dict, repeats: int) -> dict:
    spec = parse_spec(spec_raw)
    agents = [f"node-{i:04d}" for i in range(n)]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        p = plan(agents, spec)
        first = p.round(0)  # materialise one round's tests too
        times.append(time.perf_counter() - t0)
    assert first
    # full check of the property on the result: no agent twice in any round
    for r in p.pair_rounds:
        seen: set[int] = set()
        for s, d in r:
            assert s not in seen and d not in seen
            seen.update((s, d))
    return {"n": n, "settings": len(p.settings), "tests": p.num_tests, "rounds": p.rounds_per_setting,
            "bound": lower_bound(n), "total_rounds": p.num_rounds, "seconds": statistics.median(times)}


def site_sizes(n: int, sites: int, equal: bool) -> list[int]:
    """``n`` agents in ``sites`` sites: equal, or unequal (a fixed spread from 1 to about twice the mean)."""
    if equal:
        return [n // sites + (i < n % sites) for i in range(sites)]
    weights = [1 + (i * 37) % sites for i in range(sites)]
    sizes = [max(1, n * w // sum(weights)) for w in weights]
    sizes[-1] += n - sum(sizes)
    return sizes


def measure_sites(n: int, sites: int, equal: bool, spec_raw: dict, sizes: list[int] | None = None) -> dict:
    """siteExclusive: one plan, checked (no site twice in a round, every pair once), rounds vs site_lower_bound.
    ``sizes``: the sites' sizes given (a small uneven mix), else site_sizes(n, sites, equal); for small mixes the
    rounds the circle method and the busiest-first greedy take alone (before the LP) too."""
    sizes = sizes or site_sizes(n, sites, equal)
    n, sites = sum(sizes), len(sizes)
    labels = {f"s{s:02d}-n{i:04d}": {DEFAULT_SITE_LABEL: f"site-{s:02d}"}
              for s, k in enumerate(sizes) for i in range(k)}
    spec = parse_spec({**spec_raw, "roundPolicy": "siteExclusive"})
    t0 = time.perf_counter()
    p = plan(labels, spec)
    p.round(0)
    seconds = time.perf_counter() - t0
    site_of = [int(a[1:3]) for a in p.agents]
    pairs = 0
    for r in p.pair_rounds:
        busy: set[int] = set()
        for s, d in r:
            here = {site_of[s], site_of[d]}
            assert not busy & here, "a site in two tests of a round"
            busy |= here
            pairs += 1
    assert pairs == n * (n - 1)
    all_pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    t0 = time.perf_counter()
    bound = site_lower_bound(site_of, all_pairs)
    bound_seconds = time.perf_counter() - t0
    fast = None
    if n <= 100:
        fast = min(len(_circle_schedule(site_of, all_pairs)), len(_busiest_first_schedule(site_of, all_pairs)))
    described = " + ".join(f"{k}×{size}" if k > 1 else str(size)
                           for size, k in sorted(Counter(sizes).items(), reverse=True))
    if n > 100 or equal:
        described = f"{min(sizes)}-{max(sizes)}"
    return {"n": n, "sites": sites, "sizes": described, "rounds": p.rounds_per_setting, "bound": bound, "fast": fast,
            "node_rounds": lower_bound(n), "seconds": seconds, "bound_seconds": bound_seconds}


def render_sites(rows: list[dict]) -> str:
    lines = [
        "",
        "`roundPolicy: siteExclusive` (no site in two tests of a round, so tests never share a site's uplink), full "
        "mesh, one plan each, checked. A round is a matching of the site multigraph (a test between two sites an "
        "edge, one within a site an edge to the site's own dummy vertex). Site lower bound: max(Δ, ⌈Γ⌉) per setting, "
        "Δ the busiest site's tests, Γ the densest odd vertex set's 2|E(U)|/(|U|−1) "
        "(plan/planner.py, plan/siterounds.py); "
        "the optimum is the bound or one more (Goldberg–Seymour). Equal sites: the circle method; uneven ones: the "
        "fractional edge-colouring LP (column generation, HiGHS) and its integer rounding when the circle method and "
        "the busiest-first greedy miss the bound (their rounds: \"before the LP\", small mixes only; six sites of "
        "3 and a lone agent was the greedy's worst of 12,007 small mixes).",
        "",
        "| agents | sites | agents per site | rounds per setting | site lower bound | ratio | before the LP "
        "| node-exclusive rounds | planning time | bound's time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fast = "–" if r["fast"] is None else str(r["fast"])
        lines.append(f"| {r['n']} | {r['sites']} | {r['sizes']} | {r['rounds']} | {r['bound']} | "
                     f"{r['rounds'] / r['bound']:.3f} | {fast} | {r['node_rounds']} | {r['seconds'] * 1000:.0f} ms | "
                     f"{r['bound_seconds'] * 1000:.0f} ms |")
    return "\n".join(lines)


def render(rows: list[dict], spec_desc: str) -> str:
    lines = [
        "## Mesh planner (`make bench-planner`)",
        "",
        f"Full directed mesh, {spec_desc}; median of 3 plans (pure Python, {platform.python_version()}, "
        f"{os.cpu_count()} cores), {utc_minute()}. Goal: 1000 agents in under 1 s, rounds = lower bound "
        "⌈N(N−1)/⌊N/2⌋⌉ per setting. Tests in a round never share an agent (checked on every plan). The plan "
        "holds the pair rounds once for all settings; a round's tests are materialised when it is dispatched "
        "(timed here: the plan plus its first round).",
        "",
        "| agents | settings | tests | rounds per setting | lower bound | total rounds | planning time | goal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ok = r["rounds"] == r["bound"] and (r["n"] < 1000 or r["seconds"] < 1.0)
        lines.append(f"| {r['n']} | {r['settings']} | {r['tests']:,} | {r['rounds']} | {r['bound']} | "
                     f"{r['total_rounds']} | {r['seconds'] * 1000:.2f} ms | {'yes' if ok else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tpcmesh_lab.bench")
    ap.add_argument("what", choices=["planner"])
    ap.add_argument("--agents", default="10,100,1000")
    ap.add_argument("--output", type=Path, default=None, help="BENCHMARKS.md to update (section bench-planner)")
    args = ap.parse_args(argv)
    spec_raw = {"protocols": ["xrootd-https", "gridftp"], "streams": [8, 1], "latency": True}
    rows = [measure(int(n), spec_raw, 3) for n in args.agents.split(",")]
    body = render(rows, "the paper's settings (RTT + xrootd-https and gridftp × streams 8 and 1 = 5 settings)")
    site_rows = [measure_sites(n, sites, equal, spec_raw)
                 for n, sites, equal in ((100, 10, True), (1000, 50, True), (1000, 49, True), (1000, 50, False))]
    site_rows += [measure_sites(0, 0, False, spec_raw, sizes)
                  for sizes in ([3] * 6 + [1], [4, 4, 4, 1], [2] * 8 + [1, 1], [3, 3, 3, 3, 5, 5, 5, 5, 1])]
    body += "\n" + render_sites(site_rows)
    print(body)
    if args.output:
        write_section(args.output, SECTION, body)


if __name__ == "__main__":
    main()
