"""Each cause of a slow cell injected in the WAN lab with the real kernel (issue #26), labelled by the limit model:
`make bench-diagnosis`'s plan with one pair per cause and its loss cause made to hold on a loaded machine
(diagnosisbench.SUITE_CAUSES), iperf3 at 1 and 8 streams (lab/tpcmesh_lab/diagnosisrun.py
reads the figures where the lab holds them until the agents carry host telemetry)."""

from __future__ import annotations

import pytest
from tpcmesh_lab import diagnosisbench
from tpcmesh_lab.diagnosisrun import labelled
from tpcmesh_lab.hostlimits import cpu_unavailable_reason
from tpcmesh_lab.netns import Lab, netns_unavailable_reason
from tpcmesh_lab.profile import parse_profile

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}"),
    pytest.mark.skipif(bool(cpu_unavailable_reason()), reason=f"no CPU quota here: {cpu_unavailable_reason()}"),
]

SECONDS = 3


def test_every_injected_cause_is_labelled_with_its_limit():
    plan = diagnosisbench.plan(diagnosisbench.SUITE_CAUSES, pairs_per_cause=1)
    with Lab(parse_profile(plan.profile, "bench-diagnosis"), mode="netns") as lab:
        rows = labelled(lab, plan, SECONDS)
    report = "\n".join(f"{t.cause.name} ({t.streams} streams): {d.limit}: {d.reason}" for t, d in rows)
    print(report)
    score = diagnosisbench.score((t, d.limit) for t, d in rows)
    print("\n".join(score.table()))
    assert score.total == len(plan.tests) and {t.cause for t in plan.tests} == set(diagnosisbench.SUITE_CAUSES)
    wrong = [(t.cause.name, t.streams, d.limit) for t, d in rows if d.limit != t.cause.expected]
    assert not wrong, report
