"""The run's MeshHealthy condition, a pass/fail gate for pipelines (`kubectl wait --for=condition=MeshHealthy
transferrun/<name>` before a DTN upgrade or after a kernel change): once every measurement of the run is delivered,
the dashboard diagnoses the benchmark's grid and runs its problem rules (POST /api/v1/problems/evaluate/), and the
condition says whether any problem is open, naming them in its message.

- True, NoProblems: the dashboard found none;
- False, ProblemsOpen: the open problems, most severe first (summaries, cut to fit a condition message);
- Unknown: NoDashboard (the run has no results endpoint), Undelivered (measurements still wait, so the grid is not
  the run's), DashboardUnavailable (it did not answer; why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .delivery import ProblemsUnavailable
from .ports import RunInfo
from .status import set_condition

CONDITION = "MeshHealthy"
MESSAGE_MAX = 1000
SEVERITY_ORDER = {"critical": 0, "warning": 1}


def describe(problems: Sequence[Mapping[str, Any]]) -> tuple[bool, str, str]:
    """(healthy, reason, message) for the open problems the dashboard gave. Pure."""
    if not problems:
        return True, "NoProblems", "the dashboard finds no open problem in the benchmark's grid"
    ordered = sorted(problems, key=lambda p: (SEVERITY_ORDER.get(str(p.get("severity")), 2), str(p.get("key"))))
    lines = "; ".join(f"{p.get('severity')} {p.get('kind')}: {p.get('summary')}" for p in ordered)
    return False, "ProblemsOpen", f"{len(problems)} open problem(s): {lines}"[:MESSAGE_MAX]


async def judge(results_client: Any, run: RunInfo, status: dict[str, Any]) -> None:
    """Set the condition on `status` (the run's, after its final delivery)."""
    ask = getattr(results_client, "open_problems", None)
    if ask is None:
        set_condition(status, CONDITION, None, "NoDashboard", "the run has no results endpoint (spec.results) to "
                                                              "judge the mesh")
        return
    if status.get("outbox"):
        set_condition(status, CONDITION, None, "Undelivered", f"{len(status['outbox'])} measurement(s) wait for "
                                                              "the dashboard: the grid is not yet this run's")
        return
    try:
        problems = await ask(run.benchmark_namespace, run.benchmark_name, run.cluster)
    except ProblemsUnavailable as e:
        set_condition(status, CONDITION, None, "DashboardUnavailable", str(e)[:MESSAGE_MAX])
        return
    healthy, reason, message = describe(problems)
    set_condition(status, CONDITION, healthy, reason, message)
