"""FilterSets: each filter narrows the measurements as documented."""

from datetime import UTC, datetime, timedelta

import pytest
from results.filters import MeasurementFilterSet, NodeFilterSet, RunFilterSet
from results.models import Measurement, Node, Run

from tests.support.dashboard import batch, ingest, measurement

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 1, 10, 12, tzinfo=UTC)


@pytest.fixture
def data():
    ingest(batch([
        measurement("a", "b", protocol="builtin", streams=1, finished=T0),
        measurement("a", "b", protocol="builtin", streams=8, finished=T0 + timedelta(hours=1)),
        measurement("b", "a", protocol="gridftp", streams=1, finished=T0 + timedelta(hours=2), status="failed",
                    gbps=None, error="boom"),
        measurement("a", "c", protocol="rtt", finished=T0 + timedelta(hours=3)),
    ], name="one", run="r1", nodes=[{"name": "a", "site": "s1"}, {"name": "b", "site": "s2"}]))
    ingest(batch([measurement("c", "a", protocol="builtin", finished=T0 + timedelta(days=1))], namespace="other",
                 name="two", run="r2"))


def count(**params):
    return MeasurementFilterSet(params, queryset=Measurement.objects.all()).qs.count()


def test_measurement_filters(data):
    assert count() == 5
    assert count(benchmark="mesh/one") == 4
    assert count(benchmark="two") == 1
    assert count(source="a") == 3
    assert count(destination="a") == 2
    assert count(protocol=["builtin"]) == 3
    assert count(protocol=["builtin", "gridftp"]) == 4
    assert count(streams=8) == 1
    assert count(status=["failed"]) == 1
    assert count(run="uid-r2") == 1
    assert count(finished_after=(T0 + timedelta(hours=2)).isoformat()) == 3
    assert count(finished_before=(T0 + timedelta(hours=1)).isoformat()) == 1
    assert count(source="a", destination="b", streams=1) == 1


def test_invalid_filter_value_is_reported(data):
    fs = MeasurementFilterSet({"protocol": ["warp-drive"]}, queryset=Measurement.objects.all())
    assert not fs.is_valid() and "protocol" in fs.errors


def test_node_and_run_filters(data):
    assert NodeFilterSet({"site": "s1"}, queryset=Node.objects.all()).qs.get().name == "a"
    assert NodeFilterSet({"name__ic": "A"}, queryset=Node.objects.all()).qs.count() == 1
    assert RunFilterSet({"benchmark": "other/two"}, queryset=Run.objects.all()).qs.get().name == "r2"
