"""Migration 0015_cell_diagnosis: the measurements 0014 diagnosed that are still their cell's newest get their cell's
diagnosis (a grid read before the next analysis shows them); an undiagnosed one gives none. Its members are what
gridcell writes today."""

from datetime import UTC, datetime

import pytest
from results import gridcell

from tests.support.migrations import latest, migrate

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BEFORE = [("results", "0014_diagnosis")]
AFTER = [("results", "0015_cell_diagnosis")]
WHY = {"limit": "receive-window", "reason": "receive-window: 0.336 Gbit/s sits at 1 × 2.4 MB ÷ 53 ms",
       "fix": "raise net.ipv4.tcp_rmem max on far"}


def test_diagnosed_newest_measurements_fill_their_cells():
    old = migrate(BEFORE)
    try:
        Node, Benchmark, Run, Measurement, PairLatest = (old.get_model("results", m) for m in (
            "Node", "Benchmark", "Run", "Measurement", "PairLatest"))
        a, b, far = (Node.objects.create(name=n) for n in ("a", "b", "far"))
        bench = Benchmark.objects.create(namespace="ns", name="mesh")
        run = Run.objects.create(benchmark=bench, uid="u", name="r")
        at = datetime.now(UTC).replace(microsecond=0)

        def cell(src, dst, **diagnosed):
            m = Measurement.objects.create(run=run, benchmark=bench, source=src, destination=dst, protocol="builtin",
                                           streams=1, throughput_gbps=0.336, status="succeeded", started_at=at,
                                           finished_at=at, **diagnosed)
            return PairLatest.objects.create(benchmark=bench, protocol="builtin", streams=1, source=src,
                                             destination=dst, measurement=m, finished_at=at, status="succeeded")

        into = cell(a, far, binding_limit="receive-window", efficiency=0.12, diagnosis=WHY)
        plain = cell(b, far)  # not diagnosed

        new = migrate(AFTER)
        CellDiagnosis = new.get_model("results", "CellDiagnosis")
        got = CellDiagnosis.objects.get()
        assert (got.cell_id, got.measurement_id, got.binding_limit, got.efficiency) == (
            into.id, into.measurement_id, "receive-window", 0.12)
        assert got.members == gridcell.diagnosis_members({"binding_limit": "receive-window", "efficiency": 0.12,
                                                          "evidence": WHY["reason"], "fix": WHY["fix"]})
        assert not CellDiagnosis.objects.filter(cell_id=plain.id).exists()
    finally:
        latest()
